//! SIGHUP re-reads `--config` into the running union (through [`crate::config::runtime::reload`]:
//! all or nothing, logged). The file's directory is opened before the sandbox, so a sandboxed
//! daemon can still read the file, even after an editor replaced it. Branch directories must be
//! opened where the host's paths are seen: in the namespace sandbox the supervisor, outside it,
//! catches SIGHUP, reads the file, expands its branch globs, opens the directories and sends
//! all of it to the serving child over a channel made before the fork ([`Forwarder`]), as
//! `ctl` sends the directories of a branch edit. Never acts on a guest request.

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use log::{info, warn};
use rustix::fs::{Mode, OFlags};
use signal_hook::consts::SIGHUP;
use signal_hook::iterator::Signals;

use crate::fs::UnionFs;

/// SIGHUP caught, and where the configuration file is.
pub struct Reload {
    signals: Option<Signals>,
    file: Option<ConfigFile>,
    /// In the namespace sandbox's child: where the supervisor sends what it read.
    channel: Option<UnixStream>,
}

struct ConfigFile {
    dir: OwnedFd,
    name: OsString,
    path: PathBuf,
}

impl Reload {
    /// Opens `config`'s directory: call before the sandbox.
    pub fn open(config: Option<&Path>) -> std::io::Result<Self> {
        let file = match config {
            None => None,
            Some(path) => {
                let name = path
                    .file_name()
                    .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EISDIR))?
                    .to_owned();
                let parent = match path.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p,
                    _ => Path::new("."),
                };
                let dir = rustix::fs::open(
                    parent,
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                Some(ConfigFile {
                    dir,
                    name,
                    path: path.to_path_buf(),
                })
            }
        };
        Ok(Reload {
            signals: None,
            file,
            channel: None,
        })
    }

    /// Before the namespace sandbox's fork: a channel from the supervisor to the serving
    /// child, if there is a `--config` to re-read. The child keeps this end (see
    /// [`Reload::spawn`]); the returned end goes to the supervisor ([`Forwarder::pass_on`]).
    pub fn channel(&mut self) -> std::io::Result<Option<Forwarder>> {
        let Some(f) = &self.file else {
            return Ok(None);
        };
        let (ours, theirs) = UnixStream::pair()?;
        self.channel = Some(ours);
        Ok(Some(Forwarder {
            stream: theirs,
            path: f.path.clone(),
            broken: Default::default(),
        }))
    }

    /// Whether there is a `--config` to re-read.
    pub fn has_file(&self) -> bool {
        self.file.is_some()
    }

    /// In the supervisor after the fork: the child's end is not for it.
    pub fn drop_channel(&mut self) {
        self.channel = None;
    }

    /// Catches SIGHUP from now on (it would end the daemon otherwise): call in the serving
    /// process (the sandbox's supervisor forwards SIGHUP to it), before any thread.
    pub fn catch(&mut self) -> std::io::Result<()> {
        self.signals = Some(Signals::new([SIGHUP])?);
        Ok(())
    }

    /// Re-reads the file on every SIGHUP, on a thread of its own, for as long as the daemon
    /// runs; in the namespace sandbox, applies what the supervisor sends on another.
    pub fn spawn(self, fs: Arc<UnionFs>) {
        if let Some(channel) = self.channel {
            let fs = fs.clone();
            let r = std::thread::Builder::new()
                .name("reload".into())
                .spawn(move || receive(&channel, &fs));
            if let Err(e) = r {
                warn!("SIGHUP: cannot start the thread that hears the supervisor ({e})");
            }
        }
        let Some(mut signals) = self.signals else {
            return;
        };
        let file = self.file;
        let r = std::thread::Builder::new()
            .name("sighup".into())
            .spawn(move || {
                for _ in signals.forever() {
                    match &file {
                        None => info!("SIGHUP: no --config to re-read"),
                        Some(f) => f.apply(&fs),
                    }
                }
            });
        if let Err(e) = r {
            warn!("SIGHUP: cannot start its thread ({e}); --config is not re-read");
        }
    }
}

