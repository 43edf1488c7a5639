//! The host's control socket (`<socket>.ctl`) with the real daemon (default sandbox and
//! seccomp filter) and `union-virtiofsd ctl` run as a process: the socket's life and mode,
//! errors as one line and exit 2, reading and changing options, branch edits carrying
//! descriptors, and a daemon that shrugs off broken clients.

use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use testkit::bin::daemon_path;
use testkit::ctl;
use testkit::daemon::Daemon;

/// The control socket of `d`, once it is there.
fn ctl_path(d: &Daemon) -> PathBuf {
    let p = PathBuf::from(format!("{}.ctl", d.socket().display()));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::metadata(&p).is_ok_and(|m| m.file_type().is_socket()) {
        assert!(Instant::now() < deadline, "no {}\n{}", p.display(), d.log());
        std::thread::sleep(Duration::from_millis(10));
    }
    p
}

/// `ctl ARGS…` that must succeed; its stdout.
fn ctl_ok(d: &Daemon, args: &[&str]) -> String {
    let (code, out, err) = ctl::run(&d.socket(), args);
    assert_eq!(code, 0, "ctl {args:?}: {err}\n{}", d.log());
    assert!(err.is_empty(), "ctl {args:?}: {err}");
    out
}

fn sigterm_and_wait(d: &mut Daemon) {
    let pid = rustix::process::Pid::from_raw(d.proc.pid() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let st = d.proc.wait_exit(Duration::from_secs(20)).unwrap();
    assert_eq!(st.and_then(|s| s.code()), Some(0), "{}", d.log());
}

#[test]
fn the_control_socket_lives_and_dies_with_the_daemon() {
    let mut d = Daemon::start(&["a"], &[]);
    let p = ctl_path(&d);
    let m = std::fs::metadata(&p).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o600);
    // Either name reaches it.
    let by_vhost = ctl_ok(&d, &["keys"]);
    let (code, by_ctl, err) = ctl::run(&p, &["keys"]);
    assert_eq!((code, &by_ctl), (0, &by_vhost), "{err}");
    sigterm_and_wait(&mut d);
    assert!(!p.exists(), "{} left behind", p.display());
    assert!(!d.socket().exists());
}

#[test]
fn with_a_socket_group_the_group_may_use_it() {
    let mut d = Daemon::start(&["a"], &["--socket-group", "0", "--sandbox", "none"]);
    let p = ctl_path(&d);
    // The start line is said once every socket is bound and given to its group.
    d.wait_for_log(&format!("(control {})", p.display()));
    let m = std::fs::metadata(&p).unwrap();
    assert_eq!((m.gid(), m.permissions().mode() & 0o777), (0, 0o660));
    sigterm_and_wait(&mut d);
    assert!(!p.exists());
}

#[test]
fn errors_are_one_line_and_exit_2() {
    let d = Daemon::start(&["a"], &[]);
    let _ = ctl_path(&d);
    let sock = d.socket();
    let e = ctl::fails(&sock, &["get", "nosuchkey"]);
    assert!(e.contains("unknown option 'nosuchkey'"), "{e}");
    let e = ctl::fails(&sock, &["set", "branches", "+/does/not/exist"]);
    assert_eq!(e, "union-virtiofsd ctl: /does/not/exist: no such directory");
    let e = ctl::fails(&sock, &["set", "version", "9"]);
    assert!(e.contains("read-only option 'version'"), "{e}");
    let e = ctl::fails(&sock, &["set", "category.create", "zz"]);
    assert!(e.contains("invalid value"), "{e}");
    ctl::fails(&sock, &["frob"]);
    ctl::fails(&sock, &["set", "k"]);
    ctl::fails(&sock, &["query", "/x", "nonsense"]);
    let e = ctl::fails(Path::new("/nonexistent"), &["get", "x"]);
    assert!(e.contains("/nonexistent.ctl"), "{e}");
    let (code, _, _) = ctl::run(&sock, &["--help"]);
    assert_eq!(code, 0);
}

