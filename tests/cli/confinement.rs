//! Confinement of the running daemon, read from outside as an administrator would: the
//! capability sets in /proc/PID/status (virtiofsd's set, changed by --modcaps; the supervising
//! parent keeps only CAP_DAC_OVERRIDE), a system call outside the seccomp allowlist killing the
//! daemon (`kill`) or being logged by the kernel (`log`), the chroot sandbox (its root is the
//! daemon's own descriptor directory, and it serves), and the unprivileged daemon in a user
//! namespace with virtiofsd's --uid-map/--gid-map.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use testkit::proc::{daemon_on, sandboxed_child, start, status_field, wait_exit, wait_socket};
use testkit::users;
use vufs_frontend::{ops, ConnectOptions, Device};

/// The bit of capability number `n` in a /proc/PID/status mask.
fn bit(n: u32) -> u64 {
    1 << n
}

fn mask(pid: u32, field: &str) -> u64 {
    u64::from_str_radix(&status_field(pid, field), 16).unwrap()
}

/// virtiofsd's default set: chown 0, dac_override 1, fowner 3, fsetid 4, setgid 6, setuid 7,
/// mknod 27, setfcap 31.
const SERVING: [u32; 8] = [0, 1, 3, 4, 6, 7, 27, 31];

/// dac_read_search, kept only while nodes may use file handles (open_by_handle_at).
const DAC_READ_SEARCH: u32 = 2;

#[test]
fn the_daemon_keeps_only_virtiofsds_capabilities_and_modcaps_changes_them() {
    // What this test process may hand down (a container may lack some).
    let ours = mask(std::process::id(), "CapPrm");
    let work = tempfile::tempdir().unwrap();
    let branch = work.path().join("b");
    std::fs::create_dir(&branch).unwrap();
    for (modcaps, handles, add, remove) in [
        (None, "never", None, None),
        (None, "prefer", Some(DAC_READ_SEARCH), None),
        (Some("+sys_admin:-MKNOD"), "mandatory", Some(21), Some(27)),
    ] {
        let sock = work.path().join("s");
        let mut cmd = daemon_on(&sock);
        cmd.arg("--shared-dir").arg(&branch);
        cmd.arg(format!("--inode-file-handles={handles}"));
        if let Some(m) = modcaps {
            cmd.arg(format!("--modcaps={m}"));
        }
        let mut child = start(&mut cmd, &sock);
        let inner = sandboxed_child(child.id());
        // Once it serves, it is confined.
        let mut dev = Device::connect(&sock, &ConnectOptions::default()).unwrap();
        dev.init(ops::DEFAULT_INIT_FLAGS).unwrap();
        let mut want: u64 = SERVING.iter().map(|&n| bit(n)).sum();
        if handles == "mandatory" {
            want |= bit(DAC_READ_SEARCH);
        }
        if let Some(a) = add {
            want |= bit(a);
        }
        if let Some(r) = remove {
            want &= !bit(r);
        }
        want &= ours;
        for set in ["CapEff", "CapPrm", "CapBnd"] {
            assert_eq!(mask(inner, set), want, "{set} with {modcaps:?}, {handles}");
        }
        assert_eq!(mask(inner, "CapInh"), 0);
        assert_eq!(mask(inner, "CapAmb"), 0);
        // The supervisor outside the namespaces keeps only what removing the socket may need
        // (it drops the rest right after the fork, unordered with the child's start).
        let deadline = Instant::now() + Duration::from_secs(10);
        while mask(child.id(), "CapEff") != bit(1) & ours {
            assert!(
                Instant::now() < deadline,
                "supervisor kept its capabilities"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(mask(child.id(), "CapBnd"), bit(1) & ours);
        assert_eq!(status_field(child.id(), "NoNewPrivs"), "1");
        dev.mkdir(ops::ROOT_ID, b"d", 0o755).unwrap();
        drop(dev);
        assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), 0);
        std::fs::remove_dir(branch.join("d")).unwrap();
    }
}

#[test]
fn a_forbidden_system_call_kills_the_daemon_under_seccomp_kill() {
    let work = tempfile::tempdir().unwrap();
    let sock = work.path().join("s");
    for sandbox in ["namespace", "none"] {
        let mut child = daemon_on(&sock)
            .arg("--shared-dir")
            .arg(work.path())
            .args(["--sandbox", sandbox, "--test-forbidden-syscall"])
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            assert!(Instant::now() < deadline, "daemon survived the call");
            std::thread::sleep(Duration::from_millis(10));
        };
        use std::os::unix::process::ExitStatusExt;
        if sandbox == "none" {
            assert_eq!(status.signal(), Some(libc::SIGSYS), "{status:?}");
        } else {
            // The supervisor reports its child's death by SIGSYS as 128 + 31.
            assert_eq!(status.code(), Some(128 + libc::SIGSYS), "{status:?}");
            assert!(!sock.exists(), "the supervisor removed the socket");
        }
    }
}

/// The kernel's log records from now on (/dev/kmsg, read without blocking).
struct Kmsg(std::fs::File);

