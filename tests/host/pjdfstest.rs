//! pjdfstest (the Rust port, 398 cases) as root on the host mount, with mergerfs's mount
//! options (`allow_other,default_permissions`, the defaults as root), over one and three tmpfs
//! branches: every case must pass. As in the guest (tests/guest/pjdfstest.rs), the 13
//! `*::erofs_*` cases remount the mount read-only and back, so they run in a second pass with
//! `allow_remount`, and must all pass there; `link::link_count_max` is the one case the suite
//! skips (FUSE reports no LINK_MAX). Any other skip fails.
//!
//! The suite runs with the guest's configuration and dummy users (qemu/pjdfstest/), which are
//! bind-mounted over /etc/passwd and /etc/group in a mount namespace of its own. Its remount
//! runs mount(8) from PATH, which for a `fuse.*` type would call a `mount.fuse` helper with
//! the daemon as an fstab program (not supported yet): a `mount` first on its PATH adds `-i`
//! (no helper), so the remount is the plain mount(2) the kernel's FUSE accepts.

use std::path::{Path, PathBuf};
use std::process::Command;

use testkit::hostmount::HostMount;
use testkit::pjdfstest::{binary, check, parse, Summary};
use testkit::tmpfs::Tmpfs;

/// The guest's suite configuration, passwd and group.
fn conf_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("qemu/pjdfstest")
}

/// Runs the suite with `conf` on `dir` (its secondary filesystem `secondary`) in a mount
/// namespace with the suite's users; `remount` puts the `mount -i` wrapper first on PATH.
fn suite(
    conf: &Path,
    dir: &Path,
    secondary: Option<&Path>,
    filter: &[&str],
    remount: &Path,
) -> Summary {
    let c = conf_dir();
    let script = format!(
        "mount --bind {passwd} /etc/passwd && mount --bind {group} /etc/group && \
         PATH={remount}:$PATH exec \"$@\"",
        passwd = c.join("passwd").display(),
        group = c.join("group").display(),
        remount = remount.display(),
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "sh", "-c", &script, "sh"])
        .arg(binary())
        .arg("-c")
        .arg(conf)
        .arg("-p")
        .arg(dir);
    if let Some(s) = secondary {
        cmd.arg("-s").arg(s);
    }
    cmd.args(filter);
    let out = cmd.output().expect("run pjdfstest");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let lines: Vec<String> = text.lines().map(str::to_owned).collect();
    parse(&lines)
}

/// The suite on a host mount of `branches`: the full run, then the erofs cases on their own.
fn run_suite(branches: &[&Tmpfs]) -> Summary {
    let paths: Vec<&Path> = branches.iter().map(|t| t.path()).collect();
    let mut m = HostMount::new(
        &paths,
        &["-o", "minfreespace=1M,allow_other,default_permissions"],
    );
    let dir = m.path().join("pjd");
    std::fs::create_dir(&dir).unwrap();
    let secondary = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let wrapper = work.path().join("bin");
    std::fs::create_dir(&wrapper).unwrap();
    let real_mount = ["/usr/bin/mount", "/bin/mount"]
        .into_iter()
        .find(|p| Path::new(p).is_file())
        .expect("mount(8)");
    std::fs::write(
        wrapper.join("mount"),
        format!("#!/bin/sh\nexec {real_mount} -i \"$@\"\n"),
    )
    .unwrap();
    std::fs::set_permissions(
        wrapper.join("mount"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let conf = conf_dir().join("pjdfstest.toml");
    let mut s = suite(&conf, &dir, Some(secondary.path()), &[], &wrapper);
    let text = std::fs::read_to_string(&conf).unwrap();
    let remount = work.path().join("remount.toml");
    std::fs::write(
        &remount,
        text.replace("allow_remount = false", "allow_remount = true"),
    )
    .unwrap();
    let erofs = suite(&remount, &dir, None, &["erofs_"], &wrapper);
    let erofs_skipped = s.skips.iter().filter(|k| k.contains("erofs_")).count() as u32;
    assert!(
        erofs.failed == 0 && erofs.skipped == 0 && erofs.passed == erofs_skipped,
        "the {erofs_skipped} erofs cases on their own: {erofs:?}\n{}",
        m.log()
    );
    s.skips.retain(|k| !k.contains("erofs_"));
    s.skipped -= erofs_skipped;
    s.passed += erofs.passed;
    eprintln!(
        "pjdfstest on the host mount of {} branch(es): {} passed, {} failed, {} skipped of {}",
        branches.len(),
        s.passed,
        s.failed,
        s.skipped,
        s.total
    );
    for f in &s.failures {
        eprintln!("  FAILED {f}");
    }
    assert_eq!(m.unmount(true), 0, "{}", m.log());
    s
}

#[test]
fn pjdfstest_passes_on_one_branch() {
    let a = Tmpfs::new("256M");
    check(&run_suite(&[&a]));
}

#[test]
fn pjdfstest_passes_on_three_branches() {
    let (a, b, c) = (Tmpfs::new("256M"), Tmpfs::new("256M"), Tmpfs::new("256M"));
    check(&run_suite(&[&a, &b, &c]));
}
