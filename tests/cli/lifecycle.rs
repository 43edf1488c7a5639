//! The daemon's life cycle as a VMM sees it: serving on an inherited listening socket (`--fd`,
//! as libvirt passes it) and a clean exit (code 0) on SIGTERM and SIGINT.

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::process::{Command, Stdio};
use std::time::Duration;

use testkit::alone;
use testkit::proc::{daemon, daemon_on, sandboxed_child, start, wait_exit, wait_socket};
use testkit::signal;

use vufs_frontend::{ops, ConnectOptions, Device};

#[test]
fn serves_an_inherited_listening_socket() {
    // The listener is inheritable until dropped: a daemon another test spawned meanwhile would
    // inherit it too.
    alone::in_own_process(|| {
        let d = tempfile::tempdir().unwrap();
        let branch = d.path().join("a");
        std::fs::create_dir(&branch).unwrap();
        std::fs::write(branch.join("hello"), "world").unwrap();
        let sock = d.path().join("s");
        let listener = UnixListener::bind(&sock).unwrap();
        // Let the child inherit the descriptor under the same number, as libvirt does.
        rustix::io::fcntl_setfd(&listener, rustix::io::FdFlags::empty()).unwrap();
        let fd = listener.as_raw_fd().to_string();
        let mut child = daemon()
            .args(["--fd", &fd, "--branch"])
            .arg(&branch)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        drop(listener);
        let mut dev =
            Device::connect(&sock, &ConnectOptions::default()).expect("connect over --fd");
        dev.init(ops::DEFAULT_INIT_FLAGS).unwrap();
        let e = dev.lookup(ops::ROOT_ID, b"hello").unwrap();
        let o = dev.open(e.nodeid, libc::O_RDONLY as u32).unwrap();
        assert_eq!(dev.read(e.nodeid, o.fh, 0, 4096).unwrap(), b"world");
        drop(dev);
        assert_eq!(
            wait_exit(&mut child, Duration::from_secs(10)),
            0,
            "exit 0 on disconnect"
        );
    });
}

/// The daemon with its defaults serving `branch` on `sock`, once the socket exists.
fn serving(sock: &std::path::Path, branch: &std::path::Path) -> std::process::Child {
    start(daemon_on(sock).arg("--branch").arg(branch), sock)
}

#[test]
fn exits_cleanly_on_sigterm_and_sigint() {
    for sig in [rustix::process::Signal::TERM, rustix::process::Signal::INT] {
        let d = tempfile::tempdir().unwrap();
        let sock = d.path().join("s");
        let mut child = serving(&sock, d.path());
        let pid = rustix::process::Pid::from_child(&child);
        rustix::process::kill_process(pid, sig).unwrap();
        assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), 0, "{sig:?}");
    }
}

/// The sandbox's supervisor is a fresh image of the binary (re-executed after the fork, so it
/// holds none of start-up's pages): the same command line, and the environment it was
/// started with names the serving child and the socket. SIGTERM to it still reaches the child
/// (exit 0) and it removes the socket files.
#[test]
fn the_sandbox_supervisor_is_a_fresh_image_watching_its_child() {
    let d = tempfile::tempdir().unwrap();
    let sock = d.path().join("s");
    let mut child = serving(&sock, d.path());
    let inner = sandboxed_child(child.id());
    let want_child = format!("UNION_VIRTIOFSD_SUPERVISE={inner}");
    let want_socket = format!("UNION_VIRTIOFSD_SUPERVISE_SOCKET={}", sock.display());
    // The exec follows the fork, unordered with the child's start.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let environ = loop {
        let e = std::fs::read(format!("/proc/{}/environ", child.id())).unwrap();
        let vars: Vec<String> = e
            .split(|&b| b == 0)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect();
        if vars.contains(&want_child) {
            break vars;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the supervisor was not re-executed: {vars:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(environ.contains(&want_socket), "{environ:?}");
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", child.id())).unwrap();
    let args: Vec<&[u8]> = cmdline
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .collect();
    assert_eq!(
        args[1..],
        [
            &b"--socket-path"[..],
            sock.to_str().unwrap().as_bytes(),
            b"--branch",
            d.path().to_str().unwrap().as_bytes()
        ]
    );
    // The serving child does not inherit the variables (it was forked before the exec).
    let child_env = std::fs::read(format!("/proc/{inner}/environ")).unwrap();
    assert!(!String::from_utf8_lossy(&child_env).contains("UNION_VIRTIOFSD_SUPERVISE"));
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), 0);
    assert!(!sock.exists(), "the supervisor removed the socket");
    assert!(!d.path().join("s.ctl").exists(), "and the control socket");
}