impl Kmsg {
    fn from_now() -> Kmsg {
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/kmsg")
            .expect("/dev/kmsg");
        // Records from now on only: seek to the end (std's Seek does not reach /dev/kmsg's).
        rustix::fs::seek(&f, rustix::fs::SeekFrom::End(0)).unwrap();
        Kmsg(f)
    }

    /// Waits up to `limit` for a record containing every one of `parts`.
    fn wait_for(&mut self, parts: &[String], limit: Duration) -> Option<String> {
        let deadline = Instant::now() + limit;
        let mut buf = vec![0u8; 8192];
        loop {
            match self.0.read(&mut buf) {
                Ok(n) => {
                    let rec = String::from_utf8_lossy(&buf[..n]).into_owned();
                    if parts.iter().all(|p| rec.contains(p.as_str())) {
                        return Some(rec);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return None;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                // A record overwritten before it was read: go on with the next.
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => {}
                Err(e) => panic!("/dev/kmsg: {e}"),
            }
        }
    }
}

#[test]
fn a_forbidden_system_call_is_logged_and_allowed_under_seccomp_log() {
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("f"), "x").unwrap();
    let sock = work.path().join("s");
    // Without an audit daemon the kernel prints audit records under printk's rate limit
    // (10 per 5 s, shared with every other process), so a record may be dropped: up to three
    // daemons, each given more than one rate-limit window.
    let mut logged = None;
    for _ in 0..3 {
        let mut kmsg = Kmsg::from_now();
        let mut child = start(
            daemon_on(&sock).arg("--shared-dir").arg(work.path()).args([
                "--seccomp",
                "log",
                "--test-forbidden-syscall",
            ]),
            &sock,
        );
        let inner = sandboxed_child(child.id());
        // The call was allowed: the daemon goes on and serves.
        let mut dev = Device::connect(&sock, &ConnectOptions::default()).unwrap();
        dev.init(ops::DEFAULT_INIT_FLAGS).unwrap();
        assert_eq!(dev.lookup(ops::ROOT_ID, b"f").unwrap().attr.size, 1);
        drop(dev);
        assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), 0);
        // Audit type 1326 (SECCOMP), action 0x7ffc0000 (SECCOMP_RET_LOG), from the serving
        // process, for personality(2).
        let parts = [
            "type=1326".to_owned(),
            format!("pid={inner} "),
            format!("syscall={} ", libc::SYS_personality),
            "code=0x7ffc0000".to_owned(),
        ];
        logged = kmsg.wait_for(&parts, Duration::from_secs(6));
        if logged.is_some() {
            break;
        }
    }
    let rec = logged.expect("no kernel audit record of the call in three tries");
    assert!(rec.contains("union-virtiofs"), "{rec}");
}

#[test]
fn the_chroot_sandbox_roots_the_daemon_in_its_own_descriptors_and_serves() {
    let work = tempfile::tempdir().unwrap();
    let (a, b) = (work.path().join("a"), work.path().join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    std::fs::write(b.join("low"), "from b").unwrap();
    let sock = work.path().join("s");
    let mut child = start(
        daemon_on(&sock)
            .arg("--branch")
            .arg(&a)
            .arg("--branch")
            .arg(format!("{}=RO", b.display()))
            .args(["--sandbox", "chroot"]),
        &sock,
    );
    let pid = child.id();
    // Its root is its own /proc/PID/fd: every name there is a descriptor number.
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_link(format!("/proc/{pid}/root")).unwrap()
        != std::path::Path::new(&format!("/proc/{pid}/fd"))
    {
        assert!(Instant::now() < deadline, "no chroot");
        std::thread::sleep(Duration::from_millis(10));
    }
    for e in std::fs::read_dir(format!("/proc/{pid}/root")).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        assert!(name.bytes().all(|c| c.is_ascii_digit()), "{name}");
    }
    // It serves through its descriptors: lookup, create, write, truncate (a path-only call
    // through /N), read back.
    let mut dev = Device::connect(&sock, &ConnectOptions::default()).unwrap();
    dev.init(ops::DEFAULT_INIT_FLAGS).unwrap();
    // Read once INIT is answered: the daemon drops its capabilities after the chroot and
    // before it serves, so between the two the bounding set still held CAP_SYS_CHROOT.
    assert_eq!(
        mask(pid, "CapBnd") & bit(18),
        0,
        "no CAP_SYS_CHROOT to chroot again"
    );
    // Serving, so confined: no CAP_SYS_CHROOT left to chroot again.
    assert_eq!(mask(pid, "CapBnd") & bit(18), 0);
    let low = dev.lookup(ops::ROOT_ID, b"low").unwrap();
    let o = dev.open(low.nodeid, libc::O_RDONLY as u32).unwrap();
    assert_eq!(dev.read(low.nodeid, o.fh, 0, 100).unwrap(), b"from b");
    let (e, o) = dev
        .create(ops::ROOT_ID, b"new", 0o640, libc::O_RDWR as u32)
        .unwrap();
    dev.write(e.nodeid, o.fh, 0, b"hello world").unwrap();
    let dir = dev.opendir(ops::ROOT_ID).unwrap();
    let names: Vec<Vec<u8>> = dev
        .readdir_all(ops::ROOT_ID, dir.fh)
        .unwrap()
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert!(names.contains(&b"new".to_vec()) && names.contains(&b"low".to_vec()));
    drop(dev);
    assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), 0);
    assert_eq!(std::fs::read(a.join("new")).unwrap(), b"hello world");
    assert_eq!(
        std::fs::metadata(a.join("new")).unwrap().mode() & 0o777,
        0o640
    );
}

