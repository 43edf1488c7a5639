//! End-to-end tests in a real QEMU guest (TCG) against `union-virtiofsd`: the guest's virtio-fs
//! driver does the I/O and the host checks which branch holds what. Needs QEMU, the guest kernel
//! and initramfs (scripts/install-deps.sh, fetch-kernel.sh, build-initramfs.sh); fails, never
//! skips, without them.

use std::fs;

use testkit::guest::{Backend, Guest, GuestRun, Mode};
use testkit::{guest, tmpfs, union_case};

#[test]
fn union_semantics_in_guest() {
    let br = union_case::branches();
    let b_before = testkit::tree::snapshot(br.b.path());
    // mergerfs 2.33's path-preserving default create policy, which the scenario was checked
    // against; no free-space floor, so the result does not depend on the host disk.
    let opts = ["-o", "category.create=epmfs,minfreespace=0"];
    let backend = Backend::union(&[(br.a.path(), Mode::Rw), (br.b.path(), Mode::Ro)], &opts);
    let run = guest::run_scenario(&backend, &Guest::default(), union_case::UNION_SCENARIO);
    union_case::check(&run, &br, &b_before);
}

/// Reads a 4 MiB host file, writes copies through the guest (page cache and O_DIRECT), and
/// returns the max_pages the daemon logged.
fn big_io_with(extra: &[&str]) -> u32 {
    let br = union_case::branches();
    let pattern: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
    fs::write(br.a.path().join("big.bin"), &pattern).unwrap();
    let mut args = vec!["-o", "minfreespace=0"];
    args.extend_from_slice(extra);
    let backend = Backend::union(&[(br.a.path(), Mode::Rw), (br.b.path(), Mode::Ro)], &args);
    let guest = Guest {
        queue_size: 1024,
        ..Guest::default()
    };
    let run = guest::run_scenario(
        &backend,
        &guest,
        r#"
dd if=big.bin of=/tmp/big bs=1M 2>/dev/null
dd if=/tmp/big of=big.copy bs=1M conv=fsync 2>/dev/null
sync; echo 3 > /proc/sys/vm/drop_caches
cmp big.copy big.bin || fail "4 MiB copy differs in the guest"
# O_DIRECT bypasses the page cache: each 1 MiB dd block becomes requests of up to max_pages pages.
dd if=/tmp/big of=big.direct bs=1M oflag=direct 2>/dev/null
dd if=big.direct of=/tmp/big2 bs=1M iflag=direct 2>/dev/null
cmp /tmp/big /tmp/big2 || fail "4 MiB O_DIRECT round trip differs"
"#,
    );
    run.assert_success();
    assert!(
        fs::read(br.a.path().join("big.copy")).unwrap() == pattern,
        "4 MiB copy differs on the host"
    );
    assert!(
        fs::read(br.a.path().join("big.direct")).unwrap() == pattern,
        "4 MiB O_DIRECT copy differs on the host"
    );
    guest::logged_max_pages(&run.daemon_log)
        .unwrap_or_else(|| panic!("daemon log has no max_pages=N line\n{}", run.transcript()))
}

#[test]
fn max_pages_option_limits_negotiation() {
    let limited = big_io_with(&["--max-pages", "32"]);
    assert_eq!(limited, 32, "--max-pages 32");
}

#[test]
fn max_pages_default_follows_queue_size() {
    let default = big_io_with(&[]);
    // The daemon advertises min(--max-pages default, queue size - 4).
    assert!(
        default > 32 && default <= 1020,
        "default max_pages={default}, expected 32 < N <= 1020 with queue-size 1024"
    );
}

/// The largest `size=` of the daemon's debug lines for `op` (READ or WRITE).
fn largest(log: &str, op: &str) -> u64 {
    let tag = format!(" {op} ");
    log.lines()
        .filter(|l| l.contains(&tag))
        .filter_map(|l| l.rsplit("size=").next()?.trim().parse().ok())
        .max()
        .unwrap_or(0)
}

