//! A guest the test watches and acts on while it runs (a test that only waits for the end
//! uses [`crate::guest::run_scenario`]): its backend started first, the guest booted when the
//! test says, bounded waits for what the guest makes in the share, and the check of how it
//! ended. Starts nothing else; the caller holds [`crate::guest::serialize_guests`] while its
//! guest runs.

use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::guest::{self, Backend, Guest, Reaper};

/// A backend, and once booted a guest, with their files in a temporary directory of their own.
pub struct Live {
    /// Their files: `scenario.sh`, the socket, `daemon.log`, `console.log`, QEMU's own.
    pub dir: TempDir,
    /// The backend's vhost-user socket (`vfs.sock`).
    pub socket: PathBuf,
    /// The backend's output.
    pub daemon_log: PathBuf,
    /// The guest's console.
    pub console: PathBuf,
    /// The backend (index 0), then QEMU once [`Live::boot`] started it (index 1); stopped on
    /// drop, QEMU first.
    pub reaper: Reaper,
}

impl Live {
    /// Starts `backend` and returns once it listens.
    pub fn start(backend: &Backend) -> Live {
        let dir = tempfile::tempdir().expect("temp dir");
        let socket = dir.path().join("vfs.sock");
        let daemon_log = dir.path().join("daemon.log");
        let console = dir.path().join("console.log");
        let reaper = Reaper(vec![guest::spawn_backend(backend, &socket, &daemon_log)]);
        Live {
            dir,
            socket,
            daemon_log,
            console,
            reaper,
        }
    }

    /// Boots `guest` against the backend with `scenario` (after [`guest::PRELUDE`]).
    pub fn boot(&mut self, guest: &Guest, scenario: &str) {
        let script = self.dir.path().join("scenario.sh");
        guest::write_scenario(&script, scenario);
        let qemu = guest::spawn_guest(guest, &self.socket, &script, self.dir.path(), &self.console);
        self.reaper.0.push(qemu);
    }
}

/// Waits until `path` exists (the guest makes it in the share); panics with `what` and
/// `transcript` if the guest's QEMU `qemu` ends or `deadline` passes first.
pub fn wait_for_file(
    qemu: &mut Child,
    path: &Path,
    deadline: Instant,
    what: &str,
    transcript: impl Fn() -> String,
) {
    while !path.exists() {
        assert!(
            Instant::now() < deadline && qemu.try_wait().unwrap().is_none(),
            "{what}\n{}",
            transcript()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The console of a guest whose QEMU ended with `status` (`None`: still running at the
/// deadline), once its scenario is known to have exited 0; panics with `what`, `status` and
/// `transcript` otherwise.
pub fn assert_passed(
    console: &Path,
    status: Option<ExitStatus>,
    what: &str,
    transcript: impl Fn() -> String,
) -> String {
    let text = guest::read_lossy(console);
    assert_eq!(
        guest::scenario_exit(&text),
        Some(0),
        "{what} ({status:?})\n{}",
        transcript()
    );
    text
}
