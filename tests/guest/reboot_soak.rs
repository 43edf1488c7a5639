//! Reboot soak (issue 23, item 4): one daemon (default sandbox and seccomp) serves 100 guest
//! resets in a row. Before each reset (sysrq b: no unmount, no FUSE_DESTROY) the guest holds
//! files open for reading and writing, a working directory, a flock and an fcntl record lock
//! in the share; the next boot's INIT ends that session. At the start of every boot, before the
//! guest touches the share again, the host counts the serving process's descriptors, reads
//! its own resident memory (RssAnon) and the locks on the branch: the descriptors are back to
//! the first boot's count (but for the new session's first files), no lock is left, and
//! memory does not grow with the boots.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use testkit::guest::{Backend, Guest, Mode};
use testkit::live::{self, Live};
use testkit::{guest, hostlocks, proc, tmpfs};

/// Boots after the first (each ending in a reset); `UVFS_SOAK_RESETS` sets fewer for a quick
/// look (at least 6).
fn resets() -> u32 {
    std::env::var("UVFS_SOAK_RESETS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
        .max(6)
}

/// Runs at every boot: says which boot this is, waits for the host to have looked, then holds
/// files, a directory and locks and resets the machine (the last boot powers off instead).
fn scenario(resets: u32) -> String {
    format!(
        r#"
T=/opt/tools/bin
n=$(cat /mnt/.boots 2>/dev/null || echo 0)
n=$((n+1))
echo $n > /mnt/.boots
: > /mnt/.boot-$n
i=0
while [ ! -e /mnt/.sampled-$n ]; do
    i=$((i+1)); [ $i -lt 1200 ] || fail "the host did not look at boot $n"; sleep 0.05
done
rm /mnt/.boot-$n /mnt/.sampled-$n
if [ $n -gt {resets} ]; then
    expect_eq "$(ls /mnt/d0 | wc -l)" {in_d0} "files made across the boots in d0"
    echo "SOAK DONE after $n boots"
    exit 0
fi
d=/mnt/d$((n % 5))
mkdir -p $d
cd $d
exec 3>open-$n
echo "boot $n" >&3
exec 4<open-$n
exec 5>/mnt/flocked
$T/flock -x 5
echo record > /mnt/plock
$T/guest_lock /mnt/plock hold /mnt/plock-held-$n &
i=0
while [ ! -e /mnt/plock-held-$n ]; do
    i=$((i+1)); [ $i -lt 600 ] || fail "no record lock at boot $n"; sleep 0.05
done
rm /mnt/plock-held-$n
echo b > /proc/sysrq-trigger
"#,
        in_d0 = resets / 5
    )
}

/// Descriptors of the new session's first files that may still be open when the host looks.
const SLACK: usize = 3;

/// What the host saw at the start of one boot.
#[derive(Debug)]
struct Sample {
    boot: u32,
    fds: usize,
    rss_kib: u64,
    locks: Vec<String>,
}

fn sample(pid: u32, branch: &Path, boot: u32) -> Sample {
    let fds = fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count();
    // RssAnon: the daemon's own memory. VmRSS also counts the pages of guest memory (a
    // shared memfd) the daemon has touched, which grow with whatever pages the guest's
    // kernel uses for its requests, up to the guest's RAM.
    let rss_kib = proc::status_kib(pid, "RssAnon");
    Sample {
        boot,
        fds,
        rss_kib,
        locks: hostlocks::locks_on_fs(branch),
    }
}

#[test]
fn one_daemon_serves_a_hundred_resets_and_returns_to_its_baseline() {
    guest::require_qemu();
    let _serial = guest::serialize_guests();
    let branch = tmpfs::Tmpfs::new("64M");
    let resets = resets();
    let backend = Backend::union(&[(branch.path(), Mode::Rw)], &["-o", "minfreespace=0"]).at_info();
    let mut live = Live::start(&backend);
    let serving = proc::sandboxed_child(live.reaper.0[0].id());
    let guest = Guest {
        reboot: true,
        timeout: Duration::from_secs(1500),
        extra_initrd: vec![guest::tools_initrd()],
        ..Guest::default()
    };
    live.boot(&guest, &scenario(resets));
    let (console, daemon_log) = (&live.console, &live.daemon_log);
    let transcript = || {
        format!(
            "----- console (last 60 lines) -----\n{}\n----- daemon -----\n{}",
            guest::read_lossy(console)
                .lines()
                .rev()
                .take(60)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n"),
            guest::read_lossy(daemon_log)
        )
    };
    let mut samples = Vec::new();
    let deadline = Instant::now() + guest.timeout;
    for boot in 1..=resets + 1 {
        live::wait_for_file(
            &mut live.reaper.0[1],
            &branch.path().join(format!(".boot-{boot}")),
            deadline,
            &format!("boot {boot} never started"),
            transcript,
        );
        samples.push(sample(serving, branch.path(), boot));
        fs::write(branch.path().join(format!(".sampled-{boot}")), b"").unwrap();
    }
    let status = guest::wait_until(&mut live.reaper.0[1], deadline);
    let text = live::assert_passed(console, status, "the last boot failed", transcript);
    assert!(text.contains(&format!("SOAK DONE after {} boots", resets + 1)));
    let ended = guest::read_lossy(daemon_log)
        .matches("session ended: dropped")
        .count();
    assert!(
        ended >= resets as usize,
        "{ended} sessions ended\n{}",
        transcript()
    );
    let fds: Vec<usize> = samples.iter().map(|s| s.fds).collect();
    let rss: Vec<u64> = samples.iter().map(|s| s.rss_kib).collect();
    println!("descriptors by boot: {fds:?}\nRssAnon KiB by boot: {rss:?}");
    let base = &samples[0];
    for s in &samples {
        assert!(
            s.locks.is_empty(),
            "boot {}: locks left from the reset session: {:?}",
            s.boot,
            s.locks
        );
        // A RELEASE the guest sends after the file it closed (asynchronously) may still be
        // on its way: a couple of handles of the new session, never one more per session.
        assert!(
            s.fds <= base.fds + SLACK,
            "boot {}: {} descriptors, {} at the first boot",
            s.boot,
            s.fds,
            base.fds
        );
    }
    // Memory: after the first few sessions (allocator arenas, caches warming) it stays flat
    // (a leak of 5 KiB a session would pass 512 KiB by the last).
    let warm = samples[5].rss_kib;
    let last = samples.last().unwrap().rss_kib;
    assert!(
        last <= warm + 512,
        "resident memory grew from {warm} KiB (boot 6) to {last} KiB at the last boot"
    );
}
