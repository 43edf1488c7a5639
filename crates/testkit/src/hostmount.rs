//! The daemon as a host mount (`union-virtiofsd mount`): started on a fresh empty directory
//! over given branches, waited for (bounded) until the kernel lists the mount, and unmounted
//! on drop if a test has not ended it. Needs root and /dev/fuse. Mounts only on its own
//! directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The mount's type in /proc/mounts.
pub const FSTYPE: &str = "fuse.union-virtiofsd";

/// A running `union-virtiofsd mount`.
pub struct HostMount {
    dir: tempfile::TempDir,
    child: Option<Child>,
    log: PathBuf,
    _logdir: tempfile::TempDir,
}

/// Whether `path` is a mount point of type [`FSTYPE`] now.
pub fn is_mounted(path: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let want = path.to_string_lossy();
    mounts.lines().any(|l| {
        let mut f = l.split(' ');
        let (_, at, ty) = (f.next(), f.next(), f.next());
        at == Some(want.as_ref()) && ty == Some(FSTYPE)
    })
}

impl HostMount {
    /// Mounts the union of `branches` (RW unless a `=MODE` suffix says otherwise) with the
    /// extra arguments `args`, and waits until it is mounted.
    pub fn new(branches: &[&Path], args: &[&str]) -> HostMount {
        let dir = tempfile::tempdir().unwrap();
        let logdir = tempfile::tempdir().unwrap();
        let log = logdir.path().join("daemon.log");
        let mut cmd = crate::proc::daemon();
        cmd.arg("mount").arg(dir.path());
        for b in branches {
            cmd.arg("--branch").arg(b);
        }
        cmd.args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let mut child = cmd.spawn().expect("spawn the daemon");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !is_mounted(dir.path()) {
            if let Some(st) = child.try_wait().unwrap() {
                panic!(
                    "the daemon exited ({st}) before mounting:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "not mounted after 20 s");
            std::thread::sleep(Duration::from_millis(10));
        }
        HostMount {
            dir,
            child: Some(child),
            log,
            _logdir: logdir,
        }
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The daemon's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// What the daemon logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (bounded) for the daemon to exit; its exit code (-1 if a signal ended it).
    pub fn wait(&mut self, limit: Duration) -> i32 {
        let mut child = self.child.take().expect("running");
        crate::proc::wait_exit(&mut child, limit)
    }

    /// Unmounts it with umount(8) (`-l` when `lazy`) and waits for the daemon's exit code.
    pub fn unmount(&mut self, lazy: bool) -> i32 {
        let mut cmd = Command::new("umount");
        if lazy {
            cmd.arg("-l");
        }
        let ok = cmd.arg(self.dir.path()).status().unwrap().success();
        assert!(ok, "umount {}", self.dir.path().display());
        self.wait(Duration::from_secs(20))
    }
}

impl Drop for HostMount {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
