//! The host's control interface to a running daemon: mergerfs's runtime `user.mergerfs.*`
//! options and queries, on a unix socket beside the vhost-user one (`<socket>.ctl`) instead of
//! xattrs on the mount, since the guest is untrusted. The wire format, the server thread, the
//! client and the `union-virtiofsd ctl` subcommand. Never reachable from a guest request.

pub mod cli;
pub mod client;
pub mod edit;
pub mod proto;
pub mod reload;
pub mod server;

use std::os::fd::OwnedFd;
use std::sync::Arc;

use log::{info, warn};

pub use crate::fs::control::CtlError;
use crate::fs::UnionFs;

/// What the control interface asks of the served filesystem (mergerfs's runtime interface).
/// Implemented by [`UnionFs`]; a trait so the server needs no vhost generics and tests can
/// serve a fake.
pub trait Control: Send + Sync + 'static {
    /// Every key, without the `user.mergerfs.` prefix, sorted.
    fn ctl_keys(&self) -> Vec<String>;
    /// The value of `key`.
    fn ctl_get(&self, key: &str) -> Result<String, CtlError>;
    /// Sets `key` to `value`; `dirs` are the directories a branch edit adds, in the order of
    /// their paths in `value`. Returns what changed, for the log.
    fn ctl_set(&self, key: &str, value: &str, dirs: Vec<OwnedFd>) -> Result<String, CtlError>;
    /// A per-file query (`basepath`, `relpath`, `fullpath`, `allpaths`) on union path `path`.
    fn ctl_query(&self, path: &str, what: &str) -> Result<Vec<Vec<u8>>, CtlError>;
}

impl Control for UnionFs {
    fn ctl_keys(&self) -> Vec<String> {
        UnionFs::ctl_keys(self)
    }

    fn ctl_get(&self, key: &str) -> Result<String, CtlError> {
        UnionFs::ctl_get(self, key)
    }

    fn ctl_set(&self, key: &str, value: &str, dirs: Vec<OwnedFd>) -> Result<String, CtlError> {
        UnionFs::ctl_set(self, key, value, dirs)
    }

    fn ctl_query(&self, path: &str, what: &str) -> Result<Vec<Vec<u8>>, CtlError> {
        UnionFs::ctl_query(self, path, what)
    }
}

/// Sets `key` to `value` on `fs` and logs it: at info what changed, at warn a refusal. The
/// one way a setting changes at run time (the socket, and a configuration re-read).
pub fn apply_set<C: Control + ?Sized>(
    fs: &C,
    key: &str,
    value: &str,
    dirs: Vec<OwnedFd>,
) -> Result<String, CtlError> {
    match fs.ctl_set(key, value, dirs) {
        Ok(change) => {
            info!("ctl: set {key}={value} ({change})");
            Ok(change)
        }
        Err(e) => {
            warn!("ctl: set {key}={value} refused: {e}");
            Err(e)
        }
    }
}

/// A served filesystem whose `pid` is the daemon's pid as the host sees it: inside the
/// namespace sandbox the serving process is pid 1 of its own pid namespace, while a host
/// user signals the process the launcher started (the supervisor, which forwards signals).
pub struct HostPid<C> {
    /// The filesystem.
    pub fs: Arc<C>,
    /// The pid the launcher started (the pid file's).
    pub pid: u32,
}

impl<C: Control> Control for HostPid<C> {
    fn ctl_keys(&self) -> Vec<String> {
        self.fs.ctl_keys()
    }

    fn ctl_get(&self, key: &str) -> Result<String, CtlError> {
        let k = key.trim();
        if k.strip_prefix(client::KEY_PREFIX).unwrap_or(k) == "pid" {
            return Ok(self.pid.to_string());
        }
        self.fs.ctl_get(key)
    }

    fn ctl_set(&self, key: &str, value: &str, dirs: Vec<OwnedFd>) -> Result<String, CtlError> {
        self.fs.ctl_set(key, value, dirs)
    }

    fn ctl_query(&self, path: &str, what: &str) -> Result<Vec<Vec<u8>>, CtlError> {
        self.fs.ctl_query(path, what)
    }
}

/// Serves the daemon's control socket, if it has one, on a thread of its own. A failure to
/// start it is logged: the daemon serves the guest without it.
pub fn start(daemon: &mut crate::vhost::Daemon<UnionFs>) {
    let Some(socket) = daemon.take_control() else {
        return;
    };
    let fs = Arc::new(HostPid {
        fs: daemon.fs(),
        pid: daemon.host_pid(),
    });
    if let Err(e) = server::spawn(socket.listener, socket.group, fs) {
        warn!("ctl: cannot start the control socket's thread: {e}");
    }
}
