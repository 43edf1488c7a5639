//! The vhost-user device: listening socket, queues, FUSE_INIT / max_pages negotiation, worker
//! threads. Knows descriptors and queues, nothing about files (that is `fs`).

mod backend;
mod dispatch;
mod init;
mod io;
mod opcode;
mod own;
mod pool;
mod reply;
mod state;
#[cfg(test)]
mod tests;
mod vring;
mod waiters;

use std::os::unix::io::RawFd;
use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::thread;

use fuse_backend_rs::api::filesystem::FileSystem;
use log::{info, warn};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use vhost::vhost_user::{Error as VhostUserError, Listener};
use vhost_user_backend::{Error as DaemonError, VhostUserDaemon};
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};

pub use backend::{FsBackend, MAX_QUEUE_SIZE};
pub use dispatch::Dispatcher;
pub use init::{effective_max_pages, Negotiated, MAX_PAGES_LIMIT};

/// Where the frontend connects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    /// Create (replacing any stale file) and listen on this unix socket path.
    Path(PathBuf),
    /// Adopt this inherited, already listening unix socket.
    Fd(RawFd),
}

/// Settings of the vhost-user device, built by `config`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DaemonConfig {
    /// Where the frontend connects.
    pub listen: Listen,
    /// Worker threads; 0 serves requests on the queue threads.
    pub thread_pool_size: usize,
    /// Ceiling for the advertised `max_pages` (1..=1020).
    pub max_pages: u16,
    /// Request queues offered besides the high-priority queue.
    pub num_request_queues: u16,
    /// The tag offered in the device config space (`--tag`), if any.
    pub tag: Option<String>,
    /// Negotiate FUSE_DIRECT_IO_ALLOW_MMAP (`--allow-mmap`): shared mmap of files opened with
    /// FOPEN_DIRECT_IO (`--cache=never|metadata`).
    pub allow_mmap: bool,
    /// Group that gets the socket (`--socket-group`): group read/write, no access for others.
    pub socket_group: Option<u32>,
    /// How the session moves to another daemon (`--migration-*`).
    pub migration: Migration,
}

/// How the session moves to another daemon (migration, snapshots): how the source describes
/// it and what the destination does with what it cannot find again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Migration {
    /// The source's side (`--migration-mode`, `--migration-verify-handles`,
    /// `--migration-confirm-paths`).
    pub export: crate::fs::session::ExportOptions,
    /// The destination's side (`--migration-on-error`).
    pub on_error: crate::fs::session::OnError,
}

