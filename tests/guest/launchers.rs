//! Real launchers start the daemon unchanged: each launcher's exact virtiofsd command line
//! (from its source; see docs/src/launchers.md) is replayed here, the test guest boots
//! through the daemon it started, reads a file the host put in the share and writes one the
//! host then reads. Launchers that pass an inherited listening socket (`--fd`) get one from a
//! small Python wrapper that binds, listens, moves the socket to the fd number the launcher
//! uses and execs the daemon, as libvirt, kata and mkosi do.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use testkit::guest::{Backend, Guest, GuestRun};
use testkit::{guest, signal, users};

const HOST_TEXT: &str = "hello from the host";

/// Reads the host's file, writes one back (or, read-only, proves writing fails).
const RW_SCENARIO: &str = r#"
expect_eq "$(cat from-host.txt)" "hello from the host" "host file in the guest"
echo "hello from the guest" > from-guest.txt
"#;

const RO_SCENARIO: &str = r#"
expect_eq "$(cat from-host.txt)" "hello from the host" "host file in the guest"
expect_err "Read-only file system" "echo x > from-guest.txt"
"#;

/// Binds `argv[1]`, listens, puts the socket on fd `argv[2]` and execs `argv[3:]`.
const FD_WRAPPER: &str = r#"
import os, socket, sys
path, fd, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
s.listen(1)
if s.fileno() != fd:
    os.dup2(s.fileno(), fd)
os.set_inheritable(fd, True)
os.execv(argv[0], argv)
"#;

fn share() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    fs::write(d.path().join("from-host.txt"), format!("{HOST_TEXT}\n")).unwrap();
    d
}

fn daemon() -> String {
    guest::daemon_path().to_str().unwrap().to_owned()
}

/// The daemon started directly with `args` (`{socket}` is the socket path).
fn direct(args: &[&str]) -> Backend {
    Backend::command(daemon(), args)
}

/// The daemon started with an inherited listening socket on fd `fd`.
fn via_fd(fd: u32, args: &[&str]) -> Backend {
    let fd = fd.to_string();
    let d = daemon();
    let mut all = vec!["-c", FD_WRAPPER, "{socket}", &fd, &d];
    all.extend_from_slice(args);
    Backend::command("python3", &all)
}

fn boot(backend: &Backend, scenario: &str) -> GuestRun {
    guest::run_scenario(backend, &Guest::default(), scenario)
}

fn check_rw(run: &GuestRun, dir: &Path) {
    run.assert_success();
    assert_eq!(
        fs::read_to_string(dir.join("from-guest.txt")).unwrap(),
        "hello from the guest\n",
        "{}",
        run.transcript()
    );
}

fn check_ro(run: &GuestRun, dir: &Path) {
    run.assert_success();
    assert!(!dir.join("from-guest.txt").exists());
}

#[test]
fn libvirt_legacy_options() {
    // libvirt 9.0 (bookworm), and 11.3 when the binary lacks `separate-options`.
    let d = share();
    let opts = format!(
        "source={},cache=none,sandbox=chroot,xattr,no_flock,no_posix_lock",
        d.path().display()
    );
    let run = boot(&via_fd(3, &["--fd=3", "-o", &opts, "-d"]), RW_SCENARIO);
    check_rw(&run, d.path());
}

#[test]
fn libvirt_separate_options() {
    // libvirt 11.3 (bookworm-backports) with `separate-options`, system mode.
    let d = share();
    let dir = d.path().to_str().unwrap();
    let args = [
        "--fd=3",
        "--shared-dir",
        dir,
        "--cache",
        "never",
        "--sandbox",
        "chroot",
        "--xattr",
        "--thread-pool-size=2",
        "--rlimit-nofile=65536",
        "--log-level",
        "debug",
    ];
    let run = boot(&via_fd(3, &args), RW_SCENARIO);
    check_rw(&run, d.path());
}

