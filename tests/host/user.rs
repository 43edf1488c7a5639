//! An ordinary user's host mount (uvfs-test, through fusermount3, in a mount namespace of
//! its own: testkit::usermount): file operations land on the user's branches as the user's
//! files; the daemon runs with no capability, no_new_privs and its seccomp filter; `suid` is
//! dropped with fusermount3's note; `fusermount3 -u` and SIGTERM end it with status 0 and
//! nothing mounted (the unmount helper ignores the signals a whole terminal or service
//! gets); a SIGKILL leaves a dead mount that `fusermount3 -u` removes; `allow_other` is the
//! host's to allow (/etc/fuse.conf), refused in one line with exit status 2 otherwise, as is
//! a /dev/fuse the user cannot open; the fstab form returns once the user's mount is served,
//! and `fusermount3 -u` ends it.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use testkit::proc::status_field;
use testkit::tmpfs::Tmpfs;
use testkit::usermount::{command, daemon, user_dir, UserMount};
use testkit::users::uvfs_test;

/// /etc/fuse.conf as Debian ships it: `user_allow_other` commented out.
const NO_ALLOW_OTHER: &str = "#user_allow_other";

/// A small tmpfs branch owned by uvfs-test.
fn user_branch() -> Tmpfs {
    let u = uvfs_test();
    Tmpfs::with_options(&format!("size=16M,mode=0755,uid={},gid={}", u.uid, u.gid))
}