impl ConfigFile {
    fn apply(&self, fs: &UnionFs) {
        let shown = self.path.display().to_string();
        let text = rustix::fs::openat(
            &self.dir,
            &self.name,
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(std::io::Error::from)
        .and_then(|fd| {
            let mut s = String::new();
            std::fs::File::from(fd).read_to_string(&mut s)?;
            Ok(s)
        });
        let text = match text {
            Ok(t) => t,
            Err(e) => {
                warn!("SIGHUP: cannot read {shown}: {e}; nothing changed");
                return;
            }
        };
        match crate::config::runtime::reload(fs, &shown, &text) {
            Ok(change) => info!("SIGHUP: re-read {shown}: {change}"),
            Err(e) => warn!("SIGHUP: {e}; nothing changed"),
        }
    }
}

/// The environment variable telling a re-executed supervisor its end of the channel and the
/// config file: `FD PATH`.
pub const FORWARDER_ENV: &str = "UNION_VIRTIOFSD_SUPERVISE_RELOAD";

/// The supervisor's end of the channel to the serving child: on SIGHUP it reads `--config`,
/// expands and opens its branches on the host, and sends the text and the directories.
#[derive(Debug)]
pub struct Forwarder {
    stream: UnixStream,
    path: PathBuf,
    /// The channel broke (a child that does not read): SIGHUP goes to the child again.
    broken: std::cell::Cell<bool>,
}

/// How long the supervisor may wait for the child to take a re-read: the same loop forwards
/// SIGTERM, which must not wait behind a child that stopped reading.
const SEND_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

impl Forwarder {
    /// For [`crate::sys::sandbox::exec_supervisor`]: the environment entry that hands this
    /// end to the new image (its descriptor made to survive the exec).
    pub fn pass_on(&self) -> std::io::Result<(&'static str, OsString)> {
        rustix::io::fcntl_setfd(self.stream.as_fd(), rustix::io::FdFlags::empty())?;
        let mut v = OsString::from(format!("{} ", self.stream.as_raw_fd()));
        v.push(&self.path);
        Ok((FORWARDER_ENV, v))
    }

    /// In a re-executed supervisor: the end [`Forwarder::pass_on`] handed over, if any.
    pub fn from_env() -> Option<Self> {
        use std::os::unix::ffi::OsStrExt;
        let v = std::env::var_os(FORWARDER_ENV)?;
        let bytes = v.as_bytes();
        let space = bytes.iter().position(|b| *b == b' ')?;
        let fd: i32 = std::str::from_utf8(&bytes[..space]).ok()?.parse().ok()?;
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(&bytes[space + 1..]));
        let stream = crate::sys::fd::adopt_stream(fd).ok()?;
        Some(Forwarder {
            stream,
            path,
            broken: Default::default(),
        })
    }

    /// On SIGHUP: reads the file, finds its branches and opens them, and sends the lot (or
    /// why not) to the child, which applies and logs it. `false` if the channel is broken
    /// (the child took nothing within `SEND_PATIENCE`): the caller then sends the child
    /// SIGHUP, and it re-reads the file itself (adding no branch it cannot see).
    pub fn forward(&self) -> bool {
        if self.broken.get() {
            return false;
        }
        let sent = self
            .stream
            .set_write_timeout(Some(SEND_PATIENCE))
            .and_then(|()| self.send());
        if sent.is_err() {
            // A frame may be half sent: the child must not read on from the middle of it.
            let _ = self.stream.shutdown(std::net::Shutdown::Write);
            self.broken.set(true);
        }
        true
    }

