//! Test support for protocol-level tests: start the daemon binary over temp branch dirs with a
//! temp socket (bounded polling, no fixed sleeps) and connect the vufs-frontend driver to it.
//! `VUFS_BACKEND_CMD` (e.g. `virtiofsd --socket-path {socket} --shared-dir {dir}`) swaps in
//! another backend for hand validation; `{dir}` is the first branch.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;
use vufs_frontend::process::BackendProcess;
use vufs_frontend::{ops, ConnectOptions, Device};

/// A running daemon plus its temp tree: `<tmp>/<branch name>/` for each branch, and `<tmp>/run/`
/// for the socket and the daemon's log.
pub struct Daemon {
    /// The daemon's process, killed on drop.
    pub proc: BackendProcess,
    /// The temp tree: branches, socket and log.
    pub tmp: TempDir,
    /// The branch directories, in command-line order.
    pub branches: Vec<PathBuf>,
}

impl Daemon {
    /// Start over fresh branches `names` (each `NAME` or `NAME=MODE`), with `extra` arguments.
    pub fn start(names: &[&str], extra: &[&str]) -> Daemon {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut branches = Vec::new();
        let mut specs = Vec::new();
        for n in names {
            let (name, mode) = n.split_once('=').map_or((*n, None), |(a, b)| (a, Some(b)));
            let p = tmp.path().join(name);
            fs::create_dir_all(&p).expect("mkdir branch");
            specs.push(match mode {
                Some(m) => format!("{}={m}", p.display()),
                None => p.display().to_string(),
            });
            branches.push(p);
        }
        Self::start_in(tmp, branches, &specs, extra)
    }

    /// Start over already prepared branch directories.
    pub fn start_in(
        tmp: TempDir,
        branches: Vec<PathBuf>,
        specs: &[String],
        extra: &[&str],
    ) -> Daemon {
        fs::create_dir_all(tmp.path().join("run")).expect("run dir");
        let sock = tmp.path().join("run/sock");
        let log = fs::File::create(tmp.path().join("run/daemon.log")).expect("log file");
        let mut cmd = match std::env::var("VUFS_BACKEND_CMD") {
            Ok(tpl) => {
                let words: Vec<String> = tpl
                    .split_whitespace()
                    .map(|w| {
                        w.replace("{socket}", &sock.to_string_lossy())
                            .replace("{dir}", &branches[0].to_string_lossy())
                    })
                    .collect();
                let mut c = Command::new(&words[0]);
                c.args(&words[1..]);
                c
            }
            Err(_) => {
                let mut c = Command::new(crate::bin::daemon_path());
                c.arg("--socket-path").arg(&sock);
                for s in specs {
                    c.arg("--branch").arg(s);
                }
                c.args(extra);
                c
            }
        };
        cmd.stdout(Stdio::null()).stderr(Stdio::from(log));
        let proc = BackendProcess::spawn(cmd, &sock, Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("starting daemon: {e}\n{}", log_tail(tmp.path())));
        Daemon {
            proc,
            tmp,
            branches,
        }
    }

    /// The vhost-user socket.
    pub fn socket(&self) -> PathBuf {
        self.tmp.path().join("run/sock")
    }

    /// Last lines of the daemon's stderr, for failure messages.
    pub fn log(&self) -> String {
        log_tail(self.tmp.path())
    }

    /// Waits up to 10 s for a line of the daemon's log that contains `text`.
    pub fn wait_for_log(&self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let path = self.tmp.path().join("run/daemon.log");
        while !fs::read_to_string(&path).unwrap_or_default().contains(text) {
            assert!(
                Instant::now() < deadline,
                "no '{text}' in the log\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Connect with `queue_size` entries per queue (default options otherwise).
    pub fn connect_with(&self, queue_size: u16) -> Device {
        let opts = ConnectOptions {
            queue_size,
            ..Default::default()
        };
        Device::connect(&self.socket(), &opts)
            .unwrap_or_else(|e| panic!("connect: {e}\n{}", self.log()))
    }

    /// Connect with default options and complete FUSE_INIT.
    pub fn session(&self) -> Device {
        let mut dev = self.connect_with(1024);
        dev.init(ops::DEFAULT_INIT_FLAGS)
            .unwrap_or_else(|e| panic!("FUSE_INIT: {e}\n{}", self.log()));
        dev
    }

    /// Panic with the log unless the daemon is still running.
    pub fn assert_alive(&mut self) {
        if let Ok(Some(st)) = self.proc.try_wait() {
            panic!("daemon exited: {st}\n{}", self.log());
        }
    }
}

fn log_tail(dir: &Path) -> String {
    let s = fs::read_to_string(dir.join("run/daemon.log")).unwrap_or_default();
    let lines: Vec<&str> = s.lines().collect();
    let from = lines.len().saturating_sub(30);
    format!("--- daemon log ---\n{}", lines[from..].join("\n"))
}