fn branch_args(branches: &[&Path], opts: &str) -> Vec<String> {
    let mut v = Vec::new();
    for b in branches {
        v.push("--branch".to_owned());
        v.push(b.display().to_string());
    }
    v.extend(["-o".to_owned(), opts.to_owned()]);
    v
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn an_ordinary_user_mounts_through_fusermount3_and_unmounts_with_it() {
    let u = uvfs_test();
    let (a, b) = (user_branch(), user_branch());
    std::fs::write(b.path().join("b.txt"), "from b\n").unwrap();
    std::os::unix::fs::chown(b.path().join("b.txt"), Some(u.uid), Some(u.gid)).unwrap();
    let args = branch_args(
        &[a.path(), b.path()],
        "category.create=ff,minfreespace=1M,suid",
    );
    let mut m = UserMount::new(NO_ALLOW_OTHER, &strs(&args));
    let pid = m.pid();
    // fusermount3 made it for the user: the user's id, no allow_other, suid dropped (its
    // note in the log).
    let opts = m.mount_options(pid).unwrap();
    assert!(opts.contains(&format!("user_id={}", u.uid)), "{opts}");
    assert!(
        !opts.contains("allow_other") && opts.contains("nosuid"),
        "{opts}"
    );
    assert!(
        m.log().contains("fusermount3: unsafe option suid ignored"),
        "{}",
        m.log()
    );
    // Confined as far as an ordinary user can be: no capability, no_new_privs, the filter.
    assert_eq!(
        status_field(pid, "Uid").split('\t').next(),
        Some(&*u.uid.to_string())
    );
    assert_eq!(status_field(pid, "CapEff"), "0000000000000000");
    assert_eq!(status_field(pid, "NoNewPrivs"), "1");
    assert_eq!(status_field(pid, "Seccomp"), "2");
    let script = "set -e; cd \"$1\"; cat b.txt; echo hello > new.txt; mkdir d; echo x > d/f; \
                  mv new.txt renamed.txt; echo again >> b.txt; ls";
    let out = m
        .as_user("sh")
        .args(["-c", script, "sh"])
        .arg(m.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}\n{}", m.log());
    assert_eq!(text, "from b\nb.txt\nd\nrenamed.txt\n");
    // ff: new entries on the first branch, as the user's; a changed file stays where it was.
    let renamed = a.path().join("renamed.txt");
    assert_eq!(std::fs::read_to_string(&renamed).unwrap(), "hello\n");
    assert_eq!(std::fs::metadata(&renamed).unwrap().uid(), u.uid);
    assert_eq!(
        std::fs::read_to_string(a.path().join("d/f")).unwrap(),
        "x\n"
    );
    assert!(!a.path().join("new.txt").exists() && !b.path().join("renamed.txt").exists());
    assert_eq!(
        std::fs::read_to_string(b.path().join("b.txt")).unwrap(),
        "from b\nagain\n"
    );
    // Without allow_other the mount is the user's alone, root included.
    let root = m.in_ns("ls").arg(m.path()).output().unwrap();
    assert!(!root.status.success(), "{root:?}");
    assert!(String::from_utf8_lossy(&root.stderr).contains("Permission denied"));
    let ok = m
        .as_user("fusermount3")
        .arg("-u")
        .arg(m.path())
        .status()
        .unwrap()
        .success();
    assert!(ok, "fusermount3 -u\n{}", m.log());
    assert_eq!(m.wait(Duration::from_secs(20)), 0, "{}", m.log());
}

#[test]
fn sigterm_unmounts_through_the_helper_and_exits_0() {
    let a = user_branch();
    let args = branch_args(&[a.path()], "minfreespace=1M");
    let mut m = UserMount::new(NO_ALLOW_OTHER, &strs(&args));
    // A process that keeps the namespace after the daemon, to see its mount table then; it
    // says when it is in.
    let mut holder = m
        .in_ns("sh")
        .args(["-c", "echo in; exec cat"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line, "in\n");
    assert!(m.mount_options(holder.id()).is_some(), "{}", m.log());
    // The unmount helper (the daemon's one child) ignores the signals that reach a whole
    // terminal or service: it is still there to unmount when the daemon asks.
    let kids = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", m.pid())).unwrap();
    let helper: Vec<&str> = kids.split_whitespace().collect();
    assert_eq!(helper.len(), 1, "children: {kids}");
    for sig in ["-TERM", "-INT", "-HUP"] {
        let ok = std::process::Command::new("kill")
            .args([sig, helper[0]])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} {}", helper[0]);
    }
    let ok = std::process::Command::new("kill")
        .args(["-TERM", &m.pid().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    assert_eq!(m.wait(Duration::from_secs(20)), 0, "{}", m.log());
    let left = m.mount_options(holder.id());
    drop(holder.stdin.take());
    holder.wait().unwrap();
    assert_eq!(left, None, "still mounted after SIGTERM:\n{}", m.log());
    assert!(!m.log().contains("cannot unmount"), "{}", m.log());
}

#[test]
fn a_dev_fuse_the_user_cannot_open_is_one_line_and_exit_2() {
    let a = user_branch();
    let args = branch_args(&[a.path()], "minfreespace=1M");
    let (at, dev) = (user_dir(), tempfile::tempdir().unwrap());
    let out = command(at.path(), dev.path(), NO_ALLOW_OTHER, &strs(&args))
        .env("UVFS_FUSE_MODE", "0600")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    let want = format!(
        "fusermount3 cannot mount on {}: failed to open /dev/fuse: Permission denied",
        at.path().display()
    );
    assert!(err.contains(&want), "{err}");
}

#[test]
fn allow_other_is_the_hosts_to_allow() {
    let a = user_branch();
    let args = branch_args(&[a.path()], "minfreespace=1M,allow_other");
    // Refused where /etc/fuse.conf does not allow it: one line, exit status 2.
    let (at, dev) = (user_dir(), tempfile::tempdir().unwrap());
    let out = command(at.path(), dev.path(), NO_ALLOW_OTHER, &strs(&args))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(
        err.contains(&format!(
            "fusermount3 cannot mount on {}: option allow_other only allowed if 'user_allow_other' is set in /etc/fuse.conf",
            at.path().display()
        )),
        "{err}"
    );
    // Allowed: root may use the user's mount.
    let mut m = UserMount::new("user_allow_other", &strs(&args));
    assert!(m.mount_options(m.pid()).unwrap().contains("allow_other"));
    let root = m.in_ns("ls").arg(m.path()).output().unwrap();
    assert!(root.status.success(), "{root:?}");
    let ok = m
        .as_user("fusermount3")
        .arg("-u")
        .arg(m.path())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    assert_eq!(m.wait(Duration::from_secs(20)), 0, "{}", m.log());
}

#[test]
fn the_fstab_form_returns_once_mounted_and_fusermount3_ends_it() {
    testkit::proc::adopt_orphans();
    let u = uvfs_test();
    let a = user_branch();
    let (at, dev, run) = (user_dir(), tempfile::tempdir().unwrap(), user_dir());
    let sock = run.path().join("ctl");
    let opts = format!("minfreespace=1M,ctl-socket={}", sock.display());
    let err = run.path().join("stderr");
    let args = [
        a.path().as_os_str(),
        at.path().as_os_str(),
        "-o".as_ref(),
        opts.as_ref(),
    ];
    let mut starter = daemon(dev.path(), NO_ALLOW_OTHER, &args)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let st = testkit::proc::wait_exit(&mut starter, Duration::from_secs(20));
    let said = std::fs::read_to_string(&err).unwrap();
    assert_eq!(st, 0, "{said}");
    assert!(!said.contains("ERROR"), "{said}");
    let out = testkit::proc::daemon()
        .arg("ctl")
        .arg("--ctl-socket")
        .arg(&sock)
        .args(["get", "pid"])
        .output()
        .unwrap();
    let pid: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mounts")).unwrap();
    let at_s = at.path().to_string_lossy();
    assert!(
        mounts
            .lines()
            .any(|l| l.contains(&*at_s) && l.contains(&format!("user_id={}", u.uid))),
        "not mounted when the starter exited:\n{mounts}"
    );
    let ok = std::process::Command::new("nsenter")
        .args(["--target", &pid.to_string(), "--mount", "setpriv"])
        .args(["--reuid=uvfs-test", "--regid=uvfs-test", "--clear-groups"])
        .args(["fusermount3", "-u"])
        .arg(at.path())
        .status()
        .unwrap()
        .success();
    assert!(ok, "fusermount3 -u");
    assert_eq!(testkit::proc::wait_adopted(pid, Duration::from_secs(20)), 0);
}

#[test]
fn a_killed_daemon_leaves_a_dead_mount_that_fusermount3_removes() {
    let a = user_branch();
    let args = branch_args(&[a.path()], "minfreespace=1M");
    let mut m = UserMount::new(NO_ALLOW_OTHER, &strs(&args));
    // As the user in the namespace: waits, lists the mount point, unmounts it.
    let holder = "echo in; read _; ls \"$1\" 2>&1; fusermount3 -u \"$1\" && echo removed";
    let mut user = m
        .as_user("sh")
        .args(["-c", holder, "sh"])
        .arg(m.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(user.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line, "in\n");
    let ok = std::process::Command::new("kill")
        .args(["-KILL", &m.pid().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    assert_eq!(m.wait(Duration::from_secs(20)), -1);
    let mut stdin = user.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, b"\n").unwrap();
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert!(
        line.ends_with("Transport endpoint is not connected\n"),
        "{line}"
    );
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line, "removed\n");
    drop(stdin);
    assert!(user.wait().unwrap().success());
}
