//! The fstab form as mount(8) runs it: util-linux's mount (an fstab line of type
//! `fuse.union-virtiofsd`, or `-t fuse.union-virtiofsd`) execs mount.fuse3, which runs
//! `union-virtiofsd SOURCE MOUNTPOINT -o OPTIONS` through `/bin/sh -c`. mount(8) drops PATH
//! from the environment, so the shell finds the daemon only in its default PATH
//! (/usr/local/sbin first): each run is in a private mount namespace of its own whose
//! /usr/local/sbin holds the binary under test, and the union is mounted in that namespace,
//! which the daemon then keeps; the host's /usr and mount table are left alone. The daemon's
//! pid comes from its control socket (`-o ctl-socket=`), and it is seen and used from inside
//! its namespace (`nsenter --mount`). Needs root.

use std::ffi::OsStr;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// What runs in the new namespace: the directory `$1` (the binary) over /usr/local/sbin, then
/// mount(8) with the other arguments.
const SETUP: &str = r#"set -e
mount --bind "$1" /usr/local/sbin
shift
exec mount "$@""#;

/// A directory holding `union-virtiofsd`: the binary under test.
pub fn bin_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(crate::bin::daemon_path(), d.path().join("union-virtiofsd"))
        .unwrap();
    d
}

/// Runs `mount ARGS…` in a namespace of its own whose /usr/local/sbin is `bin` (from
/// [`bin_dir`]), and returns when mount(8) does. Bounded: a mount(8) still running after 20 s
/// (a daemon that stayed in the foreground) is killed with its process group, and the test
/// fails.
pub fn mount<S: AsRef<OsStr>>(bin: &Path, args: &[S]) -> Output {
    use std::os::unix::process::CommandExt;
    let (out, err) = (tempfile::tempfile().unwrap(), tempfile::tempfile().unwrap());
    let mut child = Command::new("unshare")
        .args(["--mount", "sh", "-c", SETUP, "sh"])
        .arg(bin)
        .args(args)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(err.try_clone().unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            let args: Vec<&OsStr> = args.iter().map(AsRef::as_ref).collect();
            panic!("mount {args:?} did not return in 20 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let read = |mut f: std::fs::File| {
        let mut v = Vec::new();
        f.seek(SeekFrom::Start(0)).unwrap();
        f.read_to_end(&mut v).unwrap();
        v
    };
    Output {
        status,
        stdout: read(out),
        stderr: read(err),
    }
}

/// The options of the mount on `at` as process `pid` (one in the mount's namespace) sees them,
/// if it sees one of type [`crate::hostmount::FSTYPE`] there.
pub fn mount_options(pid: u32, at: &Path) -> Option<String> {
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mounts")).ok()?;
    let at = at.to_string_lossy();
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.get(1) == Some(&at.as_ref()) && f.get(2) == Some(&crate::hostmount::FSTYPE))
            .then(|| f[3].to_owned())
    })
}
