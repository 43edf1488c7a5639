//! The host mount (`union-virtiofsd mount MOUNTPOINT`): the union served through /dev/fuse by
//! the same protocol layer (`fuse/`) as the vhost-user device, as mergerfs serves it. The
//! start (checks, mount by the daemon itself as root or by fusermount3 for an ordinary user,
//! confinement), the reader threads, and the end: an unmount (exit 0), or SIGTERM/SIGINT,
//! which detach the mount first. Nothing here knows virtio or the union's policies.

pub mod background;
mod backing;
mod buffer;
mod fusermount;
mod mountpoint;
mod reader;
mod session;
mod transport;
mod unmount;

use std::io;
use std::path::PathBuf;
use std::sync::{mpsc, Arc};

use log::{info, warn};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::config::mount::MountConfig;
use crate::fs::UnionFs;
use crate::fuse::Server;
pub use transport::Device;
pub use unmount::{helper as unmount_helper, helper_request as unmount_helper_request};

/// Why a host mount did not start or ended in error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The mount point cannot take the mount.
    #[error("mount point {}: {why}", path.display())]
    Mountpoint {
        /// The mount point.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// /dev/fuse cannot be opened.
    #[error("cannot open {}: {source}", crate::sys::fusedev::DEVICE)]
    DeviceAccess {
        /// Why.
        source: io::Error,
    },
    /// fusermount3 (an ordinary user's mount) cannot be run or refused the mount.
    #[error("{}: {why}", fusermount_said(path))]
    Fusermount {
        /// The mount point.
        path: PathBuf,
        /// fusermount3's message, or why it could not be run.
        why: String,
    },
    /// The branches cannot be served.
    #[error(transparent)]
    Fs(#[from] crate::fs::Error),
    /// The open-file limit cannot be set.
    #[error(transparent)]
    Limit(#[from] crate::sys::limits::LimitError),
    /// `--ctl-socket` cannot be used.
    #[error(transparent)]
    CtlSocket(crate::vhost::Error),
    /// A start-up step failed.
    #[error("cannot {what}: {source}")]
    Start {
        /// The step ("catch SIGHUP", "install the seccomp filter"…).
        what: &'static str,
        /// Why.
        source: io::Error,
    },
    /// The mount(2) call failed.
    #[error("cannot mount on {}: {source}", path.display())]
    Mount {
        /// The mount point.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A descriptor of the connection for another reader cannot be made.
    #[error(
        "cannot clone the {} descriptor: {source}",
        crate::sys::fusedev::DEVICE
    )]
    Clone {
        /// Why.
        source: io::Error,
    },
    /// Requests can no longer be read.
    #[error("cannot read requests: {source}")]
    Device {
        /// Why.
        source: io::Error,
    },
}

impl Error {
    /// Whether the command line or the host's setup is at fault (nothing was mounted): exit
    /// status 2.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            Error::Mountpoint { .. }
                | Error::DeviceAccess { .. }
                | Error::Fusermount { .. }
                | Error::Fs(_)
                | Error::CtlSocket(_)
        )
    }
}

/// The start of a fusermount3 error's line.
fn fusermount_said(path: &std::path::Path) -> String {
    format!("{} cannot mount on {}", fusermount::PROGRAM, path.display())
}

/// How the mount ended.
enum Ended {
    /// Unmounted from outside (`umount`, `fusermount3 -u`).
    Unmounted,
    /// This signal arrived; the mount was detached.
    Signal(i32),
    /// A reader could not go on.
    Failed(io::Error),
}

/// Removes the control socket when the mount ends (or fails to start).
struct RemoveOnDrop(Option<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            crate::vhost::remove_ctl_socket(p);
        }
    }
}

fn start(what: &'static str) -> impl FnOnce(io::Error) -> Error {
    move |source| Error::Start { what, source }
}

