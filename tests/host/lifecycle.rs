//! The mount's life cycle: `umount` ends the daemon with status 0; SIGTERM and SIGINT detach
//! the mount and end it with 0; a lazy unmount with files open lets them be read until closed;
//! the number of threads reading /dev/fuse.

use std::io::Read;
use std::time::Duration;

use testkit::hostmount::{is_mounted, HostMount};
use testkit::tmpfs::Tmpfs;

#[test]
fn umount_ends_the_daemon_with_status_0() {
    let a = Tmpfs::new("16M");
    let mut m = HostMount::new(&[a.path()], crate::ops::SMALL);
    std::fs::write(m.path().join("f"), "x").unwrap();
    assert_eq!(m.unmount(false), 0, "{}", m.log());
    assert!(!is_mounted(m.path()));
    assert_eq!(std::fs::read_to_string(a.path().join("f")).unwrap(), "x");
}

#[test]
fn sigterm_and_sigint_detach_and_exit_0() {
    for sig in ["TERM", "INT"] {
        let a = Tmpfs::new("16M");
        let mut m = HostMount::new(&[a.path()], crate::ops::SMALL);
        let ok = std::process::Command::new("kill")
            .args([&format!("-{sig}"), &m.pid().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig}");
        assert_eq!(
            m.wait(Duration::from_secs(20)),
            0,
            "signal {sig}: {}",
            m.log()
        );
        assert!(!is_mounted(m.path()), "signal {sig}: still mounted");
    }
}

#[test]
fn a_lazy_unmount_with_a_file_open_ends_when_it_is_closed() {
    let a = Tmpfs::new("16M");
    std::fs::write(a.path().join("f"), "still readable").unwrap();
    let mut m = HostMount::new(&[a.path()], crate::ops::SMALL);
    let mut f = std::fs::File::open(m.path().join("f")).unwrap();
    let ok = std::process::Command::new("umount")
        .arg("-l")
        .arg(m.path())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    assert!(!is_mounted(m.path()));
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "still readable");
    drop(f);
    assert_eq!(m.wait(Duration::from_secs(20)), 0, "{}", m.log());
}

/// `union-virtiofsd ctl` on the mount's `--ctl-socket`: `args`' output, trimmed.
fn ctl(sock: &std::path::Path, args: &[&str]) -> String {
    let out = testkit::proc::daemon()
        .arg("ctl")
        .arg("--ctl-socket")
        .arg(sock)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "ctl {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn the_control_socket_and_sighup_reach_the_mount() {
    let a = Tmpfs::new("16M");
    let d = tempfile::tempdir().unwrap();
    let (sock, conf) = (d.path().join("ctl"), d.path().join("conf"));
    std::fs::write(&conf, "category.create=ff\nminfreespace=1M\n").unwrap();
    let mut m = HostMount::new(
        &[a.path()],
        &[
            "--ctl-socket",
            sock.to_str().unwrap(),
            "--config",
            conf.to_str().unwrap(),
        ],
    );
    assert_eq!(ctl(&sock, &["get", "category.create"]), "ff");
    assert_eq!(ctl(&sock, &["get", "pid"]), m.pid().to_string());
    std::fs::write(m.path().join("f"), "x").unwrap();
    let held = a.path().join("f");
    assert_eq!(
        ctl(&sock, &["query", "f", "fullpath"]),
        held.to_str().unwrap()
    );
    std::fs::write(&conf, "category.create=mfs\nminfreespace=1M\n").unwrap();
    let ok = std::process::Command::new("kill")
        .args(["-HUP", &m.pid().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while ctl(&sock, &["get", "category.create"]) != "mfs" {
        assert!(std::time::Instant::now() < deadline, "{}", m.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(m.unmount(false), 0, "{}", m.log());
    assert!(!sock.exists(), "the control socket is left behind");
}

/// The threads named `fuse-N` (the /dev/fuse readers) of daemon `pid`, once there are
/// `expected` of them or 10 s passed (the daemon starts them after the mount is served).
fn readers(pid: u32, expected: usize) -> usize {
    let count = || {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter(|t| {
                let comm = t.as_ref().unwrap().path().join("comm");
                std::fs::read_to_string(comm).is_ok_and(|c| c.starts_with("fuse-"))
            })
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut n = count();
    while n < expected && std::time::Instant::now() < deadline {
        std::thread::yield_now();
        n = count();
    }
    n
}

#[test]
fn four_readers_per_cpu_unless_the_pool_size_says() {
    let cpus = std::thread::available_parallelism().unwrap().get();
    let a = Tmpfs::new("16M");
    let mut m = HostMount::new(&[a.path()], crate::ops::SMALL);
    let want = (4 * cpus).min(1024);
    assert_eq!(readers(m.pid(), want), want, "{}", m.log());
    assert_eq!(m.unmount(false), 0, "{}", m.log());
    let mut args = crate::ops::SMALL.to_vec();
    args.extend(["--thread-pool-size", "3"]);
    let mut m = HostMount::new(&[a.path()], &args);
    assert_eq!(readers(m.pid(), 3), 3, "{}", m.log());
    assert_eq!(m.unmount(false), 0, "{}", m.log());
}