/// `--sandbox namespace` and `--seccomp kill` (the defaults as root): the serving process, under
/// a seccomp filter, lives in its own mount,
/// PID and network namespaces, its / holds only the branches and its own /proc (no host path,
/// no other process), it serves, and SIGTERM to the process the launcher started ends both
/// with exit 0 and removes the socket.
#[test]
fn the_default_sandbox_shows_only_the_branches() {
    let work = tempfile::tempdir().unwrap();
    let (a, b) = (work.path().join("a"), work.path().join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    std::fs::write(a.join("in-a"), "a").unwrap();
    let sock = work.path().join("s");
    let mut child = start(
        daemon_on(&sock)
            .arg("--branch")
            .arg(&a)
            .arg("--branch")
            .arg(format!("{}=RO", b.display())),
        &sock,
    );
    let inner = sandboxed_child(child.id());
    let names = |p: String| {
        let mut v: Vec<String> = std::fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(format!("/proc/{inner}/root")), ["branches", "proc"]);
    assert_eq!(names(format!("/proc/{inner}/root/branches")), ["0", "1"]);
    assert_eq!(names(format!("/proc/{inner}/root/branches/0")), ["in-a"]);
    // Its /proc is its own PID namespace's: it is process 1 there and sees no other.
    let procs: Vec<String> = names(format!("/proc/{inner}/root/proc"))
        .into_iter()
        .filter(|n| n.bytes().all(|c| c.is_ascii_digit()))
        .collect();
    assert_eq!(procs, ["1"]);
    for ns in ["mnt", "pid", "net"] {
        let theirs = std::fs::read_link(format!("/proc/{inner}/ns/{ns}")).unwrap();
        let ours = std::fs::read_link(format!("/proc/self/ns/{ns}")).unwrap();
        assert_ne!(theirs, ours, "{ns} namespace");
    }
    // It serves.
    let mut dev = Device::connect(&sock, &ConnectOptions::default()).unwrap();
    dev.init(ops::DEFAULT_INIT_FLAGS).unwrap();
    let e = dev.lookup(ops::ROOT_ID, b"in-a").unwrap();
    assert_eq!(e.attr.size, 1);
    // no_new_privs is set.
    let status = std::fs::read_to_string(format!("/proc/{inner}/status")).unwrap();
    assert!(status.lines().any(|l| l == "NoNewPrivs:\t1"), "{status}");
    // The seccomp filter (--seccomp kill, the default) is installed: mode 2 = filter.
    assert!(status.lines().any(|l| l == "Seccomp:\t2"), "{status}");
    signal::sigterm(&child);
    assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), 0);
    assert!(!sock.exists(), "socket removed by the parent");
    assert!(!std::path::Path::new(&format!("/proc/{inner}")).exists());
}

/// `--rlimit-nofile` with virtiofsd's meaning, read from the running daemon's
/// /proc/PID/limits: N sets soft and hard limit, 0 leaves them, and the default raises them
/// (to min(1,000,000, fs.nr_open), or where that is not allowed to the hard limit).
#[test]
fn rlimit_nofile_sets_the_daemon_limit() {
    let work = tempfile::tempdir().unwrap();
    let share = work.path().join("share");
    std::fs::create_dir(&share).unwrap();
    let limits_with = |flag: Option<&str>| -> (u64, u64) {
        let sock = work.path().join("s");
        // prlimit starts the daemon with soft 1000 / hard 2000 open files.
        let mut cmd = Command::new("prlimit");
        cmd.args(["--nofile=1000:2000", env!("CARGO_BIN_EXE_union-virtiofsd")])
            .arg("--socket-path")
            .arg(&sock)
            .arg("--shared-dir")
            .arg(&share)
            .args(["--sandbox", "none"])
            .args(flag)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().unwrap();
        wait_socket(&sock);
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();
        let line = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .unwrap()
            .to_owned();
        signal::sigterm(&child);
        assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), 0);
        let n: Vec<u64> = line
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        (n[0], n[1])
    };
    assert_eq!(limits_with(Some("--rlimit-nofile=1500")), (1500, 1500));
    assert_eq!(limits_with(Some("--rlimit-nofile=0")), (1000, 2000));
    let (soft, hard) = limits_with(None);
    assert_eq!(soft, hard);
    assert!(soft >= 2000, "{soft}");
}
