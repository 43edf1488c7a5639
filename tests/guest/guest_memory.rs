//! Guest memory the daemon touched (`--release-guest-memory`), in a real guest. The guest
//! copies 32 MiB into the share and reads it back through a dropped page cache: every page of
//! both copies passes through the daemon, mapped into it as it copies. Then, while the guest
//! waits, the host reads the serving process's RssShmem (the guest pages it has mapped): with
//! the default (release every second while requests flow) it falls to a few pages; with
//! `--release-guest-memory 0` (virtiofsd's behaviour) it stays at the data's size. The guest
//! then reads everything again, buffered and O_DIRECT, and the data is what it wrote; a third
//! daemon releases every 10 ms while two copies run at once, so that pages go while workers
//! copy into them.

use std::fs;
use std::time::{Duration, Instant};

use testkit::guest::{Backend, Guest, Mode};
use testkit::live::{self, Live};
use testkit::{guest, proc, tmpfs};

/// MiB the guest copies each way.
const DATA_MIB: u64 = 32;

/// Writes DATA_MIB of random data into the share, reads it back uncached, says so and waits for
/// the host's look; then reads it again (buffered and O_DIRECT) and compares. With `racing`,
/// two such files are written and read at once.
fn scenario(racing: bool) -> String {
    let copies = if racing { "1 2" } else { "1" };
    format!(
        r#"
dd if=/dev/urandom of=/tmp/src bs=1M count={DATA_MIB} 2>/dev/null
want=$(md5sum </tmp/src)
for i in {copies}; do cp /tmp/src /mnt/data$i & done
wait
sync
echo 3 > /proc/sys/vm/drop_caches
for i in {copies}; do expect_eq "$(md5sum </mnt/data$i)" "$want" "copy $i read back" & done
wait
: > /mnt/.written
i=0
while [ ! -e /mnt/.sampled ]; do
    i=$((i+1)); [ $i -lt 1200 ] || fail "the host did not look"; sleep 0.05
done
echo 3 > /proc/sys/vm/drop_caches
for i in {copies}; do
    expect_eq "$(md5sum </mnt/data$i)" "$want" "copy $i after the host looked"
    expect_eq "$(dd if=/mnt/data$i iflag=direct bs=1M 2>/dev/null | md5sum)" "$want" "copy $i O_DIRECT"
done
echo "DATA INTACT"
"#
    )
}

/// Boots a guest against our daemon with `extra` arguments, runs the scenario and, once the
/// guest has copied, calls `look` with the serving process's RssShmem (KiB) and the time since
/// the copies, until it returns Some (or for 20 s); returns what it returned (else the last
/// RssShmem) and the daemon's log.
fn run(extra: &[&str], racing: bool, look: impl Fn(u64, Duration) -> Option<u64>) -> (u64, String) {
    guest::require_qemu();
    let _serial = guest::serialize_guests();
    let branch = tmpfs::Tmpfs::new("256M");
    let mut args = vec!["-o", "minfreespace=0"];
    args.extend_from_slice(extra);
    let backend = Backend::union(&[(branch.path(), Mode::Rw)], &args).at_info();
    let mut live = Live::start(&backend);
    let serving = proc::sandboxed_child(live.reaper.0[0].id());
    let guest = Guest {
        timeout: Duration::from_secs(300),
        ..Guest::default()
    };
    live.boot(&guest, &scenario(racing));
    let transcript = || guest::live_transcript(&live.console, &live.daemon_log);
    let deadline = Instant::now() + guest.timeout;
    live::wait_for_file(
        &mut live.reaper.0[1],
        &branch.path().join(".written"),
        deadline,
        "the guest never finished copying",
        transcript,
    );
    // The release runs on its own clock: look until `look` is satisfied, for up to 20 s.
    let copied = Instant::now();
    let seen = loop {
        let kib = proc::status_kib(serving, "RssShmem");
        if let Some(v) = look(kib, copied.elapsed()) {
            break v;
        }
        if copied.elapsed() > Duration::from_secs(20) {
            break kib;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    println!(
        "{extra:?}: {seen} KiB of guest memory mapped {:?} after the copies",
        copied.elapsed()
    );
    fs::write(branch.path().join(".sampled"), b"").unwrap();
    let status = guest::wait_until(&mut live.reaper.0[1], deadline);
    let text = live::assert_passed(&live.console, status, "the guest failed", transcript);
    assert!(text.contains("DATA INTACT"), "{}", transcript());
    drop(live.reaper);
    (seen, guest::read_lossy(&live.daemon_log))
}

/// Fewer guest pages than this (KiB) count as released: the rings and the few buffers of the
/// guest's polling since the last release.
const RELEASED_KIB: u64 = 2048;

#[test]
fn by_default_the_daemon_lets_go_of_the_guest_pages_it_copied() {
    let (kib, log) = run(&[], false, |kib, _| (kib <= RELEASED_KIB).then_some(kib));
    assert!(
        kib <= RELEASED_KIB,
        "the daemon still maps {kib} KiB of guest memory 20 s after the copies\n{log}"
    );
}

#[test]
fn with_release_off_the_pages_stay_mapped() {
    // Three seconds after the copies: three of the default's releases.
    let (kib, _) = run(&["--release-guest-memory", "0"], false, |kib, since| {
        (since >= Duration::from_secs(3)).then_some(kib)
    });
    // Every page of the written copy's page cache went through the daemon (the read-back may
    // land on the same guest pages): at least most of DATA_MIB.
    assert!(
        kib >= DATA_MIB * 1024 * 3 / 4,
        "only {kib} KiB of guest memory mapped after copying {DATA_MIB} MiB each way"
    );
}

#[test]
fn pages_released_while_workers_copy_keep_their_data() {
    let (kib, log) = run(&["--release-guest-memory", "0.01"], true, |kib, _| {
        (kib <= RELEASED_KIB).then_some(kib)
    });
    assert!(kib <= RELEASED_KIB, "{kib} KiB still mapped\n{log}");
    assert!(
        !log.contains("cannot release"),
        "the kernel refused a release\n{log}"
    );
}