#[test]
fn libvirt_session_mode_readonly() {
    // libvirt 11.3 session mode runs the daemon as the session's (ordinary) user and always
    // adds the id maps of that user's own ids; here with <readonly/>.
    let d = share();
    std::fs::set_permissions(
        d.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let dir = d.path().to_str().unwrap();
    let user = users::uvfs_test();
    let uid_map = format!("--uid-map=:0:{}:1:", user.uid);
    let gid_map = format!("--gid-map=:0:{}:1:", user.gid);
    let d_bin = daemon();
    let args = [
        "--reuid=uvfs-test",
        "--regid=uvfs-test",
        "--clear-groups",
        &d_bin,
        "--fd=3",
        "--shared-dir",
        dir,
        &uid_map,
        &gid_map,
        "--readonly",
    ];
    let mut all = vec!["-c", FD_WRAPPER, "{socket}", "3", "/usr/bin/setpriv"];
    all.extend_from_slice(&args);
    let run = boot(&Backend::command("python3", &all), RO_SCENARIO);
    check_ro(&run, d.path());
    assert!(
        run.daemon_log.contains("sandbox: new user namespace"),
        "{}",
        run.daemon_log
    );
}

#[test]
fn kata_go_runtime() {
    let d = share();
    let shared = format!("--shared-dir={}", d.path().display());
    let args = [
        "--syslog",
        "--cache=auto",
        &shared,
        "--fd=3",
        "--inode-file-handles=never",
        "--thread-pool-size=1",
        "--announce-submounts",
    ];
    let run = boot(&via_fd(3, &args), RW_SCENARIO);
    check_rw(&run, d.path());
    // --syslog logs to /dev/log; where there is none, to stderr with one warning (as virtiofsd).
    if !Path::new("/dev/log").exists() {
        assert!(
            run.daemon_log.contains("--syslog: cannot reach /dev/log")
                && run
                    .daemon_log
                    .contains("Waiting for vhost-user socket connection"),
            "{}",
            run.daemon_log
        );
    }
}

#[test]
fn kata_rust_runtime_sees_the_waiting_line() {
    let d = share();
    let dir = d.path().to_str().unwrap();
    let args = [
        "--socket-path",
        "{socket}",
        "--shared-dir",
        dir,
        "--cache",
        "auto",
        "--sandbox",
        "none",
        "--seccomp",
        "none",
        "--inode-file-handles",
        "prefer",
        "--xattr",
    ];
    let run = boot(&direct(&args), RW_SCENARIO);
    check_rw(&run, d.path());
    assert!(
        run.daemon_log
            .contains("Waiting for vhost-user socket connection"),
        "kata waits for this line on stderr:\n{}",
        run.daemon_log
    );
}

#[test]
fn podman_machine() {
    // Podman runs it in the shared directory with `--shared-dir .` and RUST_LOG=ERROR.
    let d = share();
    let mut b = direct(&[
        "--sandbox",
        "none",
        "--socket-path",
        "{socket}",
        "--shared-dir",
        ".",
        "--seccomp=none",
    ]);
    b.env.push(("RUST_LOG".into(), "ERROR".into()));
    b.cwd = Some(d.path().to_path_buf());
    let run = boot(&b, RW_SCENARIO);
    check_rw(&run, d.path());
    assert!(
        !run.daemon_log.contains(" INFO ") && !run.daemon_log.contains(" WARN "),
        "RUST_LOG=ERROR keeps the log quiet:\n{}",
        run.daemon_log
    );
}

#[test]
fn virtme_ng() {
    let d = share();
    let dir = d.path().to_str().unwrap();
    let base = [
        "--syslog",
        "--no-announce-submounts",
        "--posix-acl",
        "--socket-path",
        "{socket}",
        "--shared-dir",
        dir,
        "--sandbox",
        "none",
        "--cache",
        "always",
    ];
    let run = boot(&direct(&base), RW_SCENARIO);
    check_rw(&run, d.path());
    let mut ro = base.to_vec();
    ro.insert(3, "--readonly");
    fs::remove_file(d.path().join("from-guest.txt")).unwrap();
    let run = boot(&direct(&ro), RO_SCENARIO);
    check_ro(&run, d.path());
}

#[test]
fn mkosi() {
    let d = share();
    let dir = d.path().to_str().unwrap();
    for handles in ["--inode-file-handles=prefer", "--inode-file-handles=never"] {
        let args = [
            "--shared-dir",
            dir,
            "--xattr",
            "--no-announce-submounts",
            "--sandbox=chroot",
            handles,
            "--security-label",
            "--fd",
            "3",
        ];
        let _ = fs::remove_file(d.path().join("from-guest.txt"));
        let run = boot(&via_fd(3, &args), RW_SCENARIO);
        check_rw(&run, d.path());
    }
}

fn ensure_group(name: &str) {
    // A host running microvm.nix has a kvm group; CI machines may not.
    let ok = Command::new("groupadd")
        .args(["-f", name])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "groupadd -f {name}");
}

