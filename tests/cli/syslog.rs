//! `--syslog` (kata's Go runtime and virtme-ng pass it): log lines go to the local syslog
//! socket as RFC 3164 datagrams, also from inside the default namespace sandbox under the
//! seccomp filter, and no longer to stderr. The daemon runs in a private mount namespace whose
//! `/dev/log` is a socket this test reads (the host's /dev is left alone).

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::Duration;

use testkit::signal;

#[test]
fn syslog_receives_the_log_lines_from_the_sandboxed_daemon() {
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("log");
    let share = work.path().join("share");
    std::fs::create_dir(&share).unwrap();
    let server = UnixDatagram::bind(&log).unwrap();
    // A deadline for a daemon that never logs, not a synchronisation delay.
    server
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let script = format!(
        "mount -t tmpfs tmpfs /dev && touch /dev/log && mount --bind {} /dev/log && exec \"$@\"",
        log.display()
    );
    let mut child = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
            "sh",
        ])
        .arg(env!("CARGO_BIN_EXE_union-virtiofsd"))
        .arg("--syslog")
        .arg("--socket-path")
        .arg(work.path().join("s"))
        .arg("--shared-dir")
        .arg(&share)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = Vec::new();
    let mut buf = [0u8; 4096];
    while !lines
        .iter()
        .any(|l: &String| l.contains("Waiting for vhost-user socket connection..."))
    {
        match server.recv(&mut buf) {
            Ok(n) => lines.push(String::from_utf8_lossy(&buf[..n]).into_owned()),
            Err(e) => {
                let _ = child.kill();
                panic!("no 'Waiting for…' line on the syslog socket ({e}); got {lines:?}");
            }
        }
    }
    // `unshare` and `sh` exec the daemon: the pid is the child's.
    let prefix = format!("<14>union-virtiofsd[{}]: ", child.id());
    assert!(
        lines
            .iter()
            .any(|l| *l == format!("{prefix}Waiting for vhost-user socket connection...")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("sandbox: new mount")),
        "logged from inside the sandbox: {lines:?}"
    );
    signal::sigterm(&child);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("Waiting for"),
        "info lines go to syslog only: {stderr}"
    );
}
