//! The binary's command-line contract: --help documents every option and command, wrapped to
//! the terminal; --print-capabilities prints the vhost-user JSON; the man page and completions
//! come from the binary. (Bad input, one table: `bad_input.rs`.)

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
    // The commands, each with its own help.
    for cmd in ["ctl", "man", "completions"] {
        assert!(out.contains(&format!("\n  {cmd} ")), "--help lacks {cmd}");
        let (code, help, err) = run(&[cmd, "--help"]);
        assert_eq!(code, 0, "{cmd}: {err}");
        assert!(help.contains(&format!("union-virtiofsd {cmd}")), "{help}");
    }
    // Wrapped to the terminal; -h is a summary of the common options, without the lists.
    for columns in [60, 80, 100] {
        let out = Command::new(env!("CARGO_BIN_EXE_union-virtiofsd"))
            .arg("--help")
            .env("COLUMNS", columns.to_string())
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        for line in text.lines() {
            assert!(line.chars().count() <= columns, "{columns}: {line}");
        }
    }
    let (code, short, _) = run(&["-h"]);
    assert_eq!(code, 0);
    assert!(short.lines().count() * 3 < out.lines().count(), "{short}");
    assert!(short.contains("--socket-path") && short.contains("--branches"));
    assert!(!short.contains("Union options") && !short.contains("--migration-mode"));
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
/// scripts/install.sh and scripts/package-deb.sh write.
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
    let left: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
    assert!(left.is_empty(), "the daemon's files are gone: {left:?}");
}
