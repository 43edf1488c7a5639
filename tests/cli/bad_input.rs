//! Bad input, as one table: each row is a command line, against what is already there (a
//! regular file, a directory, a socket another daemon serves on). Every row must exit 2 with
//! nothing on stdout and exactly one line on stderr naming what is wrong, make or remove
//! nothing in the socket's directory nor in the running daemon's, and leave what was there as
//! it was: the file keeps its content, the daemon goes on answering.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One bad command line.
struct Row {
    args: Vec<String>,
    /// A substring of the one error line.
    needle: String,
    /// Run as an unprivileged user (the read-only directory refuses only such a user).
    as_user: bool,
}

fn row(args: &[&str], needle: impl Into<String>) -> Row {
    Row {
        args: args.iter().map(|a| a.to_string()).collect(),
        needle: needle.into(),
        as_user: false,
    }
}

/// The names in `dir` with their inode numbers: what a failed start must leave as it was.
fn listing(dir: &Path) -> Vec<(String, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let ino = e.metadata().unwrap().ino();
            (e.file_name().into_string().unwrap(), ino)
        })
        .collect();
    v.sort();
    v
}

/// Runs `row` (bounded: a row the daemon accepted would serve forever): exit code, stdout,
/// stderr.
fn run(row: &Row) -> (i32, String, String) {
    let bin = env!("CARGO_BIN_EXE_union-virtiofsd");
    // setpriv, as the other tests run a daemon unprivileged (it reaches a binary under a
    // 0700 home, as cargo's target directory may be, where a plain setuid before exec does
    // not).
    let mut cmd = if row.as_user && rustix::process::geteuid().is_root() {
        let mut c = Command::new("setpriv");
        let user = testkit::users::NAME;
        c.args(["--reuid", user, "--regid", user, "--clear-groups", bin]);
        c
    } else {
        Command::new(bin)
    };
    let mut child = cmd
        .args(&row.args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{:?} was accepted: the daemon serves", row.args);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = child.wait_with_output().unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (
        out.status.code().expect("exited, not killed"),
        text(out.stdout),
        text(out.stderr),
    )
}

