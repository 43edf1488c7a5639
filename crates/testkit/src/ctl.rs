//! `union-virtiofsd ctl` run as a process against a daemon's control socket.

use std::path::Path;
use std::process::Command;

/// `union-virtiofsd ctl --socket SOCKET ARGS…`: exit code, stdout, stderr.
pub fn run(socket: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(crate::bin::daemon_path())
        .arg("ctl")
        .arg("--socket")
        .arg(socket)
        .args(args)
        .output()
        .expect("run union-virtiofsd ctl");
    let text = |b: Vec<u8>| String::from_utf8(b).expect("ctl prints UTF-8");
    (
        out.status.code().expect("ctl exited, not killed"),
        text(out.stdout),
        text(out.stderr),
    )
}

/// `ctl ARGS…` that must exit 2 with one line on stderr and nothing on stdout; that line.
pub fn fails(socket: &Path, args: &[&str]) -> String {
    let (code, out, err) = run(socket, args);
    assert_eq!(code, 2, "ctl {args:?}: {out}{err}");
    assert!(out.is_empty(), "ctl {args:?} printed {out}");
    assert_eq!(err.lines().count(), 1, "ctl {args:?}: {err}");
    assert!(err.starts_with("union-virtiofsd ctl: "), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    err.trim_end().to_string()
}