#[test]
fn options_are_read_and_changed() {
    let d = Daemon::start(&["a", "b=RO"], &[]);
    let _ = ctl_path(&d);
    assert_eq!(
        ctl_ok(&d, &["get", "version"]).trim(),
        env!("CARGO_PKG_VERSION")
    );
    let keys = ctl_ok(&d, &["keys"]);
    assert!(keys.lines().any(|k| k == "category.create"), "{keys}");
    let branches = ctl_ok(&d, &["get", "user.mergerfs.branches"]);
    let (a, b) = (&d.branches[0], &d.branches[1]);
    assert!(branches.contains(&a.display().to_string()), "{branches}");
    assert!(branches.contains(&b.display().to_string()), "{branches}");

    assert_eq!(ctl_ok(&d, &["set", "category.create", "mfs"]), "");
    assert_eq!(ctl_ok(&d, &["get", "category.create"]).trim(), "mfs");
    ctl_ok(&d, &["set", "user.mergerfs.category.create", "ff"]);
    let all = ctl_ok(&d, &["get"]);
    assert!(all.lines().any(|l| l == "category.create=ff"), "{all}");
    assert!(all.lines().count() >= keys.lines().count(), "{all}");
    d.wait_for_log("ctl: set category.create=ff");
}

#[test]
fn branch_edits_send_the_directories() {
    let d = Daemon::start(&["a"], &[]);
    let _ = ctl_path(&d);
    let extra = d.tmp.path().join("extra");
    for n in ["disk1", "disk2"] {
        std::fs::create_dir_all(extra.join(n)).unwrap();
    }
    std::fs::write(extra.join("disk1/only-here"), "x").unwrap();
    let glob = format!("{}/disk*=RO", extra.display());
    ctl_ok(&d, &["set", "branches", &format!("+>{glob}")]);
    let branches = ctl_ok(&d, &["get", "branches"]);
    let canon = std::fs::canonicalize(&extra).unwrap();
    for n in ["disk1", "disk2"] {
        let p = canon.join(n).display().to_string();
        assert!(branches.contains(&p), "{p} not in {branches}");
    }
    // The sandboxed daemon serves the new branch it never saw by path.
    let mut dev = d.session();
    let e = dev
        .lookup(vufs_frontend::ops::ROOT_ID, b"only-here")
        .unwrap_or_else(|e| panic!("lookup on the added branch: {e}\n{}", d.log()));
    let fh = dev.open(e.nodeid, libc::O_RDONLY as u32).unwrap().fh;
    assert_eq!(dev.read(e.nodeid, fh, 0, 16).unwrap(), b"x");
    assert!(d.log().contains("sandbox: new mount"), "{}", d.log());
    let found = ctl_ok(&d, &["query", "/only-here", "fullpath"]);
    assert_eq!(
        found.trim(),
        canon.join("disk1/only-here").display().to_string()
    );
    let disk2 = canon.join("disk2").display().to_string();
    ctl_ok(&d, &["set", "branches", &format!("-{disk2}")]);
    let branches = ctl_ok(&d, &["get", "branches"]);
    assert!(!branches.contains(&disk2), "{branches}");
}

#[test]
fn sighup_rereads_the_config_file_all_or_nothing() {
    let conf_dir = tempfile::tempdir().unwrap();
    let conf = conf_dir.path().join("pool.conf");
    std::fs::write(&conf, "category.create=ff\n").unwrap();
    let conf_arg = conf.display().to_string();
    let d = Daemon::start(&["a"], &["--config", &conf_arg]);
    let _ = ctl_path(&d);
    assert_eq!(ctl_ok(&d, &["get", "category.create"]).trim(), "ff");
    // Replaced as an editor does (a new file renamed over the old one), then SIGHUP to the
    // process the launcher started (in the sandbox, the supervisor forwards it).
    let replace = |text: &str| {
        let tmp = conf_dir.path().join("pool.conf.new");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &conf).unwrap();
        let pid = rustix::process::Pid::from_raw(d.proc.pid() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::HUP).unwrap();
    };
    replace("category.create=mfs\nminfreespace=1G\n");
    d.wait_for_log("SIGHUP: re-read");
    assert_eq!(ctl_ok(&d, &["get", "category.create"]).trim(), "mfs");
    assert_eq!(ctl_ok(&d, &["get", "minfreespace"]).trim(), "1073741824");
    replace("category.create=lus\ninodecalc=path-hash\n");
    d.wait_for_log("nothing changed");
    assert_eq!(ctl_ok(&d, &["get", "category.create"]).trim(), "mfs");
}

/// Sends `payload` as one frame on `s`.
fn send_frame(s: &mut UnixStream, payload: &[u8]) {
    s.write_all(&(payload.len() as u32).to_le_bytes()).unwrap();
    s.write_all(payload).unwrap();
}

/// Reads one reply frame's payload.
fn read_frame(s: &mut UnixStream) -> Vec<u8> {
    let mut h = [0u8; 4];
    s.read_exact(&mut h).unwrap();
    let mut p = vec![0u8; u32::from_le_bytes(h) as usize];
    s.read_exact(&mut p).unwrap();
    p
}

