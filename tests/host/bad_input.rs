//! Bad input to `union-virtiofsd mount`: one line on stderr, exit status 2, nothing mounted.

use std::path::Path;
use std::process::{Command, Output};

use testkit::hostmount::{is_mounted, HostMount};
use testkit::proc::daemon;
use testkit::tmpfs::Tmpfs;

/// Runs `cmd` and checks it failed with status 2 and one line on stderr containing `says`.
fn refused(mut cmd: Command, says: &str) {
    let Output { status, stderr, .. } = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&stderr);
    assert_eq!(status.code(), Some(2), "{cmd:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{cmd:?}: not one line: {err}");
    assert!(err.contains(says), "{cmd:?}: {err} (expected {says:?})");
}

fn mount_cmd(at: &Path, branch: &Path) -> Command {
    let mut cmd = daemon();
    cmd.arg("mount").arg(at).arg("--branch").arg(branch);
    cmd
}

#[test]
fn a_missing_or_unusable_mount_point_is_refused() {
    let a = Tmpfs::new("8M");
    let d = tempfile::tempdir().unwrap();
    let mut none = daemon();
    none.args(["mount", "--branch"]).arg(a.path());
    refused(none, "MOUNTPOINT");
    refused(
        mount_cmd(&d.path().join("absent"), a.path()),
        "No such file or directory",
    );
    std::fs::write(d.path().join("file"), "x").unwrap();
    refused(
        mount_cmd(&d.path().join("file"), a.path()),
        "not a directory",
    );
    refused(mount_cmd(d.path(), a.path()), "not empty (add -o nonempty");
    assert!(!is_mounted(d.path()));
    let mut vhost = mount_cmd(&d.path().join("x"), a.path());
    vhost.args(["--socket-path", "/tmp/s"]);
    refused(vhost, "--socket-path is a vhost-user daemon option");
    let mut no_branch = daemon();
    no_branch.arg("mount").arg(d.path());
    refused(no_branch, "no branch given");
}

#[test]
fn nonempty_mounts_over_entries() {
    let a = Tmpfs::new("8M");
    std::fs::write(a.path().join("in-branch"), "b").unwrap();
    let m = HostMount::new(&[a.path()], &["-o", "nonempty"]);
    // HostMount's mount point is empty: make one that is not, and mount there too.
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("hidden"), "h").unwrap();
    let mut child = mount_cmd(d.path(), a.path())
        .args(["-o", "nonempty"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !is_mounted(d.path()) {
        assert!(std::time::Instant::now() < deadline, "not mounted");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(d.path().join("in-branch").is_file());
    assert!(!d.path().join("hidden").exists());
    assert!(Command::new("umount")
        .arg(d.path())
        .status()
        .unwrap()
        .success());
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert!(d.path().join("hidden").is_file());
    drop(m);
}

#[test]
fn no_fuse_device_is_bad_input() {
    let a = Tmpfs::new("8M");
    let d = tempfile::tempdir().unwrap();
    // /dev without fuse, in a mount namespace of the daemon's own.
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--mount",
        "sh",
        "-c",
        "mount -t tmpfs none /dev && exec \"$@\"",
        "sh",
    ])
    .arg(testkit::bin::daemon_path())
    .arg("mount")
    .arg(d.path())
    .arg("--branch")
    .arg(a.path());
    refused(cmd, "cannot open /dev/fuse");
}
