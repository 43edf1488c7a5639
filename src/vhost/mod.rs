//! The vhost-user device: listening socket, queues, worker threads, the daemon's lifecycle
//! (upgrade in place, the front-end image). Knows descriptors and queues; the FUSE protocol
//! is `crate::fuse`, files are `crate::fs`.

mod backend;
mod chain;
pub mod ctl_socket;
mod dispatch;
mod frontend;
mod pool;
mod release;
mod socket_dir;
pub mod socket_path;
mod split;
mod tap;
#[cfg(test)]
mod tests;
pub mod upgrade;
mod vring;

use std::os::fd::AsFd;
use std::os::unix::io::RawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, OnceLock};
use std::thread;

use crate::fuse::ServedFs;
use log::{info, warn};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use vhost::vhost_user::{Error as VhostUserError, Listener};
use vhost_user_backend::{Error as DaemonError, VhostUserDaemon, VringEpollHandler};
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};

pub use crate::fuse::{
    effective_max_pages, Negotiated, DEFAULT_MAX_WRITE, MAX_PAGES_LIMIT, MAX_WRITE_LIMIT,
};
pub use backend::{FsBackend, MAX_QUEUE_SIZE};
pub use chain::Ring;
pub use dispatch::Dispatcher;
pub use socket_path::remove_socket_files;
pub use split::{ChainMemory, HeldMemory};

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
    /// Ceiling for the advertised `max_write` (`--max-write`), below `max_pages` pages.
    pub max_write: u32,
    /// Request queues offered besides the high-priority queue.
    pub num_request_queues: u16,
    /// The tag offered in the device config space (`--tag`), if any.
    pub tag: Option<String>,
    /// Negotiate FUSE_DIRECT_IO_ALLOW_MMAP (`--allow-mmap`): shared mmap of files opened with
    /// FOPEN_DIRECT_IO (`--cache=never|metadata`).
    pub allow_mmap: bool,
    /// Group that gets the socket (`--socket-group`): group read/write, no access for others.
    pub socket_group: Option<u32>,
    /// `--ctl-socket`: where the control socket goes instead of `<socket>.ctl` (with `--fd`,
    /// the only way to have one).
    pub ctl_socket: Option<PathBuf>,
    /// How the session moves to another daemon (`--migration-*`).
    pub migration: Migration,
    /// `--upgrade PIDFILE`: take the session over from the daemon running on this socket.
    pub upgrade: Option<PathBuf>,
    /// `--release-guest-memory`: how often, while requests flow, the daemon drops its
    /// mappings of the guest memory it touched; zero keeps them.
    pub release_guest_memory: std::time::Duration,
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
        source: std::io::Error,
    },
    /// Taking the session over from the running daemon failed (`--upgrade`).
    #[error("{0}")]
    Upgrade(#[from] upgrade::Error),
    /// The inherited `--fd` could not be adopted.
    #[error("cannot use inherited socket fd {fd}: {source}")]
    AdoptFd {
        /// The fd number.
        fd: RawFd,
        /// The underlying error.
        source: std::io::Error,
    },
    /// `--socket-path` cannot be used (bad input: nothing was made).
    #[error("{0}")]
    SocketPath(#[from] socket_path::Error),
    /// `--ctl-socket` cannot be used (bad input: nothing was made).
    #[error("{0}")]
    CtlSocket(#[from] ctl_socket::Error),
    /// The pid file could not be created or locked.
    #[error("cannot create pid file {path}: {source}")]
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

/// Checks what can be checked of where the daemon will listen before making anything:
/// for `--socket-path` and `--ctl-socket`, their length, their directory and what is
/// already there.
pub fn check_listen(cfg: &DaemonConfig) -> Result<(), Error> {
    let ctl = cfg.ctl_path();
    if let (Some(c), Listen::Path(p)) = (&cfg.ctl_socket, &cfg.listen) {
        ctl_socket::check_apart(c, p)?;
    }
    match &cfg.listen {
        // With --upgrade, the daemon taken over from serves on them.
        Listen::Path(p) if cfg.upgrade.is_some() => {
            socket_path::check_files(p, ctl.as_deref().unwrap_or(p))?
        }
        Listen::Path(p) => socket_path::check(p, ctl.as_deref().unwrap_or(p))?,
        Listen::Fd(_) => {}
    }
    if let Some(c) = cfg.explicit_ctl_socket().filter(|_| cfg.upgrade.is_none()) {
        ctl_socket::check(c)?;
    }
    Ok(())
}

impl DaemonConfig {
    /// Where the control socket goes: `--ctl-socket`, else `<socket>.ctl` beside
    /// `--socket-path`; none with `--fd` alone.
    pub fn ctl_path(&self) -> Option<PathBuf> {
        match (&self.ctl_socket, &self.listen) {
            (Some(c), _) => Some(c.clone()),
            (None, Listen::Path(p)) => Some(ctl_path(p)),
            (None, Listen::Fd(_)) => None,
        }
    }

    /// `--ctl-socket` when it is not `<socket>.ctl`: a file the daemon removes by itself,
    /// apart from the socket's.
    pub fn explicit_ctl_socket(&self) -> Option<&Path> {
        let c = self.ctl_socket.as_deref()?;
        match &self.listen {
            Listen::Path(p) if ctl_path(p) == c => None,
            _ => Some(c),
        }
    }
}

/// Removes the control socket `--ctl-socket` named (on exit; the sandbox's parent does it
/// for its child), if it is still a socket.
pub fn remove_ctl_socket(path: &Path) {
    let _ = crate::sys::files::remove_stale_socket(path);
}

impl Error {
    /// Whether the command line is at fault (a `--socket-path` the daemon will not use):
    /// nothing was made, and the caller exits 2 as for any bad input.
    pub fn is_bad_input(&self) -> bool {
        matches!(self, Error::SocketPath(_) | Error::CtlSocket(_))
    }
}

/// The JSON `--print-capabilities` prints (vhost-user.rst "backend program conventions"):
/// the device type and the features this daemon really has. `separate-options` tells libvirt it
/// may pass `--shared-dir`, `--cache`… instead of one `-o` string; `migrate-precopy` that
/// the device state moves with the VM (libvirt then lets a domain using it migrate).
pub fn capabilities_json() -> &'static str {
    "{\n  \"type\": \"fs\",\n  \"features\": [\n    \"migrate-precopy\",\n    \"separate-options\"\n  ]\n}"
}

/// A bound vhost-user virtio-fs device, ready to serve one frontend connection.
pub struct Daemon<F: ServedFs> {
    backend: Arc<FsBackend<F>>,
    /// The filesystem served (the dispatcher's), for the host's control interface.
    fs: Arc<F>,
    sockets: Sockets,
    /// SIGTERM/SIGINT, caught from before the socket exists: a VMM may signal as soon as it
    /// sees the socket, and the default action would kill the daemon with no clean exit.
    signals: Signals,
}

/// How [`Daemon::run`] ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// The front-end hung up, or a signal came: the session is over.
    Served,
    /// The session went to a new daemon (`--upgrade`); its files must stay.
    HandedOver,
}

/// The exit status of a sandboxed child whose session went to a new daemon: its supervisor
/// then leaves the socket files alone and exits 0.
pub const HANDED_OVER_STATUS: i32 = 99;

/// The exit status of a sandboxed child that could not take a session over (`--upgrade`):
/// the socket files belong to the old daemon, which serves on; the supervisor exits 1.
pub const UPGRADE_ABANDONED_STATUS: i32 = 98;

enum Stop {
    Served(Result<(), DaemonError>),
    Signal(i32),
    HandedOver,
    Failed(Error),
}

/// The descriptors a daemon serves through, made before the sandbox.
struct Sockets {
    /// The front-end's listening socket (none when it came connected, by an upgrade, from a
    /// daemon that had none).
    listener: Option<UnixListener>,
    /// The session handed over by the daemon this one upgrades.
    handed: Option<Box<upgrade::Received>>,
    path: Option<PathBuf>,
    /// `<socket>.pid`, locked while the daemon runs (as virtiofsd: launchers wait for it, and a
    /// second daemon on the same socket fails instead of stealing it).
    pid_file: Option<std::fs::File>,
    /// `<socket>.upgrade`, where a new daemon asks for the session.
    upgrades: Option<UnixListener>,
    /// `<socket>.ctl`, the host's control socket (until [`Daemon::take_control`]).
    ctl: Option<ControlSocket>,
    /// With `--upgrade`, the control socket bound under a temporary name: it replaces the old
    /// daemon's once the session is this daemon's.
    ctl_staged: Option<crate::sys::files::Staged>,
    /// The vhost-user handler's own socket, and the tap's connection to it.
    inner: (UnixListener, UnixStream),
    /// This daemon's pid as the host sees it (before a pid namespace), for the pid file and
    /// `ctl get pid`.
    pid: u32,
    /// `--ctl-socket` away from `<socket>.ctl`, removed on exit.
    own_ctl: Option<PathBuf>,
}

/// A bound socket (and locked pid file) with no thread started yet: the moment to enter a
/// sandbox, before [`Bound::start`] reads any guest request.
pub struct Bound {
    sockets: Sockets,
    signals: Signals,
    cfg: DaemonConfig,
}

impl Bound {
    /// Binds the socket (or adopts `--fd`, or with `--upgrade` receives the running
    /// daemon's session), locks `<socket>.pid` and catches SIGTERM/SIGINT. Starts no thread.
    pub fn new(cfg: &DaemonConfig) -> Result<Self, Error> {
        let signals = Signals::new([SIGTERM, SIGINT]).map_err(Error::Signals)?;
        let inner = crate::sys::uds::inner_pair().map_err(Error::StartWorkers)?;
        if let Some(pid_file) = &cfg.upgrade {
            let Listen::Path(path) = &cfg.listen else {
                unreachable!("config refuses --upgrade with --fd")
            };
            let mut r = upgrade::receive(pid_file).map_err(Error::Upgrade)?;
            info!("upgrade: took the session of pid {} over", r.old_pid);
            // The session matters more than the control socket: without one, serve on.
            let ctl = cfg.ctl_path().unwrap_or_else(|| ctl_path(path));
            let (ctl, ctl_staged) =
                match crate::sys::files::bind_staged(&ctl, 0o600, cfg.socket_group) {
                    Ok((listener, staged)) => {
                        info!("control socket: {}", ctl.display());
                        let group = cfg.socket_group;
                        (Some(ControlSocket { listener, group }), Some(staged))
                    }
                    Err(e) => {
                        warn!(
                            "upgrade: no control socket: cannot listen on {}: {e}",
                            ctl.display()
                        );
                        (None, None)
                    }
                };
            let sockets = Sockets {
                listener: r.listener.take(),
                pid_file: r.pid_file.take(),
                upgrades: r.upgrades.take(),
                ctl,
                ctl_staged,
                handed: Some(Box::new(r)),
                path: Some(path.clone()),
                inner,
                pid: std::process::id(),
                own_ctl: cfg.explicit_ctl_socket().map(Path::to_path_buf),
            };
            return Ok(Bound {
                sockets,
                signals,
                cfg: cfg.clone(),
            });
        }
        let mut pid_file = None;
        let mut upgrades = None;
        let mut ctl = None;
        let (listener, path) = match &cfg.listen {
            Listen::Path(p) => {
                let c = cfg.ctl_path().unwrap_or_else(|| ctl_path(p));
                let b = socket_path::bind(p, &c, cfg.socket_group)?;
                pid_file = Some(b.pid_file);
                upgrades = Some(b.upgrades);
                ctl = Some(b.ctl);
                (b.listener, Some(p.clone()))
            }
            Listen::Fd(fd) => {
                let l = crate::sys::fd::adopt_listener(*fd)
                    .map_err(|source| Error::AdoptFd { fd: *fd, source })?;
                if let Some(c) = &cfg.ctl_socket {
                    let listener = ctl_socket::bind(c, cfg.socket_group)?;
                    let group = cfg.socket_group;
                    ctl = Some(ControlSocket { listener, group });
                }
                (l, None)
            }
        };
        // The start line (config::summary) names the control socket.
        Ok(Bound {
            sockets: Sockets {
                listener: Some(listener),
                handed: None,
                path,
                pid_file,
                upgrades,
                ctl,
                ctl_staged: None,
                inner,
                pid: std::process::id(),
                own_ctl: cfg.explicit_ctl_socket().map(Path::to_path_buf),
            },
            signals,
            cfg: cfg.clone(),
        })
    }

    /// The socket path, if the daemon created one.
    pub fn path(&self) -> Option<&std::path::Path> {
        self.sockets.path.as_deref()
    }

    /// `--ctl-socket`, when it is a file of its own (not `<socket>.ctl`).
    pub fn own_ctl(&self) -> Option<&std::path::Path> {
        self.sockets.own_ctl.as_deref()
    }

    /// Starts the worker pool for `fs`: ready to [`Daemon::run`].
    pub fn start<F>(self, fs: F) -> Result<Daemon<F>, Error>
    where
        F: ServedFs,
    {
        let cfg = &self.cfg;
        let dispatcher = Dispatcher::new(fs, cfg.max_pages)
            .max_write(cfg.max_write)
            .allow_mmap(cfg.allow_mmap);
        let fs = dispatcher.fs.clone();
        let backend = FsBackend::new(
            dispatcher,
            cfg.num_request_queues,
            cfg.thread_pool_size,
            cfg.tag.clone(),
            cfg.migration,
        )
        .map_err(Error::StartWorkers)?
        .release_guest_memory(cfg.release_guest_memory);
        Ok(Daemon {
            backend: Arc::new(backend),
            fs,
            sockets: self.sockets,
            signals: self.signals,
        })
    }
}

/// The host's control socket next to the vhost-user socket `socket`: `<socket>.ctl`.
pub fn ctl_path(socket: &Path) -> PathBuf {
    socket_dir::beside(socket, ".ctl")
}

/// The host's control socket (`<socket>.ctl`), served by `crate::ctl::server`.
#[derive(Debug)]
pub struct ControlSocket {
    /// The listening socket (mode 0600, or 0660 owned by `group`).
    pub listener: UnixListener,
    /// `--socket-group`: its members may use the socket too.
    pub group: Option<u32>,
}

impl<F> Daemon<F>
where
    F: ServedFs,
{
    /// Binds the socket (or adopts `--fd`) and starts the worker pool for `fs`.
    pub fn new(cfg: &DaemonConfig, fs: F) -> Result<Self, Error> {
        Bound::new(cfg)?.start(fs)
    }

    /// The filesystem served, for the host's control interface.
    pub fn fs(&self) -> Arc<F> {
        self.fs.clone()
    }

    /// This daemon's pid as the host sees it: the process a launcher started and may signal
    /// (the sandbox's supervisor, which forwards signals to the serving child).
    pub fn host_pid(&self) -> u32 {
        self.sockets.pid
    }

    /// The control socket (`<socket>.ctl` or `--ctl-socket`), to serve beside the daemon.
    /// With `--upgrade` it takes the running daemon's place once [`Daemon::run`] has the
    /// session.
    pub fn take_control(&mut self) -> Option<ControlSocket> {
        self.sockets.ctl.take()
    }

    /// Serves one frontend until it disconnects, SIGTERM/SIGINT arrives, or the session goes
    /// to a new daemon (`--upgrade`); stops the queue and worker threads before returning.
    pub fn run(self) -> Result<Ended, Error> {
        let mem = GuestMemoryAtomic::new(GuestMemoryMmap::<backend::Logged>::new());
        let mut daemon =
            VhostUserDaemon::new("union-virtiofsd".to_string(), self.backend.clone(), mem)
                .map_err(Error::CreateDaemon)?;
        let rings = vring::take_made();
        let handlers = daemon.get_epoll_handlers();
        let sockets = self.sockets;
        let (inner_listener, inner) = sockets.inner;
        // The connection to it is already queued: this returns at once.
        daemon
            .start(&mut Listener::from(inner_listener))
            .map_err(Error::CreateDaemon)?;
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
        let served_tx = tx.clone();
        thread::Builder::new()
            .name("vhost-user".to_string())
            .spawn(move || {
                let _ = served_tx.send(Stop::Served(daemon.wait()));
            })
            .map_err(Error::StartWorkers)?;

        let tap: Arc<OnceLock<Arc<tap::Tap>>> = Arc::default();
        let dup = |l: &Option<UnixListener>| l.as_ref().and_then(|l| l.try_clone().ok());
        let old = Arc::new(OldSide {
            backend: self.backend.clone(),
            rings: rings.clone(),
            tap: tap.clone(),
            handlers: handlers.clone(),
            listener: dup(&sockets.listener),
            upgrades: dup(&sockets.upgrades),
            pid_file: sockets.pid_file.as_ref().and_then(|f| f.try_clone().ok()),
        });
        if let Some(handed) = sockets.handed {
            let taken = take_over(&self.backend, &rings, *handed, inner);
            let staged = sockets.ctl_staged;
            let t = match taken {
                Ok(t) => t,
                Err(e) => {
                    if let Some(s) = staged {
                        s.abandon();
                    }
                    return Err(Error::Upgrade(e));
                }
            };
            if let Some(staged) = staged {
                if let Err(e) = staged.publish() {
                    warn!("upgrade: cannot put the control socket in place: {e}");
                }
            }
            let _ = tap.set(t);
            // The pid file (locked by the old daemon, the lock shared with this one) names
            // this daemon from now on.
            if let Some(f) = &sockets.pid_file {
                if let Err(e) = crate::sys::files::claim_pid_file(f, sockets.pid) {
                    warn!("upgrade: cannot write this daemon's pid into the pid file: {e}");
                }
            }
        } else if let Some(listener) = &sockets.listener {
            let listener = listener.try_clone().map_err(Error::StartWorkers)?;
            let tap = tap.clone();
            let front_tx = tx.clone();
            // Launchers (kata) wait for this exact line on stderr, as virtiofsd prints it.
            info!("Waiting for vhost-user socket connection...");
            thread::Builder::new()
                .name("vhost-user-accept".to_string())
                .spawn(move || {
                    let connected = listener
                        .accept()
                        .and_then(|(front, _)| tap::Tap::new(front, inner, Default::default()))
                        .and_then(|t| t.start().map(|()| t));
                    match connected {
                        Ok(t) => {
                            info!("frontend connected");
                            let _ = tap.set(t);
                        }
                        Err(e) => {
                            let _ = front_tx.send(Stop::Failed(Error::StartWorkers(e)));
                        }
                    }
                })
                .map_err(Error::StartWorkers)?;
        }
        if let Some(upgrades) = sockets.upgrades {
            let old = old.clone();
            thread::Builder::new()
                .name("upgrade".to_string())
                .spawn(move || {
                    if serve_upgrades(&upgrades, &*old) {
                        let _ = tx.send(Stop::HandedOver);
                    }
                })
                .map_err(Error::StartWorkers)?;
        }

        let result = match rx.recv() {
            Ok(Stop::Signal(sig)) => {
                info!("received signal {sig}, exiting");
                Ok(Ended::Served)
            }
            Ok(Stop::HandedOver) => Ok(Ended::HandedOver),
            Ok(Stop::Failed(e)) => Err(e),
            Ok(Stop::Served(Ok(()))) => {
                info!("frontend disconnected");
                Ok(Ended::Served)
            }
            Ok(Stop::Served(Err(DaemonError::HandleRequest(
                VhostUserError::Disconnected
                | VhostUserError::PartialMessage
                | VhostUserError::SocketBroken(_),
            )))) => {
                info!("frontend disconnected");
                Ok(Ended::Served)
            }
            Ok(Stop::Served(Err(e))) => Err(Error::Serve(e)),
            Err(_) => {
                warn!("daemon threads vanished");
                Ok(Ended::Served)
            }
        };
        signal_handle.close();
        if result.as_ref().is_ok_and(|e| *e == Ended::HandedOver) {
            // Everything the session needs belongs to the new daemon now.
            return result;
        }
        if let Some(p) = &sockets.path {
            remove_socket_files(p);
        }
        if let Some(c) = &sockets.own_ctl {
            remove_ctl_socket(c);
        }
        for h in &handlers {
            h.send_exit_event();
        }
        self.backend.shutdown();
        result
    }
}

/// Accepts upgrade requests until one hands the session over (true).
fn serve_upgrades(upgrades: &UnixListener, old: &dyn upgrade::Old) -> bool {
    loop {
        let stream = match upgrades.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                warn!("upgrade channel: {e}");
                return false;
            }
        };
        match crate::sys::uds::peer(&stream) {
            Ok((_, uid)) if uid == 0 || uid == rustix::process::geteuid().as_raw() => {}
            Ok((_, uid)) => {
                warn!("upgrade refused to uid {uid}: not this daemon's user");
                continue;
            }
            Err(e) => {
                warn!("upgrade channel: {e}");
                continue;
            }
        }
        if upgrade::serve_one(&stream, old) == upgrade::Outcome::HandedOver {
            return true;
        }
    }
}