#[test]
fn broken_clients_cost_the_daemon_nothing() {
    let mut d = Daemon::start(&["a"], &[]);
    let p = ctl_path(&d);
    let timeout = Some(Duration::from_secs(20));
    let connect = || {
        let s = UnixStream::connect(&p).unwrap();
        s.set_read_timeout(timeout).unwrap();
        s
    };

    // Garbage inside well-formed frames: an error reply each, and the connection goes on.
    let mut s = connect();
    for bad in [
        &b"frob"[..],
        b"",
        b"get",
        b"keys\0",
        b"set\0k",
        b"\xff\0\xfe",
        b"get\0\xff",
    ] {
        send_frame(&mut s, bad);
        let reply = read_frame(&mut s);
        assert!(reply.starts_with(b"err\0"), "{bad:?}: {reply:?}");
    }
    send_frame(&mut s, b"keys");
    assert!(read_frame(&mut s).starts_with(b"ok\0"));
    // A length past the limit: an error, and the connection is closed.
    s.write_all(&u32::MAX.to_le_bytes()).unwrap();
    assert!(read_frame(&mut s).starts_with(b"err\0"));
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());

    // Truncated frames, and a hang-up after the header.
    let mut s = connect();
    s.write_all(&[100, 0, 0, 0, b'g', b'e', b't']).unwrap();
    drop(s);
    let mut s = connect();
    s.write_all(&[4, 0]).unwrap();
    drop(s);
    drop(connect());

    let mut s = connect();
    send_frame(&mut s, b"keys");
    let reply = read_frame(&mut s);
    assert!(reply.starts_with(b"ok\0"), "{reply:?}\n{}", d.log());
    assert!(reply.split(|b| *b == 0).any(|k| k == b"category.create"));
    d.assert_alive();
    assert!(!d.log().contains("panicked"), "{}", d.log());
}

/// `--upgrade`: the new daemon's control socket replaces the old one's once the session is
/// its own (until then the old daemon answers), and the old daemon leaves it in place; with
/// and without the sandbox (where the new one renames it into place through a descriptor).
#[test]
fn an_upgrade_hands_the_control_socket_over() {
    upgrade_case("none");
    upgrade_case("namespace");
}

