//! The fstab form (`union-virtiofsd BRANCHES MOUNTPOINT -o OPTIONS`, mergerfs's) as mount(8)
//! runs it through mount.fuse3 (testkit::fstab): an fstab line mounts the union with its
//! options, mount(8) returns once the union is mounted and served, by a daemon gone to the
//! background (a session of its own, `/` as its working directory, stdio on /dev/null);
//! a remount through mount.fuse3 is refused and changes nothing; `umount` ends that daemon
//! with status 0; bad input is mount(8)'s exit status 2 with the daemon's one line, and
//! nothing is mounted.

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use testkit::fstab::{bin_dir, mount, mount_options};
use testkit::tmpfs::Tmpfs;

/// The daemon's pid, from its control socket.
fn pid_of(sock: &Path) -> u32 {
    let out = testkit::proc::daemon()
        .arg("ctl")
        .arg("--ctl-socket")
        .arg(sock)
        .args(["get", "pid"])
        .output()
        .unwrap();
    assert!(out.status.success(), "ctl get pid: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// Field `n` (1-based, as proc(5) numbers them) of /proc/PID/stat.
fn stat_field(pid: u32, n: usize) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split(' ').nth(n - 3).unwrap().to_owned()
}

#[test]
fn an_fstab_line_mounts_in_the_background_and_umount_ends_it() {
    testkit::proc::adopt_orphans();
    let (small, big) = (Tmpfs::new("16M"), Tmpfs::new("48M"));
    let (at, work) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sock = work.path().join("ctl");
    let fstab = work.path().join("fstab");
    let line = format!(
        "{}:{}  {}  fuse.union-virtiofsd  defaults,allow_other,category.create=mfs,minfreespace=1M,ctl-socket={}  0 0\n",
        small.path().display(),
        big.path().display(),
        at.path().display(),
        sock.display()
    );
    std::fs::write(&fstab, line).unwrap();
    let bin = bin_dir();
    let out = mount(
        bin.path(),
        &[OsStr::new("-T"), fstab.as_os_str(), at.path().as_os_str()],
    );
    assert!(out.status.success(), "mount -T: {out:?}");
    // Quiet, as mount(8) of any filesystem: info lines go to syslog or nowhere.
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    let pid = pid_of(&sock);
    // Mounted and served when mount(8) returned: nothing to wait for.
    let opts = mount_options(pid, at.path()).expect("mounted once mount(8) returned");
    assert!(
        opts.contains("allow_other") && opts.contains("user_id=0"),
        "{opts}"
    );
    // mount.fuse3 adds dev,suid, as for any filesystem in fstab without nodev,nosuid.
    assert!(
        !opts.contains("nosuid") && !opts.contains("nodev"),
        "{opts}"
    );
    // In the background: a session of its own, holding no directory, no terminal or pipe.
    assert_eq!(stat_field(pid, 6), pid.to_string(), "session");
    let link = |p: String| std::fs::read_link(p).unwrap();
    assert_eq!(link(format!("/proc/{pid}/cwd")), Path::new("/"));
    for fd in 0..3 {
        assert_eq!(link(format!("/proc/{pid}/fd/{fd}")), Path::new("/dev/null"));
    }
    // The options are the line's: mfs creates on the branch with the most free space.
    let made = std::process::Command::new("nsenter")
        .args(["--target", &pid.to_string(), "--mount", "sh", "-c"])
        .arg("echo hello > \"$1/new\" && cat \"$1/new\"")
        .arg("sh")
        .arg(at.path())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&made.stdout), "hello\n", "{made:?}");
    assert!(big.path().join("new").is_file() && !small.path().join("new").exists());
    // A remount goes through mount.fuse3 with the fsname as the source: refused, no change.
    let remount = std::process::Command::new("nsenter")
        .args([
            "--target",
            &pid.to_string(),
            "--mount",
            "mount",
            "-o",
            "remount,ro",
        ])
        .arg(at.path())
        .output()
        .unwrap();
    assert_eq!(remount.status.code(), Some(2), "{remount:?}");
    let opts = mount_options(pid, at.path()).unwrap();
    assert!(opts.starts_with("rw,"), "{opts}");
    let ok = std::process::Command::new("nsenter")
        .args(["--target", &pid.to_string(), "--mount", "umount"])
        .arg(at.path())
        .status()
        .unwrap()
        .success();
    assert!(ok, "umount");
    assert_eq!(testkit::proc::wait_adopted(pid, Duration::from_secs(20)), 0);
    assert!(!sock.exists(), "the control socket is left behind");
}

#[test]
fn bad_input_is_mounts_exit_status_2_with_one_line() {
    let bin = bin_dir();
    let at = tempfile::tempdir().unwrap();
    let out = mount(
        bin.path(),
        &[
            OsStr::new("-t"),
            OsStr::new("fuse.union-virtiofsd"),
            OsStr::new("/nonexistent-branch:/tmp"),
            at.path().as_os_str(),
            OsStr::new("-o"),
            OsStr::new("minfreespace=1M"),
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(err.contains("/nonexistent-branch"), "{err}");
}