    /// Reads, prepares and sends one re-read.
    fn send(&self) -> std::io::Result<()> {
        let shown = self.path.display().to_string();
        let (text, host) = match std::fs::read_to_string(&self.path) {
            Ok(t) => {
                let h = crate::config::runtime::host_branches(&shown, &t).map_err(|e| e.message);
                (t, h)
            }
            Err(e) => (String::new(), Err(format!("cannot read {shown}: {e}"))),
        };
        let (tail, dirs) = match host {
            Ok(h) if h.dirs.len() > crate::sys::uds::MAX_FDS => (
                format!(
                    "err\0{shown}: {} branches (at most {} in a re-read)",
                    h.dirs.len(),
                    crate::sys::uds::MAX_FDS
                ),
                Vec::new(),
            ),
            Ok(h) => (
                format!("ok\0{}", crate::union::edit::show(&h.branches)),
                h.dirs,
            ),
            Err(e) => (format!("err\0{e}"), Vec::new()),
        };
        let mut payload = format!("{shown}\0").into_bytes();
        if text.contains('\0') {
            payload.extend_from_slice(b"\0err\0");
            payload.extend_from_slice(format!("{shown}: a NUL byte in the file").as_bytes());
        } else {
            payload.extend_from_slice(text.as_bytes());
            payload.push(0);
            payload.extend_from_slice(tail.as_bytes());
        }
        let (bytes, dirs) = match super::proto::frame(&payload) {
            Ok(b) => (b, dirs),
            Err(e) => {
                let short = format!("{shown}\0\0err\0{shown}: {e}");
                (
                    super::proto::frame(short.as_bytes()).map_err(std::io::Error::other)?,
                    Vec::new(),
                )
            }
        };
        let fds: Vec<_> = dirs.iter().map(|d| d.as_fd()).collect();
        crate::sys::uds::send_with_fds(&self.stream, &bytes, &fds)
    }
}

/// The child's half: applies each re-read the supervisor sends, until it hangs up.
fn receive(channel: &UnixStream, fs: &UnionFs) {
    loop {
        let mut header = [0u8; super::proto::HEADER_LEN];
        let mut fds = match crate::sys::uds::recv_exact_with_fds(channel, &mut header) {
            Ok(Some(fds)) => fds,
            Ok(None) => return,
            Err(e) => {
                warn!("SIGHUP: the channel from the supervisor failed: {e}");
                return;
            }
        };
        let Ok(len) = super::proto::frame_len(header) else {
            warn!("SIGHUP: an oversized message from the supervisor");
            return;
        };
        let mut payload = vec![0u8; len];
        match crate::sys::uds::recv_exact_with_fds(channel, &mut payload) {
            Ok(Some(more)) => fds.extend(more),
            Ok(None) => return,
            Err(e) => {
                warn!("SIGHUP: the channel from the supervisor failed: {e}");
                return;
            }
        }
        apply_forwarded(fs, &payload, fds);
    }
}

/// Applies one message of [`Forwarder::forward`]: `FILE\0TEXT\0ok\0BRANCHES` or
/// `FILE\0TEXT\0err\0WHY`.
fn apply_forwarded(fs: &UnionFs, payload: &[u8], dirs: Vec<OwnedFd>) {
    let text = String::from_utf8_lossy(payload);
    let mut fields = text.splitn(4, '\0');
    let (Some(shown), Some(body), Some(status), Some(detail)) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        warn!("SIGHUP: a malformed message from the supervisor");
        return;
    };
    if status != "ok" {
        warn!("SIGHUP: {detail}; nothing changed");
        return;
    }
    let branches = if detail.is_empty() {
        Vec::new()
    } else {
        match crate::union::edit::BranchEdit::parse(&format!("={detail}")) {
            Ok(e) => e.added().to_vec(),
            Err(e) => {
                warn!("SIGHUP: {shown}: {e}; nothing changed");
                return;
            }
        }
    };
    let host = crate::config::runtime::HostBranches { branches, dirs };
    match crate::config::runtime::reload_with(fs, shown, body, Some(host)) {
        Ok(change) => info!("SIGHUP: re-read {shown}: {change}"),
        Err(e) => warn!("SIGHUP: {e}; nothing changed"),
    }
}