/// O_DIRECT 4 MiB writes and reads in a guest of kernel `suite`; returns the largest WRITE and
/// READ the daemon received.
fn direct_io_sizes(
    suite: Option<&'static str>,
    append: &str,
    extra: &[&str],
) -> (u64, u64, GuestRun) {
    let br = union_case::branches();
    let mut args = vec!["-o", "minfreespace=0"];
    args.extend_from_slice(extra);
    let backend = Backend::union(&[(br.a.path(), Mode::Rw), (br.b.path(), Mode::Ro)], &args);
    let guest = Guest {
        queue_size: 1024,
        kernel_suite: suite,
        append: append.to_owned(),
        ..Guest::default()
    };
    let run = guest::run_scenario(
        &backend,
        &guest,
        r#"
dd if=/dev/urandom of=/tmp/src bs=1M count=8 2>/dev/null
dd if=/tmp/src of=big bs=4M oflag=direct 2>/dev/null
dd if=big of=/tmp/back bs=4M iflag=direct 2>/dev/null
cmp /tmp/src /tmp/back || fail "8 MiB O_DIRECT round trip differs"
"#,
    );
    run.assert_success();
    (
        largest(&run.daemon_log, "WRITE"),
        largest(&run.daemon_log, "READ"),
        run,
    )
}

#[test]
fn requests_grow_past_256_pages_when_the_guest_kernel_allows() {
    // Linux 6.12 caps FUSE requests at 256 pages whatever the daemon offers; WRITEs stop at
    // --max-write (512 KiB by default).
    let (w, r, _) = direct_io_sizes(None, "", &[]);
    assert_eq!((w, r), (512 << 10, 256 * 4096), "6.12 guest");
    // A >= 6.13 guest with fs.fuse.max_pages_limit raised takes all 1020 offered pages
    // (queue size 1024 - 4): 4 MiB READs, four times the 256-page ceiling.
    let (w, r, run) = direct_io_sizes(Some("trixie-backports"), "uvfs.max_pages_limit=1020", &[]);
    assert!(
        run.console.contains("=== UVFS MAX_PAGES_LIMIT 1020 ==="),
        "{}",
        run.transcript()
    );
    assert_eq!((w, r), (512 << 10, 1020 * 4096), "raised-limit guest");
    // --max-write lets WRITEs grow as far.
    let (w, r, _) = direct_io_sizes(
        Some("trixie-backports"),
        "uvfs.max_pages_limit=1020",
        &["--max-write", "4177920"],
    );
    assert_eq!((w, r), (1020 * 4096, 1020 * 4096), "--max-write 4177920");
    // --max-pages still bounds it.
    let (w, r, _) = direct_io_sizes(
        Some("trixie-backports"),
        "uvfs.max_pages_limit=1020",
        &["--max-pages", "32"],
    );
    assert_eq!((w, r), (32 * 4096, 32 * 4096), "--max-pages 32");
}

/// A guest reset without FUSE_DESTROY (sysrq b: no unmount) leaves the daemon holding the
/// old kernel's nodes and handles; the next INIT ends that session, and the rebooted guest is
/// served from a fresh one.
#[test]
fn a_rebooted_guest_starts_a_new_session() {
    let t = tmpfs::Tmpfs::new("32M");
    let backend = Backend::union(&[(t.path(), Mode::Rw)], &["-o", "minfreespace=0"]);
    let scenario = r#"if [ ! -e .booted ]; then
    : > .booted
    mkdir many
    i=0; while [ $i -lt 300 ]; do echo $i > many/f$i; i=$((i+1)); done
    ls -l many >/dev/null
    exec 3<many/f7
    echo FIRST-BOOT-DONE
    echo b > /proc/sysrq-trigger
fi
expect_eq "$(ls many | wc -l)" 300 "the share after the reboot"
expect_eq "$(cat many/f299)" 299 "a file after the reboot"
echo SECOND-BOOT-DONE
"#;
    let guest = Guest {
        reboot: true,
        ..Guest::default()
    };
    let run = guest::run_scenario(&backend, &guest, scenario);
    run.assert_success();
    assert!(
        run.console.contains("FIRST-BOOT-DONE") && run.console.contains("SECOND-BOOT-DONE"),
        "{}",
        run.transcript()
    );
    let dropped = run
        .daemon_log
        .lines()
        .find_map(|l| {
            let rest = l.split("session ended: dropped ").nth(1)?;
            let mut w = rest.split_whitespace();
            let nodes: usize = w.next()?.parse().ok()?;
            let handles: usize = w.nth(2)?.parse().ok()?;
            Some((nodes, handles))
        })
        .unwrap_or_else(|| panic!("no session was dropped:\n{}", run.transcript()));
    assert!(
        dropped.0 >= 300 && dropped.1 >= 1,
        "the first boot's nodes and open file: {dropped:?}"
    );
}
