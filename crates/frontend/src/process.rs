//! Backend process handling for tests and the benchmark: spawn, wait for the socket by bounded
//! polling, watch /proc (fd count, CPU seconds, peak RSS), kill on drop. Never sleeps blindly.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Poll interval while waiting for sockets or exits.
const POLL: Duration = Duration::from_millis(10);

/// A spawned backend; killed (SIGKILL) on drop unless it already exited.
pub struct BackendProcess {
    child: Child,
    socket: PathBuf,
}

impl BackendProcess {
    /// Spawn `cmd` and wait up to `timeout` for `socket` to appear.
    pub fn spawn(mut cmd: Command, socket: &Path, timeout: Duration) -> Result<Self> {
        let child = cmd
            .spawn()
            .map_err(|e| Error::Process(format!("spawn {cmd:?}: {e}")))?;
        let mut p = BackendProcess {
            child,
            socket: socket.to_path_buf(),
        };
        let deadline = Instant::now() + timeout;
        while !socket.exists() {
            if let Some(st) = p.try_wait()? {
                return Err(Error::Process(format!("exited before listening: {st}")));
            }
            if Instant::now() > deadline {
                return Err(Error::Process(format!(
                    "{} did not appear",
                    socket.display()
                )));
            }
            sleep(POLL);
        }
        Ok(p)
    }

    /// Process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The socket path it listens on.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Exit status if it has exited.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        self.child
            .try_wait()
            .map_err(|e| Error::Process(format!("wait: {e}")))
    }

    /// Still running?
    pub fn is_alive(&mut self) -> bool {
        matches!(self.try_wait(), Ok(None))
    }

    /// Wait up to `timeout` for it to exit on its own.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<Option<ExitStatus>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.try_wait()? {
                return Ok(Some(st));
            }
            if Instant::now() > deadline {
                return Ok(None);
            }
            sleep(POLL);
        }
    }

    /// Open file descriptors of the process.
    pub fn fd_count(&self) -> Result<usize> {
        fd_count(self.pid())
    }

    /// User + system CPU seconds of all threads of the process and its descendants (backends
    /// like virtiofsd fork a sandboxed child that does the work).
    pub fn cpu_seconds(&self) -> Result<f64> {
        tree_pids(self.pid()).into_iter().map(cpu_seconds).sum()
    }

    /// Largest peak resident set size (VmHWM, KiB) in the process tree.
    pub fn peak_rss_kib(&self) -> Result<u64> {
        let v: Result<Vec<u64>> = tree_pids(self.pid())
            .into_iter()
            .map(peak_rss_kib)
            .collect();
        Ok(v?.into_iter().max().unwrap_or(0))
    }
}

impl Drop for BackendProcess {
    fn drop(&mut self) {
        if self.is_alive() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Removes `socket` and the files a backend keeps beside it (`SOCKET.pid`: both daemons' lock
/// file; `SOCKET.ctl`, `SOCKET.upgrade`: union-virtiofsd's control and upgrade sockets), which a
/// backend killed on drop leaves behind.
pub fn remove_socket_files(socket: &Path) {
    let _ = std::fs::remove_file(socket);
    for ext in ["pid", "ctl", "upgrade"] {
        let mut p = socket.as_os_str().to_owned();
        p.push(".");
        p.push(ext);
        let _ = std::fs::remove_file(p);
    }
}

fn proc_err(pid: u32, what: &str, e: impl std::fmt::Display) -> Error {
    Error::Process(format!("/proc/{pid}/{what}: {e}"))
}

/// `pid` and all its live descendants, from `/proc/PID/task/*/children`.
pub fn tree_pids(pid: u32) -> Vec<u32> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) {
            for t in tasks.flatten() {
                let c = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
                out.extend(c.split_whitespace().filter_map(|x| x.parse::<u32>().ok()));
            }
        }
        i += 1;
    }
    out
}

/// Number of entries in `/proc/PID/fd`.
pub fn fd_count(pid: u32) -> Result<usize> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .map_err(|e| proc_err(pid, "fd", e))
}

/// utime + stime of `/proc/PID/stat`, in seconds.
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| proc_err(pid, "stat", e))?;
    // Fields after the parenthesised comm; utime and stime are fields 14 and 15 overall.
    let rest = s.rsplit_once(')').map(|x| x.1).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f
        .get(11..13)
        .ok_or_else(|| proc_err(pid, "stat", "short"))?
        .iter()
        .map(|x| x.parse::<u64>().unwrap_or(0))
        .sum();
    Ok(ticks as f64 / rustix::param::clock_ticks_per_second() as f64)
}

/// VmHWM of `/proc/PID/status`, in KiB.
pub fn peak_rss_kib(pid: u32) -> Result<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| proc_err(pid, "status", e))?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| proc_err(pid, "status", "no VmHWM"))
}