fn upgrade_case(sandbox: &str) {
    let d = Daemon::start(&["a"], &["--sandbox", sandbox]);
    let p = ctl_path(&d);
    let old_ino = std::fs::metadata(&p).unwrap().ino();
    let old_pid = ctl_ok(&d, &["get", "pid"]);
    let mut dev = d.session();
    dev.getattr(vufs_frontend::ops::ROOT_ID).unwrap();

    let log_path = d.tmp.path().join("run/new.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut new = Command::new(daemon_path())
        .arg("--socket-path")
        .arg(d.socket())
        .arg("--branch")
        .arg(&d.branches[0])
        .args(["--sandbox", sandbox, "--upgrade"])
        .arg(format!("{}.pid", d.socket().display()))
        .stderr(log)
        .spawn()
        .unwrap();
    let new_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !new_log().contains("upgrade: serving the session") {
        assert!(Instant::now() < deadline, "no takeover\n{}", new_log());
        assert!(new.try_wait().unwrap().is_none(), "{}", new_log());
        std::thread::sleep(Duration::from_millis(10));
    }
    // The new daemon answers the guest's next request, and the old one exits.
    dev.getattr(vufs_frontend::ops::ROOT_ID).unwrap();
    let mut old = d;
    let st = old.proc.wait_exit(Duration::from_secs(20)).unwrap();
    assert_eq!(st.and_then(|s| s.code()), Some(0), "{}", old.log());
    let m = std::fs::metadata(&p).unwrap();
    assert_ne!(m.ino(), old_ino, "{sandbox}: {}", new_log());
    assert_eq!(m.permissions().mode() & 0o777, 0o600);
    // The host's pids, in the sandbox too (the supervisor each launcher started).
    let pid = ctl_ok(&old, &["get", "pid"]);
    assert_eq!(old_pid.trim(), old.proc.pid().to_string());
    assert_eq!(pid.trim(), new.id().to_string(), "{sandbox}: {}", new_log());
    let names: Vec<_> = std::fs::read_dir(old.tmp.path().join("run"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains(".new-"))
        .collect();
    assert!(names.is_empty(), "{names:?}");
    drop(dev);
    let deadline = Instant::now() + Duration::from_secs(20);
    while new.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the new daemon did not exit");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!p.exists(), "{sandbox}: {}", new_log());
}

/// libvirt, kata and mkosi pass a listening socket (`--fd`): there is no `<socket>.ctl`, and
/// `--ctl-socket` (any name) is where `ctl` reaches the daemon, logged at start, removed at
/// exit. What is refused there (a file, a served socket: exit 2, left as it was) is in
/// `bad_input.rs`'s table.
#[test]
fn with_fd_the_control_socket_is_where_ctl_socket_says() {
    testkit::alone::in_own_process(|| {
        use std::os::fd::AsRawFd;
        let d = tempfile::tempdir().unwrap();
        let branch = d.path().join("a");
        std::fs::create_dir(&branch).unwrap();
        let sock = d.path().join("vhost.sock");
        let ctl_sock = d.path().join("control");
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        rustix::io::fcntl_setfd(&listener, rustix::io::FdFlags::empty()).unwrap();
        let fd = listener.as_raw_fd().to_string();
        let log = d.path().join("log");
        let mut child = testkit::proc::daemon()
            .args(["--fd", &fd, "--branch"])
            .arg(&branch)
            .arg("--ctl-socket")
            .arg(&ctl_sock)
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        drop(listener);
        let text = || std::fs::read_to_string(&log).unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !std::fs::metadata(&ctl_sock).is_ok_and(|m| m.file_type().is_socket()) {
            assert!(Instant::now() < deadline, "no control socket\n{}", text());
            std::thread::sleep(Duration::from_millis(10));
        }
        // The start line comes once the sandbox is entered, after the socket exists.
        let line = format!("(control {})", ctl_sock.display());
        while !text().contains(&line) {
            assert!(Instant::now() < deadline, "no start line\n{}", text());
            std::thread::sleep(Duration::from_millis(10));
        }
        let m = std::fs::metadata(&ctl_sock).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
        assert!(!d.path().join("vhost.sock.ctl").exists());
        let run = |args: &[&str]| {
            let out = Command::new(daemon_path())
                .arg("ctl")
                .arg("--ctl-socket")
                .arg(&ctl_sock)
                .args(args)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            assert!(out.status.success(), "ctl {args:?}: {err}\n{}", text());
            String::from_utf8(out.stdout).unwrap()
        };
        assert_eq!(run(&["get", "pid"]).trim(), child.id().to_string());
        run(&["set", "category.create", "mfs"]);
        assert_eq!(run(&["get", "category.create"]).trim(), "mfs");

        let pid = rustix::process::Pid::from_child(&child);
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        assert_eq!(
            testkit::proc::wait_exit(&mut child, Duration::from_secs(20)),
            0
        );
        assert!(!ctl_sock.exists(), "{} left behind", ctl_sock.display());
    });
}

/// `ctl-socket=PATH` in `--config` (libvirt passes no option of the user's own) overrides
/// `<socket>.ctl`, and the daemon leaves no `<socket>.ctl`.
#[test]
fn the_config_file_can_name_the_control_socket() {
    let conf_dir = tempfile::tempdir().unwrap();
    let conf = conf_dir.path().join("pool.conf");
    let ctl_sock = conf_dir.path().join("pool.ctl-sock");
    std::fs::write(&conf, format!("ctl-socket={}\n", ctl_sock.display())).unwrap();
    let mut d = Daemon::start(&["a"], &["--config", conf.to_str().unwrap()]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ctl_sock.exists() {
        assert!(Instant::now() < deadline, "no control socket\n{}", d.log());
        std::thread::sleep(Duration::from_millis(10));
    }
    let (code, out, err) = ctl::run(&ctl_sock, &["get", "pid"]);
    // `--socket` with a name not ending in .ctl means the vhost socket: use --ctl-socket.
    assert_eq!(code, 2, "{out}{err}");
    let out = Command::new(daemon_path())
        .args(["ctl", "--ctl-socket"])
        .arg(&ctl_sock)
        .args(["get", "pid"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        d.proc.pid().to_string()
    );
    assert!(!PathBuf::from(format!("{}.ctl", d.socket().display())).exists());
    sigterm_and_wait(&mut d);
    assert!(!ctl_sock.exists(), "{} left behind", ctl_sock.display());
}

/// In the default (namespace) sandbox the serving child is pid 1 of its own namespace:
/// `ctl get pid` is the pid the launcher started, the one a host user signals.
#[test]
fn ctl_get_pid_is_the_host_pid() {
    for sandbox in ["namespace", "none"] {
        let d = Daemon::start(&["a"], &["--sandbox", sandbox]);
        let _ = ctl_path(&d);
        assert_eq!(
            ctl_ok(&d, &["get", "pid"]).trim(),
            d.proc.pid().to_string(),
            "{sandbox}"
        );
        assert_eq!(
            ctl_ok(&d, &["get", "user.mergerfs.pid"]).trim(),
            d.proc.pid().to_string()
        );
    }
}

/// SIGHUP adds and removes branches under the default namespace sandbox, where the serving
/// child sees no host path: the supervisor reads the file and opens the directories, as `ctl`
/// does. A missing branch is named in the refusal, and nothing changes.
#[test]
fn sighup_changes_branches_in_the_namespace_sandbox() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    for n in ["c1", "c2", "c3"] {
        std::fs::create_dir(r.join(n)).unwrap();
    }
    std::fs::write(r.join("c3/only-in-c3"), "three").unwrap();
    let conf = r.join("pool.conf");
    let c = |n: &str| r.join(n).display().to_string();
    std::fs::write(&conf, format!("branches={}:{}\n", c("c1"), c("c2"))).unwrap();
    let d = Daemon::start(&["a"], &["--config", conf.to_str().unwrap()]);
    let _ = ctl_path(&d);
    // The socket is there before the sandbox; the serving child logs this inside it.
    d.wait_for_log("sandbox: new mount");
    ctl_ok(&d, &["get", "pid"]);
    let hup = |text: String| {
        std::fs::write(&conf, text).unwrap();
        let pid = rustix::process::Pid::from_raw(d.proc.pid() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::HUP).unwrap();
    };
    // A glob, as at start: c1, c2 and the new c3 (pool.conf, a file, is skipped).
    hup(format!("branches={}/*\n", r.display()));
    d.wait_for_log("SIGHUP: re-read");
    let branches = ctl_ok(&d, &["get", "srcmounts"]);
    assert_eq!(
        branches.trim(),
        format!("{}:{}:{}", c("c1"), c("c2"), c("c3")),
        "{}",
        d.log()
    );
    let mut dev = d.session();
    let e = dev
        .lookup(vufs_frontend::ops::ROOT_ID, b"only-in-c3")
        .unwrap_or_else(|e| panic!("lookup on the branch SIGHUP added: {e}\n{}", d.log()));
    let fh = dev.open(e.nodeid, libc::O_RDONLY as u32).unwrap().fh;
    assert_eq!(dev.read(e.nodeid, fh, 0, 16).unwrap(), b"three");

    hup(format!("branches={}:{}\n", c("c1"), c("c9")));
    d.wait_for_log("nothing changed");
    let line = std::fs::read_to_string(d.tmp.path().join("run/daemon.log"))
        .unwrap()
        .lines()
        .find(|l| l.contains("nothing changed"))
        .unwrap()
        .to_owned();
    assert!(
        line.contains(&format!("branch {}: No such file", c("c9"))),
        "{line}"
    );
    assert!(!line.contains(&format!("{}:", c("c1"))), "{line}");
    assert_eq!(
        ctl_ok(&d, &["get", "srcmounts"])
            .trim()
            .matches(':')
            .count(),
        2
    );
}

/// A `ctl` branch glob that also matches a regular file adds the directories it matches, as
/// the same glob does at start.
#[test]
fn a_ctl_glob_skips_files_as_at_start() {
    let d = Daemon::start(&["a"], &[]);
    let _ = ctl_path(&d);
    let extra = d.tmp.path().join("extra");
    for n in ["disk1", "disk2"] {
        std::fs::create_dir_all(extra.join(n)).unwrap();
    }
    std::fs::write(extra.join("disk-notes.txt"), "").unwrap();
    ctl_ok(
        &d,
        &["set", "branches", &format!("+>{}/disk*", extra.display())],
    );
    let canon = std::fs::canonicalize(&extra).unwrap();
    let srcmounts = ctl_ok(&d, &["get", "srcmounts"]);
    let want = format!(
        "{}:{}:{}",
        d.branches[0].display(),
        canon.join("disk1").display(),
        canon.join("disk2").display()
    );
    assert_eq!(srcmounts.trim(), want);
    let e = ctl::fails(
        &d.socket(),
        &["set", "branches", &format!("+{}/disk-*", extra.display())],
    );
    assert!(e.ends_with("disk-*: no such directory"), "{e}");
}
