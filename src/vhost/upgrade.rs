//! Upgrade in place: a running daemon hands its vhost-user session to a newly started one
//! (`--upgrade PIDFILE`), without the front-end taking part.
//!
//! The old daemon listens on `<socket>.upgrade` (made next to the socket before the
//! sandbox). The new one, started with the same options, connects there before its own
//! sandbox and says hello. The old daemon then
//! 1. stops carrying front-end messages between two of them, and sees its handler idle;
//! 2. stops popping requests, ends the lock waits, waits until every request popped has been
//!    answered, and saves the session (as for a migration) and each ring's position;
//!    lets go of the guest's host locks;
//! 3. sends it all: the front-end's connection, what the front-end set up (features, guest
//!    memory regions, ring addresses, kick/call/err eventfds: see `frontend.rs`), ring
//!    positions, the session, the listening sockets and the locked pid file.
//!
//! The new daemon loads the session, tells its own handler what the front-end had set up
//! (every step acknowledged), and says it is taking over. Up to here the old daemon takes the
//! session back if the new one gives up or dies: it retakes the locks and pops requests
//! again. Then the old daemon stops watching the rings (its event loops end), the new one
//! kicks every ring once, carries front-end messages, and reports its first answered
//! request; the old daemon exits then.
//!
//! Versions. The frames (a `u32` little-endian length, then one postcard-encoded
//! `ToOld` or `ToNew`) are channel version 1, frozen since commit 1e60aa4:
//! `tests/golden/upgrade-*.bin` hold them as that daemon sent them, and a test decodes and
//! re-encodes them byte for byte. The hello says the channel version; after it, in the same
//! frame, a new daemon appends a `HelloExt` with the device state versions it reads (so the
//! old daemon writes the session in one of them, or refuses in one line) and the channel
//! versions it speaks. A daemon of 1e60aa4 decodes the hello alone (postcard's `from_bytes`
//! leaves the rest alone) and so still hands its session over; a hello without the tail is
//! taken for such a daemon's: device state version 1 only. The tail is append-only: a later
//! daemon adds its own structure after this one.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::frontend::FrontendImage;
use crate::fuse::state::Versions;
use crate::sys::uds;

/// Version of the conversation's frames (both daemons must speak the same): 1 since the
/// first upgrade, frozen (see the module's text).
const VERSION: u32 = 1;
/// Largest message on the channel (a session of millions of nodes).
const MAX_FRAME: usize = 1 << 30;

/// The channel next to the vhost-user socket `socket`.
pub fn channel_path(socket: &Path) -> PathBuf {
    let mut p = socket.as_os_str().to_owned();
    p.push(".upgrade");
    PathBuf::from(p)
}

/// What the new daemon says.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
enum ToOld {
    Hello { version: u32, pid: u32 },
    Taking,
    Answered,
}

/// What a new daemon appends to its hello, in the same frame (none did before device state
/// version 2). Frozen, as the frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct HelloExt {
    /// The device state versions it reads: oldest, newest.
    state: (u32, u32),
    /// The channel versions it speaks: oldest, newest.
    channel: (u32, u32),
}

impl HelloExt {
    /// This daemon's.
    const OURS: HelloExt = HelloExt {
        state: (Versions::OURS.oldest, Versions::OURS.newest),
        channel: (VERSION, VERSION),
    };
}

/// A new daemon's hello, as the old daemon reads it.
#[derive(Debug, PartialEq, Eq)]
struct Hello {
    /// The channel version it says.
    version: u32,
    /// Its pid.
    pid: u32,
    /// The device state versions it reads.
    reads: Versions,
}

/// What the old daemon says.
#[derive(Debug, Serialize, Deserialize)]
enum ToNew {
    Refused(String),
    Handover(Box<Handover>),
    Released,
}

/// The session, minus the descriptors (which travel beside it, in this order: front-end
/// connection, upgrade listener, vhost-user listener if any, pid file if any, then those
/// the front-end image refers to).
#[derive(Debug, Serialize, Deserialize)]
struct Handover {
    pid: u32,
    frontend: FrontendImage,
    bases: Vec<Option<u16>>,
    session: Vec<u8>,
    has_listener: bool,
    has_pid_file: bool,
}