#[test]
fn bad_input_exits_2_with_one_line_and_leaves_everything_as_it_was() {
    let running = testkit::daemon::Daemon::start(&["a"], &[]);
    let run_dir = running.socket().parent().unwrap().to_path_buf();
    let ctl = union_virtiofsd::vhost::ctl_path(&running.socket());
    testkit::proc::wait_socket(&ctl);
    let served = running.socket().display().to_string();

    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let p = |name: &str| d.path().join(name);
    let s = |path: PathBuf| path.display().to_string();
    std::fs::create_dir(p("branch")).unwrap();
    std::os::unix::fs::symlink("branch", p("alias")).unwrap();
    std::fs::write(p("file"), "keep me").unwrap();
    std::fs::create_dir(p("dir")).unwrap();
    std::os::unix::fs::symlink("file", p("link")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        p("fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    std::fs::write(p("c.ctl"), "").unwrap();
    std::fs::create_dir(p("q.pid")).unwrap();
    std::os::unix::fs::symlink("file", p("y.pid")).unwrap();
    let _foreign = std::os::unix::net::UnixListener::bind(p("served")).unwrap();
    std::fs::create_dir(p("ro")).unwrap();
    std::fs::set_permissions(p("ro"), std::fs::Permissions::from_mode(0o555)).unwrap();
    std::fs::write(p("bad.conf"), "category.create=mfs\nfrob=1\n").unwrap();

    let sock = s(p("s"));
    let branch = s(p("branch"));
    let alias = s(p("alias"));
    let conf = s(p("bad.conf"));
    // A good command line with `extra` after it.
    let serve = |extra: &[&str]| -> Vec<String> {
        let mut v = vec!["--socket-path", &sock, "--branch", &branch];
        v.extend_from_slice(extra);
        v.iter().map(|a| a.to_string()).collect()
    };
    let bad = |extra: &[&str], needle: &str| Row {
        args: serve(extra),
        needle: needle.to_owned(),
        as_user: false,
    };
    // A --socket-path the daemon will not use: one line naming it and what is wrong.
    let socket_at = |path: &Path, what: String| Row {
        args: ["--socket-path", &s(path.to_owned()), "--branch", &branch]
            .map(str::to_owned)
            .to_vec(),
        needle: format!("--socket-path {}: {what}", path.display()),
        as_user: path.starts_with(p("ro")),
    };
    let long = p(&"x".repeat(120));
    let long_len = long.as_os_str().len();

    let rows = vec![
        // The command line's shape (clap).
        bad(&["--bogus-flag"], "unexpected argument '--bogus-flag'"),
        // Not a command, and no path: not the fstab form's BRANCHES either.
        row(
            &["frob"],
            "invalid value 'frob' for '[BRANCHES]': neither a command nor a branch list",
        ),
        bad(
            &["--max-pages", "abc"],
            "invalid value 'abc' for '--max-pages",
        ),
        bad(&["--branch", &format!("{branch}=XX")], "XX"),
        bad(&["--release-guest-memory=-1"], "--release-guest-memory"),
        bad(
            &["--release-guest-memory", "0.001"],
            "--release-guest-memory",
        ),
        bad(&["--modcaps=+nosuch"], "+nosuch"),
        // Missing pieces.
        row(&["--socket-path", &sock], "no branch given"),
        row(
            &["--branch", &branch],
            "one of --socket-path or --fd is required",
        ),
        // Values out of range, union options, config files.
        bad(&["--max-pages", "0"], "--max-pages 0 is out of range"),
        bad(&["--max-write", "5000"], "--max-write 5000"),
        bad(&["-o", "frob=1"], "unknown option 'frob'"),
        bad(&["-o", "category.create=zz"], "category.create"),
        bad(&["-o", "sandbox=jail"], "sandbox"),
        bad(&["--minfreespace", "lots"], "minfreespace"),
        bad(
            &["--config", "/no/such/file"],
            "cannot read --config /no/such/file",
        ),
        bad(
            &["--config", &conf],
            format!("{conf}:2: unknown option 'frob'").as_str(),
        ),
        bad(
            &["--sandbox=none", "--rlimit-nofile=99999999999"],
            "fs.nr_open",
        ),
        // Branches.
        bad(&["--branch", "/no/such/dir"], "/no/such/dir"),
        bad(&["--branch", "/no/such/dir*"], "matches no directory"),
        bad(
            &["--branch", &alias],
            format!("branch {alias} is {branch} again").as_str(),
        ),
        row(
            &[
                "--socket-path",
                &sock,
                "--branches",
                &format!("{branch}=RW:{branch}/=RO"),
            ],
            format!("branch {branch}/ is {branch} again").as_str(),
        ),
        row(
            &[
                "--socket-path",
                &sock,
                "--shared-dir",
                &branch,
                "--branch",
                &alias,
            ],
            "again",
        ),
        // Switches that contradict each other.
        bad(
            &["--xattr", "--no-xattr"],
            "'--xattr' cannot be used with '--no-xattr'",
        ),
        bad(
            &["--no-xattr", "--posix-acl"],
            "--no-xattr contradicts --posix-acl",
        ),
        bad(
            &["--security-label", "--no-xattr"],
            "--no-xattr contradicts --security-label",
        ),
        bad(
            &["--no-xattr", "--xattrmap=:map::u.:"],
            "--no-xattr contradicts --xattrmap",
        ),
        bad(
            &["--readonly", "-o", "cow=true"],
            "--readonly contradicts cow=true",
        ),
        bad(&["-o", "ro,cow=true"], "-o ro contradicts cow=true"),
        bad(
            &["--socket", &sock],
            "cannot be used with '--socket <PATH>'",
        ),
        bad(&["--fd", "3"], "cannot be used with '--fd <N>'"),
        bad(
            &["--posix-acl", "--translate-uid=guest:0:1000:1"],
            "--translate-uid",
        ),
        bad(
            &[
                "--migration-mode=file-handles",
                "--migration-verify-handles",
            ],
            "--migration-verify-handles cannot be used with --migration-mode=file-handles",
        ),
        // --fd.
        row(
            &["--fd", "abc", "--branch", &branch],
            "invalid value 'abc' for '--fd <N>'",
        ),
        row(
            &["--fd", "987654", "--branch", &branch],
            "--fd 987654: not a listening unix socket",
        ),
        // Standard input (/dev/null here): open, but no socket.
        row(
            &["--fd", "0", "--branch", &branch],
            "--fd 0: not a listening unix socket",
        ),
        row(
            &["--fd", "3", "--upgrade", "/x.pid", "--branch", &branch],
            "--fd",
        ),
        // --ctl-socket.
        bad(
            &["--ctl-socket", &s(p("no/such/c"))],
            format!(
                "--ctl-socket {}: directory {} does not exist",
                s(p("no/such/c")),
                s(p("no/such"))
            )
            .as_str(),
        ),
        bad(
            &["--ctl-socket", &s(p("file"))],
            "a regular file is there, not a socket: not removing it",
        ),
        bad(
            &["--ctl-socket", &s(p("served"))],
            "a process accepts connections on it: not replacing it",
        ),
        bad(
            &["--ctl-socket", &ctl.display().to_string()],
            "a process accepts connections on it",
        ),
        bad(
            &["--ctl-socket", &sock],
            "the daemon's own vhost-user socket is there",
        ),
        bad(
            &["--ctl-socket", &s(p("s.pid"))],
            "the daemon's own pid file is there",
        ),
        bad(
            &["--ctl-socket", &s(long.clone())],
            "bytes long, over the limit of 107 for a unix socket path",
        ),
        // --socket-path.
        socket_at(
            &p("file"),
            "a regular file is there, not a socket: not removing it".into(),
        ),
        socket_at(
            &p("dir"),
            "a directory is there, not a socket: not removing it".into(),
        ),
        socket_at(
            &p("link"),
            "a symlink is there, not a socket: not removing it".into(),
        ),
        socket_at(
            &p("fifo"),
            "a FIFO is there, not a socket: not removing it".into(),
        ),
        socket_at(
            &p("c"),
            format!("{} is a regular file, not a socket", s(p("c.ctl"))),
        ),
        socket_at(
            &p("q"),
            format!("{} is a directory, not a pid file", s(p("q.pid"))),
        ),
        socket_at(
            &p("y"),
            format!("{} is a symlink, not a pid file", s(p("y.pid"))),
        ),
        socket_at(
            &p("served"),
            "a process accepts connections on it: not replacing it".into(),
        ),
        socket_at(
            &p("no/such/s"),
            format!("directory {} does not exist", s(p("no/such"))),
        ),
        socket_at(&p("file/s"), format!("{} is not a directory", s(p("file")))),
        socket_at(
            &long,
            format!("{long_len} bytes long, over the limit of 99"),
        ),
        socket_at(
            &p("ro/s"),
            format!("cannot create files in directory {}", s(p("ro"))),
        ),
        socket_at(&running.socket(), "another daemon (pid".into()),
        // The tools.
        row(&["ctl"], "union-virtiofsd ctl: arguments missing"),
        row(
            &["ctl", "--socket", &served, "frob"],
            "unrecognized subcommand 'frob'",
        ),
        row(&["ctl", "--socket", &served, "set", "k"], "<VALUE>"),
        row(
            &["ctl", "--socket", &served, "query", "/x", "nonsense"],
            "invalid value 'nonsense'",
        ),
        row(
            &["ctl", "--socket", &served, "get", "nosuchkey"],
            "nosuchkey",
        ),
        row(&["ctl", "--socket", &sock, "get", "x"], "cannot connect to"),
        row(&["ctl", "get", "x"], "--socket <PATH>"),
        row(&["completions", "nosh"], "invalid value 'nosh'"),
        row(&["completions"], "<SHELL>"),
        row(&["man", "extra"], "unexpected argument 'extra'"),
    ];
    for r in &rows {
        let before = (listing(d.path()), listing(&run_dir));
        let (code, out, err) = run(r);
        let args = &r.args;
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?} printed {out}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(err.contains(&r.needle), "{args:?}: {err}");
        assert_eq!(
            (listing(d.path()), listing(&run_dir)),
            before,
            "{args:?}: {err}"
        );
    }
    assert_eq!(std::fs::read_to_string(p("file")).unwrap(), "keep me");
    let mut running = running;
    running.assert_alive();
    let mut dev = running.session();
    dev.lookup(vufs_frontend::ops::ROOT_ID, b"nothing-here")
        .expect_err("the running daemon still answers");
}
