//! Starting the daemon binary as a launcher does and watching its processes: bounded polls
//! for the socket, the exit and the sandboxed child (no fixed sleeps).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The daemon binary cargo built for this test run.
pub fn daemon() -> Command {
    Command::new(crate::bin::daemon_path())
}

/// The daemon binary with `--socket-path sock` and its output discarded: the caller adds the
/// rest of the command line, then [`start`]s it (or spawns a daemon that will not serve).
pub fn daemon_on(sock: &Path) -> Command {
    let mut cmd = daemon();
    cmd.arg("--socket-path")
        .arg(sock)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// Spawns the daemon command `cmd` and waits (bounded) until it has created `sock`.
pub fn start(cmd: &mut Command, sock: &Path) -> Child {
    let child = cmd.spawn().expect("spawn the daemon");
    wait_socket(sock);
    child
}

/// Waits (bounded) for the child to exit; its exit code (-1 if a signal ended it).
pub fn wait_exit(child: &mut Child, limit: Duration) -> i32 {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code().unwrap_or(-1);
        }
        assert!(Instant::now() < deadline, "daemon did not exit");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Makes this process the reaper of its orphaned descendants (PR_SET_CHILD_SUBREAPER), so
/// that a daemon which went to the background (its starter exited) can be waited for with
/// [`wait_adopted`]. For the rest of the process's life; other tests' children are unaffected.
pub fn adopt_orphans() {
    let me = rustix::process::getpid();
    rustix::process::set_child_subreaper(Some(me)).expect("PR_SET_CHILD_SUBREAPER");
}

/// Waits (bounded) for `pid`, a child or an adopted orphan ([`adopt_orphans`]), to exit; its
/// exit code (-1 if a signal ended it).
pub fn wait_adopted(pid: u32, limit: Duration) -> i32 {
    use rustix::process::{waitpid, Pid, WaitOptions};
    let pid = Pid::from_raw(pid as i32).expect("a pid");
    let deadline = Instant::now() + limit;
    loop {
        if let Some((_, st)) = waitpid(Some(pid), WaitOptions::NOHANG).expect("waitpid") {
            return st.exit_status().unwrap_or(-1);
        }
        assert!(Instant::now() < deadline, "process {pid:?} did not exit");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits (bounded) for the daemon to create `sock`. Never connects: a connection would be
/// taken as the frontend, and its disconnect would end the daemon by itself.
pub fn wait_socket(sock: &Path) {
    use std::os::unix::fs::FileTypeExt;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::metadata(sock).is_ok_and(|m| m.file_type().is_socket()) {
        assert!(Instant::now() < deadline, "no socket at {}", sock.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The sandboxed child of daemon `parent` (its only child), once its new root is complete: it
/// holds `branches`, and the old root (`old`, between pivot_root and its removal) is gone.
pub fn sandboxed_child(parent: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let children = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
            .unwrap_or_default();
        if let Some(pid) = children.split_whitespace().next() {
            let pid: u32 = pid.parse().unwrap();
            let names: Vec<_> = std::fs::read_dir(format!("/proc/{pid}/root"))
                .map(|r| r.map(|e| e.unwrap().file_name()).collect())
                .unwrap_or_default();
            if names.iter().any(|n| n == "branches") && !names.iter().any(|n| n == "old") {
                return pid;
            }
        }
        assert!(Instant::now() < deadline, "no sandboxed child");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A size field of /proc/PID/status (`RssAnon`, `RssShmem`, …) in KiB.
pub fn status_kib(pid: u32, name: &str) -> u64 {
    let v = status_field(pid, name);
    v.trim()
        .trim_end_matches(" kB")
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{name} in /proc/{pid}/status is not a size: {v}"))
}

/// The value of field `name` (e.g. `CapEff`) in /proc/PID/status.
pub fn status_field(pid: u32, name: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:\t")))
        .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
        .to_owned()
}