#[test]
fn an_unprivileged_daemon_maps_ids_in_its_user_namespace() {
    let user = users::uvfs_test();
    let (uid, gid, sub_u, sub_g) = (user.uid, user.gid, user.sub_uid, user.sub_gid);
    let work = tempfile::tempdir().unwrap();
    let branch = work.path().join("b");
    std::fs::create_dir(&branch).unwrap();
    std::fs::set_permissions(
        work.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::os::unix::fs::chown(&branch, Some(uid), Some(gid)).unwrap();
    std::fs::set_permissions(&branch, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let run = work.path().join("run");
    std::fs::create_dir(&run).unwrap();
    std::os::unix::fs::chown(&run, Some(uid), Some(gid)).unwrap();
    let sock = run.join("s");
    let log = work.path().join("log");
    let unprivileged = |handles: &str| {
        let mut cmd = std::process::Command::new("setpriv");
        cmd.args(["--reuid=uvfs-test", "--regid=uvfs-test", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_union-virtiofsd"))
            .arg("--socket-path")
            .arg(&sock)
            .arg("--shared-dir")
            .arg(&branch)
            .arg(format!("--uid-map=:0:{uid}:1:"))
            .arg(format!("--uid-map=:1:{sub_u}:65536:"))
            .arg(format!("--gid-map=:0:{gid}:1:"))
            .arg(format!("--gid-map=:1:{sub_g}:65536:"))
            .arg(format!("--inode-file-handles={handles}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        cmd
    };
    // The kernel opens file handles only with CAP_DAC_READ_SEARCH in the initial user
    // namespace: mandatory refuses to start, in one line; prefer falls back and says so.
    let st = unprivileged("mandatory").status().unwrap();
    let said = std::fs::read_to_string(&log).unwrap();
    assert_eq!(st.code(), Some(2), "{said}");
    assert!(
        said.contains("--inode-file-handles=mandatory: branch")
            && said.contains("cannot use file handles: Operation not permitted"),
        "{said}"
    );
    let mut child = unprivileged("prefer").spawn().unwrap();
    wait_socket(&sock);
    let inner = sandboxed_child(child.id());
    let map = std::fs::read_to_string(format!("/proc/{inner}/uid_map")).unwrap();
    let rows: Vec<Vec<u32>> = map
        .lines()
        .map(|l| l.split_whitespace().map(|n| n.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows, [vec![0, uid, 1], vec![1, sub_u, 65536]]);
    // As the host sees it: the daemon is the ordinary user, with no capability there.
    assert_eq!(
        status_field(inner, "Uid").split('\t').next().unwrap(),
        uid.to_string()
    );
    // Entries made for guest root and guest user 1000 are owned by the mapped host ids; a
    // guest id the map does not cover is refused (EOVERFLOW), never served as root.
    let mut dev = Device::connect(&sock, &ConnectOptions::default()).unwrap();
    dev.init(ops::DEFAULT_INIT_FLAGS).unwrap();
    // Serving, so confined.
    assert_eq!(status_field(inner, "Seccomp"), "2");
    let mkdir_as = |dev: &mut Device, name: &[u8], id: u32| {
        let mut req = ops::mkdir(ops::ROOT_ID, name, 0o755);
        (req.uid, req.gid) = (id, id);
        dev.send(&req)
            .and_then(|r| r.parse::<vufs_frontend::fuse_abi::EntryOut>())
    };
    mkdir_as(&mut dev, b"by-root", 0).unwrap();
    mkdir_as(&mut dev, b"by-1000", 1000).unwrap();
    let err = mkdir_as(&mut dev, b"by-70000", 70000).unwrap_err();
    assert_eq!(err.errno(), Some(libc::EOVERFLOW), "{err}");
    drop(dev);
    assert_eq!(wait_exit(&mut child, Duration::from_secs(10)), 0);
    assert!(!sock.exists(), "socket removed");
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.contains("branch 0: no file handles (Operation not permitted")
            && said.contains("its nodes are reopened by path"),
        "{said}"
    );
    let owner = |n: &str| {
        let m = std::fs::metadata(branch.join(n)).unwrap();
        (m.uid(), m.gid())
    };
    assert_eq!(owner("by-root"), (uid, gid));
    assert_eq!(owner("by-1000"), (sub_u + 999, sub_g + 999));
    assert!(!branch.join("by-70000").exists());
}
