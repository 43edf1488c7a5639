//! The binary's command-line contract: bad input is one clear error line and exit code 2, never
//! a panic; --help documents every option; --print-capabilities prints the vhost-user JSON.

use std::process::Command;

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_union-virtiofsd"))
        .args(args)
        .output()
        .expect("run the daemon binary");
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (
        out.status.code().expect("exited, not killed"),
        text(out.stdout),
        text(out.stderr),
    )
}

#[test]
fn bad_command_lines_exit_2_with_one_error_line() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().to_str().unwrap();
    let sock = d.path().join("s");
    let sock = sock.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["--socket-path", sock], "no branch given"),
        (&["--branch", dir], "--socket-path or --fd"),
        (
            &["--socket-path", sock, "--branch", "/no/such/dir"],
            "/no/such/dir",
        ),
        (
            &["--socket-path", sock, "--branch", dir, "-o", "frob=1"],
            "unknown option 'frob'",
        ),
        (
            &[
                "--socket-path",
                sock,
                "--branch",
                dir,
                "-o",
                "category.create=zz",
            ],
            "category.create",
        ),
        (
            &[
                "--socket-path",
                sock,
                "--branch",
                dir,
                "--minfreespace",
                "lots",
            ],
            "minfreespace",
        ),
        (
            &["--socket-path", sock, "--branch", &format!("{dir}=XX")],
            "XX",
        ),
        (
            &["--socket-path", sock, "--branch", dir, "--max-pages", "0"],
            "--max-pages",
        ),
        (
            &[
                "--socket-path",
                sock,
                "--branch",
                dir,
                "--max-write",
                "5000",
            ],
            "--max-write",
        ),
        (
            &["--socket-path", sock, "--branch", dir, "--fd", "3"],
            "--fd",
        ),
        (
            &[
                "--socket-path",
                sock,
                "--branch",
                dir,
                "--release-guest-memory",
                "0.001",
            ],
            "--release-guest-memory",
        ),
        (
            &[
                "--socket-path",
                sock,
                "--branch",
                dir,
                "--release-guest-memory=-1",
            ],
            "--release-guest-memory",
        ),
        (
            &[
                "--socket-path",
                sock,
                "--branch",
                dir,
                "--config",
                "/no/such/file",
            ],
            "--config",
        ),
        (
            &["--socket-path", sock, "--branch", dir, "--bogus-flag"],
            "--bogus-flag",
        ),
        // virtiofsd's own rules and value syntax.
        (
            &[
                "--socket-path",
                sock,
                "--shared-dir",
                dir,
                "--modcaps=+nosuch",
            ],
            "+nosuch",
        ),
        (
            &[
                "--socket-path",
                sock,
                "--shared-dir",
                dir,
                "--posix-acl",
                "--translate-uid=guest:0:1000:1",
            ],
            "--translate-uid",
        ),
        (
            &[
                "--socket-path",
                sock,
                "--shared-dir",
                dir,
                "--migration-mode=file-handles",
                "--migration-verify-handles",
            ],
            "--migration-verify-handles",
        ),
        (
            &[
                "--socket-path",
                sock,
                "--shared-dir",
                dir,
                "-o",
                "sandbox=jail",
            ],
            "sandbox",
        ),
        (
            &[
                "--socket-path",
                sock,
                "--shared-dir",
                dir,
                "--sandbox=none",
                "--rlimit-nofile=99999999999",
            ],
            "fs.nr_open",
        ),
    ];
    for (args, needle) in cases {
        let (code, _, err) = run(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        // One error line; clap's own parse errors may add its standard usage and help hints.
        let lines: Vec<_> = err
            .lines()
            .filter(|l| !l.trim().is_empty())
            .filter(|l| !l.starts_with("For more information") && !l.starts_with("Usage:"))
            .collect();
        assert_eq!(lines.len(), 1, "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn help_lists_every_option_and_capabilities_are_json() {
    let (code, out, _) = run(&["--help"]);
    assert_eq!(code, 0);
    for opt in [
        "--socket-path",
        "--fd",
        "--branch",
        "--branches",
        "--shared-dir",
        "--thread-pool-size",
        "--max-pages",
        "--max-write",
        "--num-request-queues",
        "--print-capabilities",
        "--log-level",
        "--cache-timeout",
        "--option",
        "--config",
        "--category-create",
        "--category-search",
        "--category-action",
        "--minfreespace",
        "--xattr",
        "--no-xattr",
        "--readonly",
        "--sandbox",
        "--seccomp",
        "--tag",
        "--cache",
        "--socket-group",
        "--rlimit-nofile",
        "--uid-map",
        "--translate-uid",
        "--inode-file-handles",
        "--announce-submounts",
        "--killpriv-v2",
        "--posix-acl[=<MODE>]",
        "--security-label[=<MODE>]",
        "--modcaps",
        "--syslog",
        "--allow-mmap",
        "--migration-mode",
        "--migration-on-error",
        "--preserve-noatime",
        "--xattrmap",
        "source=DIR",
        "no_posix_lock",
    ] {
        assert!(out.contains(opt), "--help lacks {opt}");
    }
    for name in union_virtiofsd::config::registry::OPTIONS
        .iter()
        .map(|o| o.name)
    {
        assert!(out.contains(name), "--help lacks union option {name}");
    }
    let (code, out, _) = run(&["--print-capabilities"]);
    assert_eq!(code, 0);
    let compact: String = out.split_whitespace().collect();
    // migrate-precopy: the device state moves with the VM (libvirt then allows migrating and
    // saving the domain); separate-options: libvirt may pass --shared-dir and friends.
    assert_eq!(
        compact,
        r#"{"type":"fs","features":["migrate-precopy","separate-options"]}"#
    );
}

/// scripts/install.sh puts the daemon, the vhost-user descriptor (pointing at it), the man
/// page and the completions where QEMU, libvirt, Lima and shells look for them.
#[test]
fn install_script_places_every_file() {
    let root = union_virtiofsd_repo();
    let dest = tempfile::tempdir().unwrap();
    let status = Command::new("bash")
        .arg(root.join("scripts/install.sh"))
        .args(["--prefix", "/usr", "--destdir"])
        .arg(dest.path())
        .args([
            "--binary",
            env!("CARGO_BIN_EXE_union-virtiofsd"),
            "--as-virtiofsd",
        ])
        .status()
        .unwrap();
    assert!(status.success());
    let usr = dest.path().join("usr");
    let man = std::fs::read_to_string(usr.join("share/man/man1/union-virtiofsd.1")).unwrap();
    assert_eq!(
        man,
        run(&["man"]).1,
        "the installed man page is the binary's"
    );
    for f in [
        "libexec/union-virtiofsd",
        "share/man/man1/union-virtiofsd.1",
        "share/bash-completion/completions/union-virtiofsd",
        "share/zsh/vendor-completions/_union-virtiofsd",
        "share/fish/vendor_completions.d/union-virtiofsd.fish",
    ] {
        assert!(usr.join(f).is_file(), "{f} missing");
    }
    let desc =
        std::fs::read_to_string(usr.join("share/qemu/vhost-user/50-union-virtiofsd.json")).unwrap();
    assert!(
        desc.contains(r#""binary": "/usr/libexec/union-virtiofsd""#),
        "{desc}"
    );
    assert_eq!(
        std::fs::read_link(usr.join("libexec/virtiofsd")).unwrap(),
        std::path::Path::new("/usr/libexec/union-virtiofsd")
    );
    assert_eq!(
        std::fs::read_link(usr.join("bin/union-virtiofsd")).unwrap(),
        std::path::Path::new("/usr/libexec/union-virtiofsd")
    );
}

/// The binary prints its own man page and completions (what packages install): the same text
/// scripts/install.sh and scripts/package-deb.sh write; a bad subcommand line is one error
/// line and exit 2.
#[test]
fn man_and_completions_come_from_the_binary() {
    let (code, man, err) = run(&["man"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        man.contains(".TH union-virtiofsd 1"),
        "{}",
        &man[..200.min(man.len())]
    );
    for opt in ["socket\\-path", "branch", "print\\-capabilities"] {
        assert!(man.contains(opt), "man page lacks {opt}");
    }
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef union-virtiofsd"),
        ("fish", "complete -c union-virtiofsd"),
    ] {
        let (code, text, err) = run(&["completions", shell]);
        assert_eq!(code, 0, "{shell}: {err}");
        assert!(
            text.contains(marker) && text.contains("socket-path"),
            "{shell}: {text}"
        );
    }
    for (args, want) in [
        (&["completions", "nosh"][..], "invalid value 'nosh'"),
        (&["completions"][..], "<SHELL>"),
        (&["man", "extra"][..], "unexpected argument 'extra'"),
    ] {
        let (code, out, err) = run(args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

fn union_virtiofsd_repo() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    // A reader that has gone before anything is written (`| head -c 0`): the write fails with
    // EPIPE, which is no reason for a panic or a backtrace.
    for args in [
        &["--print-capabilities"][..],
        &["--help"][..],
        &["--version"][..],
        &["man"][..],
        &["completions", "bash"][..],
    ] {
        let (r, w) = std::io::pipe().unwrap();
        drop(r);
        let out = Command::new(env!("CARGO_BIN_EXE_union-virtiofsd"))
            .args(args)
            .stdout(w)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// The names in `dir` with their inode numbers: what a failed start must leave as it was.
fn listing(dir: &std::path::Path) -> Vec<(String, u64)> {
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

/// A `--socket-path` the daemon will not use: exit 2, one line naming the path and what is
/// wrong, and the directory as it was (nothing made, nothing removed or replaced). A daemon
/// serving on the path goes on serving.
#[test]
fn bad_socket_paths_exit_2_and_leave_the_directory_as_it_was() {
    use std::os::unix::fs::PermissionsExt;
    let running = testkit::daemon::Daemon::start(&["a"], &[]);
    let run_dir = running.socket().parent().unwrap().to_path_buf();
    let ctl = union_virtiofsd::vhost::ctl_path(&running.socket());
    testkit::proc::wait_socket(&ctl);
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let branch = d.path().join("branch");
    std::fs::create_dir(&branch).unwrap();
    let p = |name: &str| d.path().join(name);
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
    let long = p(&"x".repeat(120));
    let long_len = long.as_os_str().len().to_string();
    let dir_of = |s: &str| p(s).display().to_string();
    let cases: Vec<(std::path::PathBuf, String)> = vec![
        (
            p("file"),
            "a regular file is there, not a socket: not removing it".into(),
        ),
        (
            p("dir"),
            "a directory is there, not a socket: not removing it".into(),
        ),
        (
            p("link"),
            "a symlink is there, not a socket: not removing it".into(),
        ),
        (
            p("fifo"),
            "a FIFO is there, not a socket: not removing it".into(),
        ),
        (
            p("c"),
            format!("{} is a regular file, not a socket", dir_of("c.ctl")),
        ),
        (
            p("q"),
            format!("{} is a directory, not a pid file", dir_of("q.pid")),
        ),
        (
            p("y"),
            format!("{} is a symlink, not a pid file", dir_of("y.pid")),
        ),
        (
            p("served"),
            "a process accepts connections on it: not replacing it".into(),
        ),
        (
            p("no/such/s"),
            format!("directory {} does not exist", dir_of("no/such")),
        ),
        (
            p("file/s"),
            format!("{} is not a directory", dir_of("file")),
        ),
        (long, format!("{long_len} bytes long, over the limit of 99")),
        (
            p("ro/s"),
            format!("cannot create files in directory {}", dir_of("ro")),
        ),
        (running.socket(), "another daemon (pid".into()),
    ];
    let as_root = rustix::process::geteuid().is_root();
    for (sock, needle) in &cases {
        let before = (listing(d.path()), listing(&run_dir));
        // Root may write anywhere: the read-only directory refuses an ordinary user. setpriv,
        // as the other tests run a daemon unprivileged (it reaches a binary under a 0700
        // home, as cargo's target directory may be, where a plain setuid before exec does not).
        let mut cmd = if as_root && sock.starts_with(p("ro")) {
            let mut c = Command::new("setpriv");
            c.args([
                "--reuid",
                testkit::users::NAME,
                "--regid",
                testkit::users::NAME,
                "--clear-groups",
            ])
            .arg(env!("CARGO_BIN_EXE_union-virtiofsd"));
            c
        } else {
            Command::new(env!("CARGO_BIN_EXE_union-virtiofsd"))
        };
        cmd.arg("--socket-path")
            .arg(sock)
            .arg("--branch")
            .arg(&branch);
        let out = cmd.output().unwrap();
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(2), "{sock:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{sock:?}: {err}");
        assert!(
            err.contains(&format!("--socket-path {}: ", sock.display())),
            "{sock:?}: {err}"
        );
        assert!(err.contains(needle.as_str()), "{sock:?}: {err}");
        assert_eq!(
            (listing(d.path()), listing(&run_dir)),
            before,
            "{sock:?}: {err}"
        );
    }
    assert_eq!(std::fs::read_to_string(p("file")).unwrap(), "keep me");
    let mut running = running;
    running.assert_alive();
    let mut dev = running.session();
    dev.lookup(vufs_frontend::ops::ROOT_ID, b"nothing-here")
        .expect_err("the running daemon still answers");
}

/// A socket no one serves (its daemon is gone, its pid file unlocked) is replaced.
#[test]
fn a_stale_socket_is_replaced() {
    let d = tempfile::tempdir().unwrap();
    let sock = d.path().join("s");
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    std::fs::write(d.path().join("s.pid"), "1\n").unwrap();
    let mut child = testkit::proc::daemon_on(&sock)
        .arg("--branch")
        .arg(d.path())
        .spawn()
        .unwrap();
    testkit::proc::wait_socket(&union_virtiofsd::vhost::ctl_path(&sock));
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let code = testkit::proc::wait_exit(&mut child, std::time::Duration::from_secs(10));
    assert_eq!(code, 0);
    assert_eq!(listing(d.path()), vec![], "the daemon's files are gone");
}
