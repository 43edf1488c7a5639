//! The daemon's life cycle as a VMM sees it: serving on an inherited listening socket (`--fd`,
//! as libvirt passes it) and a clean exit (code 0) on SIGTERM and SIGINT.

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vufs_frontend::{ops, ConnectOptions, Device};

fn daemon() -> Command {
    Command::new(env!("CARGO_BIN_EXE_union-virtiofsd"))
}

/// Waits (bounded) for the child to exit; its exit code.
fn wait_exit(child: &mut Child, limit: Duration) -> i32 {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code().unwrap_or(-1);
        }
        assert!(Instant::now() < deadline, "daemon did not exit");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits (bounded) for the daemon to create `sock`. Never connects: a connection would be
/// taken as the frontend, and its disconnect would end the daemon by itself.
fn wait_socket(sock: &Path) {
    use std::os::unix::fs::FileTypeExt;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::metadata(sock).is_ok_and(|m| m.file_type().is_socket()) {
        assert!(Instant::now() < deadline, "no socket at {}", sock.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn serves_an_inherited_listening_socket() {
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
    let mut dev = Device::connect(&sock, &ConnectOptions::default()).expect("connect over --fd");
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
}

#[test]
fn exits_cleanly_on_sigterm_and_sigint() {
    for sig in [rustix::process::Signal::TERM, rustix::process::Signal::INT] {
        let d = tempfile::tempdir().unwrap();
        let sock = d.path().join("s");
        let mut child = daemon()
            .arg("--socket-path")
            .arg(&sock)
            .arg("--branch")
            .arg(d.path())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_socket(&sock);
        let pid = rustix::process::Pid::from_child(&child);
        rustix::process::kill_process(pid, sig).unwrap();
        assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), 0, "{sig:?}");
    }
}
