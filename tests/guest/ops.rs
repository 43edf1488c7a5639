//! The opcodes the daemon serves itself, sent by a real guest kernel through real tools
//! (coreutils and xfs_io in the guest, scripts/build-tools-initrd.sh): `sync -f` (SYNCFS),
//! `stat` and `xfs_io statx` asking for the birth time (STATX), `cp` (COPY_FILE_RANGE, across
//! two tmpfs branches), `chattr`/`lsattr` (IOCTL), `xfs_io -T` then `flink` (TMPFILE, then
//! LINK of the unnamed node), and the daemon's log shows each opcode served without an error.

use testkit::guest;
use testkit::guest::{Backend, Guest, Mode};
use testkit::tmpfs::Tmpfs;

/// Whether the daemon's debug log shows a request with `opcode` answered without an error.
fn served(log: &str, opcode: u32) -> bool {
    log.lines()
        .filter(|l| l.contains(&format!(" opcode={opcode} ")))
        .filter_map(|l| l.split("unique=").nth(1)?.split(' ').next())
        .any(|u| {
            !log.lines()
                .any(|l| l.contains("replying errno") && l.contains(&format!("unique={u} ")))
        })
}

#[test]
fn guest_tools_reach_the_opcodes_the_daemon_serves_itself() {
    let (rw, ro) = (Tmpfs::new("32M"), Tmpfs::new("32M"));
    let data: Vec<u8> = (0..2_000_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(ro.path().join("big"), &data).unwrap();
    let backend = Backend::union(
        &[(rw.path(), Mode::Rw), (ro.path(), Mode::Ro)],
        &["-o", "minfreespace=1M"],
    );
    let g = Guest {
        extra_initrd: vec![guest::tools_initrd()],
        ..Guest::default()
    };
    let run = guest::run_scenario(
        &backend,
        &g,
        r#"T=/opt/tools/bin
echo data > f
$T/sync -f f
section BIRTH $T/stat -c '%W' f
section XFSIO $T/xfs_io -r -c 'statx -m 0x800' f
$T/cp --reflink=auto big copy
expect_eq "$(md5sum < copy)" "$(md5sum < big)" "copy of the file from the read-only branch"
$T/cp --reflink=auto f f2
expect_eq "$(cat f2)" data "copy within a branch"
$T/chattr +d f2
section FLAGS $T/lsattr f2
expect_err "Operation not permitted" "$T/chattr +i f2"
$T/xfs_io -T -c 'pwrite -q 0 4096' -c 'flink /mnt/from-tmpfile' /mnt
expect_eq "$(stat -c %s from-tmpfile)" 4096 "an O_TMPFILE file, linked"
"#,
    );
    run.assert_success();
    let log = &run.daemon_log;
    assert!(served(log, 50), "SYNCFS:\n{}", run.transcript());
    assert!(served(log, 52), "STATX:\n{}", run.transcript());
    assert!(served(log, 47), "COPY_FILE_RANGE:\n{}", run.transcript());
    // The guest sees the host's birth time (tmpfs records one).
    let host = std::fs::metadata(rw.path().join("f"))
        .unwrap()
        .created()
        .unwrap();
    let secs = host
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert_eq!(
        run.section("BIRTH").unwrap(),
        [secs.to_string()],
        "{}",
        run.transcript()
    );
    assert_eq!(std::fs::read(rw.path().join("copy")).unwrap(), data);
    assert_eq!(std::fs::read(ro.path().join("big")).unwrap(), data);
    // chattr +d reached the host file; +i needs CAP_LINUX_IMMUTABLE, which the daemon drops.
    let flags = run.section("FLAGS").unwrap();
    assert!(flags[0].starts_with("------d"), "{}", run.transcript());
    let host = std::process::Command::new("lsattr")
        .arg(rw.path().join("f2"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&host.stdout).starts_with("------d"));
    assert!(served(log, 39), "IOCTL:\n{}", run.transcript());
    assert!(served(log, 51), "TMPFILE:\n{}", run.transcript());
    assert_eq!(
        std::fs::metadata(rw.path().join("from-tmpfile"))
            .unwrap()
            .len(),
        4096
    );
}