/// The new daemon's side of an upgrade: loads the session, tells the handler what the
/// front-end had set up, takes over and starts carrying the front-end's messages.
fn take_over<F: ServedFs>(
    backend: &FsBackend<F>,
    rings: &[vring::FsVring],
    handed: upgrade::Received,
    inner: UnixStream,
) -> Result<Arc<tap::Tap>, upgrade::Error> {
    let t = std::time::Instant::now();
    let version = crate::fuse::state::version_of(&handed.session).unwrap_or(0);
    let done = backend.take_over(&handed.session)?;
    let state = handed.replay(&inner)?;
    handed.take()?;
    let channel = handed.channel()?;
    let (answered_tx, answered_rx) = mpsc::channel::<()>();
    for r in rings {
        let tx = answered_tx.clone();
        r.flight().on_next_end(Box::new(move || {
            let _ = tx.send(());
        }));
    }
    let old_pid = handed.old_pid;
    thread::Builder::new()
        .name("upgrade-done".to_string())
        .spawn(move || {
            if answered_rx.recv().is_ok() {
                if let Err(e) = upgrade::answered(&channel) {
                    warn!("upgrade: cannot tell pid {old_pid} the first request was answered: {e}");
                }
            }
        })?;
    let kicks: Vec<_> = state
        .rings()
        .iter()
        .filter(|r| r.running())
        .filter_map(|r| r.kick().and_then(|k| k.try_clone().ok()))
        .collect();
    let tap = tap::Tap::new(handed.front, inner, state)?;
    tap.start()?;
    for k in &kicks {
        crate::sys::uds::kick(k.as_fd())?;
    }
    info!(
        "upgrade: serving the session of pid {old_pid} (device state version {version}) after {:.1} ms: {} nodes, {} open files, {} locks, {} lost",
        t.elapsed().as_secs_f64() * 1e3,
        done.nodes,
        done.handles,
        done.locks,
        done.lost
    );
    Ok(tap)
}