fn send<T: Serialize>(sock: &UnixStream, msg: &T, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let body = postcard::to_stdvec(msg).map_err(io::Error::other)?;
    send_body(sock, &body, fds)
}

/// One frame: `body`'s length, then `body`.
fn send_body(sock: &UnixStream, body: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(body);
    uds::send_with_fds(sock, &frame, fds)
}

/// This daemon's hello frame body: the hello, then its [`HelloExt`].
fn hello_body(pid: u32) -> Vec<u8> {
    let hello = ToOld::Hello {
        version: VERSION,
        pid,
    };
    let mut body = postcard::to_stdvec(&hello).expect("serializing plain data into memory");
    body.extend(postcard::to_stdvec(&HelloExt::OURS).expect("serializing plain data into memory"));
    body
}

/// The hello in a frame body: a [`ToOld::Hello`], then, from a daemon that reads device state
/// version 2 or later, a [`HelloExt`] (anything after it is a later daemon's and left alone).
/// `Ok(None)`: another message.
fn parse_hello(body: &[u8]) -> Result<Option<Hello>, postcard::Error> {
    let (msg, rest) = postcard::take_from_bytes::<ToOld>(body)?;
    let ToOld::Hello { version, pid } = msg else {
        return Ok(None);
    };
    let reads = if rest.is_empty() {
        Versions::FIRST
    } else {
        let (ext, _) = postcard::take_from_bytes::<HelloExt>(rest)?;
        Versions {
            oldest: ext.state.0,
            newest: ext.state.1,
        }
    };
    Ok(Some(Hello {
        version,
        pid,
        reads,
    }))
}

fn recv<T: DeserializeOwned>(sock: &UnixStream) -> io::Result<Option<(T, Vec<OwnedFd>)>> {
    let Some((body, fds)) = recv_frame(sock)? else {
        return Ok(None);
    };
    let msg = postcard::from_bytes(&body).map_err(io::Error::other)?;
    Ok(Some((msg, fds)))
}

/// One frame's body and the descriptors that came with it; None if the peer hung up first.
fn recv_frame(sock: &UnixStream) -> io::Result<Option<(Vec<u8>, Vec<OwnedFd>)>> {
    let mut len = [0u8; 4];
    let Some(mut fds) = uds::recv_exact_with_fds(sock, &mut len)? else {
        return Ok(None);
    };
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::other(format!("a {len}-byte upgrade message")));
    }
    let mut body = vec![0u8; len];
    if len > 0 {
        fds.extend(uds::recv_exact_with_fds(sock, &mut body)?.ok_or(io::ErrorKind::UnexpectedEof)?);
    }
    Ok(Some((body, fds)))
}

/// The old daemon's part: what it does at each step (see the module's text).
pub trait Old {
    /// The tap, once a front-end is connected.
    fn tap(&self) -> Option<std::sync::Arc<super::tap::Tap>>;
    /// Step 2: the session, in the newest device state version the new daemon `reads`, and
    /// the ring positions (rings paused, locks let go).
    fn hand_over(&self, reads: Versions) -> io::Result<(Vec<u8>, Vec<u16>)>;
    /// The new daemon gave up: pop requests again (`released`: retake the locks).
    fn take_back(&self, released: bool);
    /// The new daemon takes over: stop watching the rings.
    fn let_go(&self);
    /// The listening sockets and pid file that go along.
    fn fds(&self) -> io::Result<(UnixListener, Option<UnixListener>, Option<File>)>;
}

/// How one upgrade attempt ended for the old daemon.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The new daemon serves; this one exits.
    HandedOver,
    /// Nothing moved (or everything came back); this one goes on serving.
    Stayed,
}

