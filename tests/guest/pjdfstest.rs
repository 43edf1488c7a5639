//! The POSIX conformance suite pjdfstest (the Rust port, 398 cases) run as root inside the real
//! test guest, in a directory of the share, on one RW branch and on three RW branches (tmpfs).
//! Every case must pass. The 13 `*::erofs_*` cases remount the share read-only and back; they
//! run in a second pass of their own (within the full run an earlier case leaves files open for
//! writing, so the remount is busy with any backend) and must all pass there. The one case the
//! suite skips, `link::link_count_max`, needs a LINK_MAX that FUSE does not report
//! (`testkit::pjdfstest::EXPECTED_SKIPS`).
//! Any other skip fails.

use std::time::Duration;

use testkit::guest;
use testkit::guest::{Backend, Guest, Mode};
use testkit::pjdfstest::{check, parse, Summary};
use testkit::tmpfs::Tmpfs;

/// The suite in a guest over `branches`, the daemon started with `-o minfreespace=1M,` and
/// `opts`.
fn run_suite(branches: &[&Tmpfs], opts: &str) -> Summary {
    let specs: Vec<_> = branches.iter().map(|t| (t.path(), Mode::Rw)).collect();
    let opts = format!("minfreespace=1M{opts}");
    let backend = Backend::union(&specs, &["-o", &opts]).at_info();
    let guest = Guest {
        timeout: Duration::from_secs(600),
        extra_initrd: vec![guest::pjdfstest_initrd()],
        ..Guest::default()
    };
    let scenario = r#"
mkdir /mnt/pjd
# coreutils' sleep first (see scripts/build-pjdfstest-initrd.sh).
export PATH=/usr/bin:$PATH
# -s: a second filesystem (the guest's /tmp) for the EXDEV cases.
pjdfstest -c /etc/pjdfstest.toml -p /mnt/pjd -s /tmp >/tmp/suite.out 2>&1 || true
section pjdfstest cat /tmp/suite.out
# The erofs cases, which the full run skips, on their own with allow_remount (they remount the
# share read-only and back; within the full run an earlier case leaves files open for writing,
# so the remount would be busy, with any backend).
sed 's/^allow_remount = false/allow_remount = true/' /etc/pjdfstest.toml >/tmp/remount.toml
pjdfstest -c /tmp/remount.toml -p /mnt/pjd erofs_ >/tmp/erofs.out 2>&1 || true
section erofs cat /tmp/erofs.out
"#;
    let run = guest::run_scenario(&backend, &guest, scenario);
    run.assert_success();
    let out = run
        .section("pjdfstest")
        .unwrap_or_else(|| panic!("no suite output:\n{}", run.transcript()));
    let mut s = parse(&out);
    // The erofs cases skipped above ran on their own: each must have passed there.
    let erofs = parse(
        &run.section("erofs")
            .unwrap_or_else(|| panic!("no erofs output:\n{}", run.transcript())),
    );
    let erofs_skipped = s.skips.iter().filter(|k| k.contains("erofs_")).count() as u32;
    assert!(
        erofs.failed == 0 && erofs.skipped == 0 && erofs.passed == erofs_skipped,
        "the {erofs_skipped} erofs cases on their own: {erofs:?}"
    );
    s.skips.retain(|k| !k.contains("erofs_"));
    s.skipped -= erofs_skipped;
    s.passed += erofs.passed;
    eprintln!(
        "pjdfstest on {} branch(es): {} passed, {} failed, {} skipped of {} in {:?}",
        branches.len(),
        s.passed,
        s.failed,
        s.skipped,
        s.total,
        run.elapsed
    );
    for f in &s.failures {
        eprintln!("  FAILED {f}");
    }
    s
}

#[test]
fn pjdfstest_passes_on_one_branch_in_guest() {
    let a = Tmpfs::new("256M");
    check(&run_suite(&[&a], ""));
}

#[test]
fn pjdfstest_passes_on_three_branches_in_guest() {
    let (a, b, c) = (Tmpfs::new("256M"), Tmpfs::new("256M"), Tmpfs::new("256M"));
    check(&run_suite(&[&a, &b, &c], ""));
}

/// With only 16 node descriptors open, nodes are closed and reopened all the time: by path
/// (`never`) or by file handle (`mandatory`; the default `prefer` is the runs above).
#[test]
fn pjdfstest_passes_with_nodes_reopened_by_path_and_by_handle() {
    for mode in ["never", "mandatory"] {
        let a = Tmpfs::new("256M");
        let s = run_suite(&[&a], &format!(",node-fds=16,inode-file-handles={mode}"));
        eprintln!("--inode-file-handles={mode}: {s:?}");
        check(&s);
    }
}