/// Mounts the union `cfg` describes and serves it until it is unmounted or a SIGTERM/SIGINT
/// arrives (both Ok). Errors before the mount leave nothing mounted. A background daemon
/// (`ready`) says when its readers serve the mount, and leaves its working directory first.
pub fn run(cfg: MountConfig, ready: Option<background::Ready>) -> Result<(), Error> {
    let o = &cfg.options;
    mountpoint::check(&cfg.mountpoint, o.nonempty)?;
    // Resolved now, before the mount makes looking it up a request to this daemon.
    let at = std::fs::canonicalize(&cfg.mountpoint).map_err(|e| Error::Mountpoint {
        path: cfg.mountpoint.clone(),
        why: e.to_string(),
    })?;
    let mounter = session::Mounter::new(cfg.privileged)?;
    let shared = cfg.shared;
    let fs = Arc::new(UnionFs::new(shared.fs)?);
    fs.kernel_checks_permissions(o.default_permissions);
    for note in &shared.notes {
        warn!("{note}");
    }
    // Said once mounted: a refusal by fusermount3 is the only line of a start that failed.
    let nofile = crate::sys::limits::set_nofile(cfg.rlimit_nofile)?;
    let mut reload = crate::ctl::reload::Reload::open(cfg.config_file.as_deref())
        .map_err(start("open the directory of --config"))?;
    let ctl = match &shared.ctl_socket {
        Some(p) => Some(crate::vhost::ctl_socket::bind(p, None).map_err(Error::CtlSocket)?),
        None => None,
    };
    let conn = Device::host(shared.max_pages);
    let max_read = usize::from(conn.max_pages) * conn.page_size;
    // Caught before the mount exists: a SIGTERM from then on detaches it (one that came
    // between mount(2) and a handler would kill the daemon and leave a dead mount).
    let signals = Signals::new([SIGTERM, SIGINT]).map_err(start("catch SIGTERM"))?;
    let mounted = mounter.mount(&at, o, max_read)?;
    let unmounter = mounted.unmounter();
    info!("{nofile}");
    // From here on a failure unmounts what it mounted.
    let ctl_path = ctl.as_ref().and(shared.ctl_socket.clone());
    let _remove_ctl = RemoveOnDrop(ctl_path);
    let started = (|| {
        let readers = cfg.readers;
        let fds = mounted.clones(readers - 1)?;
        reload.catch().map_err(start("catch SIGHUP"))?;
        if let Some(r) = &ready {
            r.leave_cwd().map_err(start("change directory to /"))?;
        }
        crate::confine::drop_caps(&shared.confinement).map_err(start("drop capabilities"))?;
        crate::confine::filter(&shared.confinement).map_err(start("install the seccomp filter"))?;
        Ok::<_, Error>((fds, signals))
    })();
    let (clones, signals) = match started {
        Ok(s) => s,
        Err(e) => {
            mounted.unmount();
            return Err(e);
        }
    };
    match mounted.dup() {
        Ok(fd) => fs.set_backing_registrar(Arc::new(backing::Backing(fd))),
        Err(e) => warn!("passthrough: no descriptor for backing files ({e}): none is used"),
    }
    let server = Arc::new(Server::new(fs.clone(), shared.max_pages).max_write(shared.max_write));
    if let Some(listener) = ctl {
        let host = Arc::new(crate::ctl::HostPid {
            fs: fs.clone(),
            pid: std::process::id(),
        });
        if let Err(e) = crate::ctl::server::spawn(listener, None, host) {
            warn!("ctl: cannot start the control socket's thread: {e}");
        }
    }
    reload.spawn(fs);
    // The callers' umask rules from here on (requests carry it).
    crate::sys::thread::set_umask(0);
    let (tx, ended) = mpsc::channel();
    let mut fds = vec![mounted.into_fd()];
    fds.extend(clones);
    info!(
        "mounted on {} ({} readers, up to {} pages a request)",
        at.display(),
        fds.len(),
        conn.max_pages
    );
    spawn_readers(fds, &server, conn, &tx)?;
    spawn_signal_thread(signals, unmounter.clone(), tx)?;
    if let Some(r) = ready {
        if let Err(e) = r.serving() {
            warn!("cannot tell the starting process the mount is served: {e}");
        }
    }
    match ended.recv() {
        Ok(Ended::Unmounted) | Err(_) => {
            info!("{} unmounted", at.display());
            Ok(())
        }
        Ok(Ended::Signal(sig)) => {
            info!("signal {sig}: {} detached", at.display());
            Ok(())
        }
        Ok(Ended::Failed(source)) => {
            let _ = unmounter.detach();
            Err(Error::Device { source })
        }
    }
}

/// One reader thread per descriptor of the mount (`fuse-N`), each serving requests until
/// the mount goes, then saying how it ended on `tx`.
fn spawn_readers(
    fds: Vec<std::os::fd::OwnedFd>,
    server: &Arc<Server<UnionFs>>,
    conn: Device,
    tx: &mpsc::Sender<Ended>,
) -> Result<(), Error> {
    for (i, fd) in fds.into_iter().enumerate() {
        let (server, tx) = (server.clone(), tx.clone());
        std::thread::Builder::new()
            .name(format!("fuse-{i}"))
            .spawn(move || {
                let end = match reader::serve(&server, &fd, conn) {
                    Ok(()) => Ended::Unmounted,
                    Err(e) => Ended::Failed(e),
                };
                let _ = tx.send(end);
            })
            .map_err(start("start a reader thread"))?;
    }
    Ok(())
}

/// The thread that detaches the mount on SIGTERM or SIGINT and says so on `tx`.
fn spawn_signal_thread(
    mut signals: Signals,
    detach: Arc<unmount::Unmounter>,
    tx: mpsc::Sender<Ended>,
) -> Result<(), Error> {
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                if let Err(e) = detach.detach() {
                    warn!("cannot unmount: {e}");
                }
                let _ = tx.send(Ended::Signal(sig));
            }
        })
        .map_err(start("start the signal thread"))?;
    Ok(())
}