/// Serves one upgrade request on `sock`.
pub fn serve_one(sock: &UnixStream, old: &dyn Old) -> Outcome {
    let refuse = |why: String| {
        log::warn!("upgrade refused: {why}");
        let _ = send(sock, &ToNew::Refused(why), &[]);
        Outcome::Stayed
    };
    let body = match recv_frame(sock) {
        Ok(Some((body, _))) => body,
        Ok(None) | Err(_) => return Outcome::Stayed,
    };
    let (pid, reads) = match parse_hello(&body) {
        Ok(Some(h)) if h.version == VERSION => (h.pid, h.reads),
        Ok(Some(h)) => {
            return refuse(format!(
                "upgrade channel version {}, this daemon speaks {VERSION}",
                h.version
            ))
        }
        Ok(None) => return Outcome::Stayed,
        Err(e) => return refuse(format!("a hello this daemon cannot read: {e}")),
    };
    log::info!("upgrade: pid {pid} asks for the session (it reads device state {reads})");
    let Some(tap) = old.tap() else {
        return refuse("no front-end is connected yet".into());
    };
    if let Some(why) = tap.state().busy() {
        return refuse(why.into());
    }
    let t = std::time::Instant::now();
    if let Err(e) = tap.pause() {
        tap.resume();
        return refuse(format!(
            "the vhost-user connection does not come to rest: {e}"
        ));
    }
    let give_back = |released: bool| {
        old.take_back(released);
        tap.resume();
        for r in tap.state().rings() {
            if let Some(k) = r.kick().filter(|_| r.running()) {
                let _ = uds::kick(k.as_fd());
            }
        }
    };
    let (session, positions) = match old.hand_over(reads) {
        Ok(x) => x,
        Err(e) => {
            give_back(false);
            return refuse(format!("cannot save the session: {e}"));
        }
    };
    let sent = (|| -> io::Result<()> {
        let (image, frontend_fds) = tap.state().image()?;
        let bases = image
            .rings()
            .iter()
            .enumerate()
            .map(|(i, r)| r.running().then(|| positions.get(i).copied()).flatten())
            .collect();
        let (upgrades, listener, pid_file) = old.fds()?;
        let front = tap.front().try_clone()?;
        let mut fds: Vec<BorrowedFd<'_>> = vec![front.as_fd(), upgrades.as_fd()];
        fds.extend(listener.as_ref().map(|l| l.as_fd()));
        fds.extend(pid_file.as_ref().map(|f| f.as_fd()));
        fds.extend(frontend_fds.iter().map(|f| f.as_fd()));
        let h = Handover {
            pid: std::process::id(),
            frontend: image,
            bases,
            session,
            has_listener: listener.is_some(),
            has_pid_file: pid_file.is_some(),
        };
        send(sock, &ToNew::Handover(Box::new(h)), &fds)
    })();
    if let Err(e) = sent {
        give_back(true);
        log::warn!("upgrade: cannot send the session: {e}; serving on");
        return Outcome::Stayed;
    }
    match recv::<ToOld>(sock) {
        Ok(Some((ToOld::Taking, _))) => {}
        other => {
            give_back(true);
            let why = match other {
                Err(e) => e.to_string(),
                _ => "it hung up".into(),
            };
            log::warn!("upgrade: the new daemon gave up ({why}); serving on");
            return Outcome::Stayed;
        }
    }
    tap.retire();
    old.let_go();
    if let Err(e) = send(sock, &ToNew::Released, &[]) {
        log::error!("upgrade: cannot tell the new daemon it may start: {e}");
    }
    log::info!(
        "upgrade: pid {pid} took the session over after {:.1} ms; waiting for its first answer",
        t.elapsed().as_secs_f64() * 1e3
    );
    match recv::<ToOld>(sock) {
        Ok(Some((ToOld::Answered, _))) => {
            log::info!("upgrade: pid {pid} answered its first request; exiting");
        }
        _ => log::error!("upgrade: pid {pid} hung up before it answered a request"),
    }
    Outcome::HandedOver
}