/// Errors setting up or running the vhost-user daemon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The socket path could not be bound.
    #[error("cannot listen on {path}: {source}")]
    Listen {
        /// The socket path.
        path: PathBuf,
        /// The underlying error.
        source: VhostUserError,
    },
    /// The inherited `--fd` could not be adopted.
    #[error("cannot use inherited socket fd {fd}: {source}")]
    AdoptFd {
        /// The fd number.
        fd: RawFd,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The pid file could not be created or is locked by another daemon.
    #[error("cannot lock pid file {path} (another daemon on this socket?): {source}")]
    PidFile {
        /// The pid file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The socket could not be given to `--socket-group`.
    #[error("cannot give socket {path} to its group: {source}")]
    SocketGroup {
        /// The socket path.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The worker pool could not be started.
    #[error("cannot start worker threads: {0}")]
    StartWorkers(std::io::Error),
    /// The signal handler could not be installed.
    #[error("cannot install signal handler: {0}")]
    Signals(std::io::Error),
    /// The vhost-user daemon could not be created.
    #[error("cannot create vhost-user daemon: {0}")]
    CreateDaemon(DaemonError),
    /// Serving the frontend failed.
    #[error("vhost-user session failed: {0}")]
    Serve(DaemonError),
}

/// The JSON `--print-capabilities` prints (vhost-user.rst "backend program conventions"):
/// the device type and the features this daemon really has. `separate-options` tells libvirt it
/// may pass `--shared-dir`, `--cache`… instead of one `-o` string; `migrate-precopy` that
/// the device state moves with the VM (libvirt then lets a domain using it migrate).
pub fn capabilities_json() -> &'static str {
    "{\n  \"type\": \"fs\",\n  \"features\": [\n    \"migrate-precopy\",\n    \"separate-options\"\n  ]\n}"
}

/// A bound vhost-user virtio-fs device, ready to serve one frontend connection.
pub struct Daemon<F: FileSystem + Send + Sync> {
    backend: Arc<FsBackend<F>>,
    listener: Listener,
    path: Option<PathBuf>,
    /// `<socket>.pid`, locked while the daemon runs (as virtiofsd: launchers wait for it, and a
    /// second daemon on the same socket fails instead of stealing it).
    _pid_file: Option<std::fs::File>,
    /// SIGTERM/SIGINT, caught from before the socket exists: a VMM may signal as soon as it
    /// sees the socket, and the default action would kill the daemon with no clean exit.
    signals: Signals,
}

enum Stop {
    Served(Result<(), DaemonError>),
    Signal(i32),
}

/// A bound socket (and locked pid file) with no thread started yet: the moment to enter a
/// sandbox, before [`Bound::start`] reads any guest request.
pub struct Bound {
    listener: Listener,
    path: Option<PathBuf>,
    pid_file: Option<std::fs::File>,
    signals: Signals,
    cfg: DaemonConfig,
}

impl Bound {
    /// Binds the socket (or adopts `--fd`), locks `<socket>.pid` and catches SIGTERM/SIGINT.
    /// Starts no thread.
    pub fn new(cfg: &DaemonConfig) -> Result<Self, Error> {
        let signals = Signals::new([SIGTERM, SIGINT]).map_err(Error::Signals)?;
        let mut pid_file = None;
        let (listener, path) = match &cfg.listen {
            Listen::Path(p) => {
                let mut pid_path = p.clone().into_os_string();
                pid_path.push(".pid");
                let pid_path = PathBuf::from(pid_path);
                pid_file = Some(crate::sys::files::write_pid_file(&pid_path).map_err(
                    |source| Error::PidFile {
                        path: pid_path.clone(),
                        source,
                    },
                )?);
                let listener = Listener::new(p, true).map_err(|source| Error::Listen {
                    path: p.clone(),
                    source,
                })?;
                if let Some(gid) = cfg.socket_group {
                    crate::sys::files::give_socket_to_group(p, gid).map_err(|source| {
                        Error::SocketGroup {
                            path: p.clone(),
                            source,
                        }
                    })?;
                }
                (listener, Some(p.clone()))
            }
            Listen::Fd(fd) => {
                let l = crate::sys::fd::adopt_listener(*fd)
                    .map_err(|source| Error::AdoptFd { fd: *fd, source })?;
                (Listener::from(l), None)
            }
        };
        Ok(Bound {
            listener,
            path,
            pid_file,
            signals,
            cfg: cfg.clone(),
        })
    }

    /// The socket path, if the daemon created one.
    pub fn path(&self) -> Option<&std::path::Path> {
        self.path.as_deref()
    }

    /// Starts the worker pool for `fs`: ready to [`Daemon::run`].
    pub fn start<F>(self, fs: F) -> Result<Daemon<F>, Error>
    where
        F: dispatch::ServedFs,
    {
        let cfg = &self.cfg;
        let dispatcher = Dispatcher::new(fs, cfg.max_pages).allow_mmap(cfg.allow_mmap);
        let backend = FsBackend::new(
            dispatcher,
            cfg.num_request_queues,
            cfg.thread_pool_size,
            cfg.tag.clone(),
            cfg.migration,
        )
        .map_err(Error::StartWorkers)?;
        Ok(Daemon {
            backend: Arc::new(backend),
            listener: self.listener,
            path: self.path,
            _pid_file: self.pid_file,
            signals: self.signals,
        })
    }
}

/// Removes the socket and its pid file (on exit; the sandbox's parent does it for its child).
pub fn remove_socket_files(path: &std::path::Path) {
    let _ = std::fs::remove_file(path);
    let mut pid = path.to_path_buf().into_os_string();
    pid.push(".pid");
    let _ = std::fs::remove_file(pid);
}

impl<F> Daemon<F>
where
    F: dispatch::ServedFs,
{
    /// Binds the socket (or adopts `--fd`) and starts the worker pool for `fs`.
    pub fn new(cfg: &DaemonConfig, fs: F) -> Result<Self, Error> {
        Bound::new(cfg)?.start(fs)
    }

    /// Serves one frontend until it disconnects (Ok) or SIGTERM/SIGINT arrives (Ok); stops the
    /// queue and worker threads before returning.
    pub fn run(self) -> Result<(), Error> {
        let mem = GuestMemoryAtomic::new(GuestMemoryMmap::<backend::Logged>::new());
        let mut daemon =
            VhostUserDaemon::new("union-virtiofsd".to_string(), self.backend.clone(), mem)
                .map_err(Error::CreateDaemon)?;
        let handlers = daemon.get_epoll_handlers();
        let mut signals = self.signals;
        let signal_handle = signals.handle();
        let (tx, rx) = mpsc::channel();
        let sig_tx = tx.clone();
        thread::Builder::new()
            .name("signals".to_string())
            .spawn(move || {
                if let Some(sig) = signals.forever().next() {
                    let _ = sig_tx.send(Stop::Signal(sig));
                }
            })
            .map_err(Error::Signals)?;
        let mut listener = self.listener;
        // Launchers (kata) wait for this exact line on stderr, as virtiofsd prints it.
        info!("Waiting for vhost-user socket connection...");
        thread::Builder::new()
            .name("vhost-user".to_string())
            .spawn(move || {
                let res = daemon.start(&mut listener).and_then(|()| {
                    info!("frontend connected");
                    daemon.wait()
                });
                let _ = tx.send(Stop::Served(res));
                // Keep the listener (and its socket file) until the session is over.
                drop(listener);
            })
            .map_err(Error::StartWorkers)?;

        let result = match rx.recv() {
            Ok(Stop::Signal(sig)) => {
                info!("received signal {sig}, exiting");
                if let Some(p) = &self.path {
                    remove_socket_files(p);
                }
                Ok(())
            }
            Ok(Stop::Served(Ok(()))) => {
                info!("frontend disconnected");
                Ok(())
            }
            Ok(Stop::Served(Err(DaemonError::HandleRequest(
                VhostUserError::Disconnected
                | VhostUserError::PartialMessage
                | VhostUserError::SocketBroken(_),
            )))) => {
                info!("frontend disconnected");
                Ok(())
            }
            Ok(Stop::Served(Err(e))) => Err(Error::Serve(e)),
            Err(_) => {
                warn!("daemon threads vanished");
                Ok(())
            }
        };
        signal_handle.close();
        for h in &handlers {
            h.send_exit_event();
        }
        self.backend.shutdown();
        result
    }
}