#[test]
fn microvm_nix() {
    ensure_group("kvm");
    let d = share();
    let socket_path = "--socket-path={socket}";
    let shared = format!("--shared-dir={}", d.path().display());
    let args = [
        socket_path,
        "--socket-group=kvm",
        &shared,
        "--rlimit-nofile",
        "1048576",
        "--thread-pool-size",
        "2",
        "--posix-acl",
        "--xattr",
        "--inode-file-handles=never",
    ];
    let run = boot(&direct(&args), RW_SCENARIO);
    check_rw(&run, d.path());
}

#[test]
fn lima_descriptor_then_plain_command_line() {
    // Lima finds the backend through a vhost-user JSON descriptor of type "fs".
    let desc = fs::read_to_string(guest::repo_root().join("qemu/50-union-virtiofsd.json")).unwrap();
    let compact: String = desc.split_whitespace().collect();
    assert!(compact.contains(r#""type":"fs""#), "{desc}");
    assert!(compact.contains(r#""binary":"/"#), "{desc}");
    let d = share();
    let dir = d.path().to_str().unwrap();
    let run = boot(
        &direct(&["--socket-path", "{socket}", "--shared-dir", dir]),
        RW_SCENARIO,
    );
    check_rw(&run, d.path());
}

/// What launchers check before the guest boots: `--version`, `--help` naming `--readonly`
/// (virtme-ng), the locked `<socket>.pid` file (virtme-ng waits for it), the socket's group
/// and mode (`--socket-group`), and a second daemon on the same socket refused.
#[test]
fn probes_pid_file_and_socket_group() {
    let bin = guest::daemon_path();
    let out = Command::new(&bin).arg("--version").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("union-virtiofsd "));
    let out = Command::new(&bin).arg("--help").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("--readonly"));

    ensure_group("kvm");
    let d = share();
    let work = tempfile::tempdir().unwrap();
    let sock = work.path().join("v.sock");
    let pid = work.path().join("v.sock.pid");
    let mut child = Command::new(&bin)
        .args(["--socket-path"])
        .arg(&sock)
        .args(["--shared-dir"])
        .arg(d.path())
        .args(["--socket-group=kvm", "--sandbox", "none"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(sock.exists() && fs::read_to_string(&pid).is_ok_and(|p| p.ends_with('\n'))) {
        assert!(Instant::now() < deadline, "no socket and pid file");
        assert!(child.try_wait().unwrap().is_none(), "daemon exited");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        fs::read_to_string(&pid).unwrap().trim(),
        child.id().to_string()
    );
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let m = fs::metadata(&sock).unwrap();
    let kvm = fs::read_to_string("/etc/group")
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("kvm:x:")
                .and_then(|r| r.split(':').next()?.parse().ok())
        })
        .unwrap();
    assert_eq!((m.gid(), m.permissions().mode() & 0o777), (kvm, 0o660));
    // A second daemon on the same socket path finds the pid file locked: exit 2 (bad input),
    // one line naming the daemon that serves there.
    let second = Command::new(&bin)
        .args(["--socket-path"])
        .arg(&sock)
        .args(["--shared-dir"])
        .arg(d.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("another daemon (pid {})", child.id())),
        "{err}"
    );
    assert!(sock.exists(), "the first daemon's socket is left alone");
    signal::sigterm(&child);
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert!(
        !pid.exists() && !sock.exists(),
        "pid file and socket removed on exit"
    );
}