/// The old daemon, as an upgrade sees it.
struct OldSide<F: ServedFs> {
    backend: Arc<FsBackend<F>>,
    rings: Vec<vring::FsVring>,
    tap: Arc<OnceLock<Arc<tap::Tap>>>,
    handlers: Vec<Arc<VringEpollHandler<Arc<FsBackend<F>>>>>,
    listener: Option<UnixListener>,
    upgrades: Option<UnixListener>,
    pid_file: Option<std::fs::File>,
}

impl<F: ServedFs> upgrade::Old for OldSide<F> {
    fn tap(&self) -> Option<Arc<tap::Tap>> {
        self.tap.get().cloned()
    }

    fn hand_over(
        &self,
        reads: crate::fuse::state::Versions,
    ) -> std::io::Result<(Vec<u8>, Vec<u16>)> {
        self.backend.hand_over(&self.rings, reads)
    }

    fn take_back(&self, released: bool) {
        self.backend.take_back(released);
    }

    fn let_go(&self) {
        use vhost_user_backend::VringT;
        // No more kicks read here (each ring's lock orders this after any read in progress),
        // and the event loops end.
        for r in &self.rings {
            r.set_kick(None);
        }
        for h in &self.handlers {
            h.send_exit_event();
        }
    }

    fn fds(&self) -> std::io::Result<(UnixListener, Option<UnixListener>, Option<std::fs::File>)> {
        let upgrades = self
            .upgrades
            .as_ref()
            .ok_or_else(|| std::io::Error::other("no upgrade channel"))?
            .try_clone()?;
        let listener = self.listener.as_ref().map(|l| l.try_clone()).transpose()?;
        let pid = self.pid_file.as_ref().map(|f| f.try_clone()).transpose()?;
        Ok((upgrades, listener, pid))
    }
}