/// What the new daemon received.
pub struct Received {
    /// The channel to the old daemon (for the rest of the conversation).
    channel: UnixStream,
    /// The old daemon's pid.
    pub old_pid: u32,
    /// The front-end's connection.
    pub front: UnixStream,
    /// `<socket>.upgrade`, for the next upgrade.
    pub upgrades: Option<UnixListener>,
    /// The vhost-user listener, if the old daemon had one.
    pub listener: Option<UnixListener>,
    /// The pid file (still locked: the lock goes with the descriptor).
    pub pid_file: Option<File>,
    frontend: FrontendImage,
    bases: Vec<Option<u16>>,
    /// The session (device state format, `state/`).
    pub session: Vec<u8>,
    fds: Vec<OwnedFd>,
}

/// Errors of the new daemon's side.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--upgrade` names no `<socket>.pid`.
    #[error("--upgrade {0}: expected the running daemon's <socket>.pid")]
    NotPidFile(PathBuf),
    /// No daemon answers on the channel.
    #[error("cannot reach the running daemon at {path}: {source}")]
    Connect {
        /// The channel.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The running daemon said no.
    #[error("the running daemon refused the upgrade: {0}")]
    Refused(String),
    /// The conversation broke.
    #[error("upgrade: {0}")]
    Io(#[from] io::Error),
}

/// Connects to the daemon whose pid file is `pid_file` and receives its session.
pub fn receive(pid_file: &Path) -> Result<Received, Error> {
    let name = pid_file.as_os_str().to_string_lossy();
    let Some(socket) = name.strip_suffix(".pid") else {
        return Err(Error::NotPidFile(pid_file.to_owned()));
    };
    let path = channel_path(Path::new(socket));
    let channel = UnixStream::connect(&path).map_err(|source| Error::Connect {
        path: path.clone(),
        source,
    })?;
    send_body(&channel, &hello_body(std::process::id()), &[])?;
    // Its pid as this side sees it (it may be 1 in its own pid namespace).
    let seen = uds::peer(&channel).map(|(pid, _)| pid).unwrap_or(0);
    let (msg, fds) =
        recv::<ToNew>(&channel)?.ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
    let h = match msg {
        ToNew::Handover(h) => h,
        ToNew::Refused(why) => return Err(Error::Refused(why)),
        ToNew::Released => return Err(io::Error::other("out of order").into()),
    };
    let mut fds = fds.into_iter();
    let mut next = || {
        fds.next()
            .ok_or_else(|| io::Error::other("descriptors missing"))
    };
    let front = UnixStream::from(next()?);
    let upgrades = Some(UnixListener::from(next()?));
    let listener = if h.has_listener {
        Some(UnixListener::from(next()?))
    } else {
        None
    };
    let pid_file = if h.has_pid_file {
        Some(File::from(next()?))
    } else {
        None
    };
    let h = *h;
    Ok(Received {
        channel,
        old_pid: if seen != 0 { seen } else { h.pid },
        front,
        upgrades,
        listener,
        pid_file,
        frontend: h.frontend,
        bases: h.bases,
        session: h.session,
        fds: fds.collect(),
    })
}

impl Received {
    /// Tells this daemon's handler (at the other end of `inner`) what the front-end had set
    /// up; the tap's record of it is returned.
    pub fn replay(&self, inner: &UnixStream) -> io::Result<super::frontend::Frontend> {
        let mut state = super::frontend::Frontend::default();
        self.frontend
            .replay(inner, &self.fds, &self.bases, &mut state)?;
        Ok(state)
    }

    /// Says this daemon takes over, and waits until the old one stopped watching the rings.
    pub fn take(&self) -> io::Result<()> {
        send(&self.channel, &ToOld::Taking, &[])?;
        match recv::<ToNew>(&self.channel)? {
            Some((ToNew::Released, _)) => Ok(()),
            _ => Err(io::Error::other("the old daemon did not let go")),
        }
    }

    /// The channel, to report the first answer on ([`answered`]).
    pub fn channel(&self) -> io::Result<UnixStream> {
        self.channel.try_clone()
    }
}

/// Tells the old daemon this one answered a request (it exits).
pub fn answered(channel: &UnixStream) -> io::Result<()> {
    send(channel, &ToOld::Answered, &[])
}

#[cfg(test)]
#[path = "upgrade_tests.rs"]
mod tests;
