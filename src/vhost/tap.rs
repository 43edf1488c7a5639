//! The front-end tap: the vhost-user handler is served through a socket of the daemon's
//! own, and two threads carry whole messages (with their descriptors) between it and the
//! front-end's connection, noting on the way what the front-end set up ([`Frontend`]).
//! Only the control messages pass here (the requests travel in guest memory and eventfds),
//! so this costs nothing per request. It is what lets a running session be handed to a new
//! daemon: the tap can stop between two messages, knows what to tell the new daemon's
//! handler, and the front-end's connection is a descriptor like any other.

use std::io;
use std::net::Shutdown;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use log::{debug, warn};

use super::frontend::{req, Frontend, Message, REPLY, VERSION};
use crate::sync::LockRecover;
use crate::sys::uds;

/// How long a pause waits for the message being carried, and for the handler's answer to
/// the probe that shows it is idle.
const PAUSE_LIMIT: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Ctl {
    /// Stop carrying front-end messages after the one in hand.
    pause: bool,
    /// The front-end → handler thread is stopped between messages.
    paused: bool,
    /// The session went to another daemon: carry nothing more, close nothing.
    retired: bool,
    /// A probe was sent to the handler (false) and answered (true).
    probe: Option<bool>,
}

/// Carries messages between the front-end and this daemon's vhost-user handler.
pub struct Tap {
    front: UnixStream,
    inner: UnixStream,
    state: Mutex<Frontend>,
    ctl: Mutex<Ctl>,
    changed: Condvar,
    /// An eventfd that wakes the front-end reader for a pause.
    wake: OwnedFd,
}

impl Tap {
    /// A tap between `front` (the front-end's connection) and `inner` (connected to the
    /// handler), with what the front-end set up so far.
    pub fn new(front: UnixStream, inner: UnixStream, state: Frontend) -> io::Result<Arc<Tap>> {
        let wake = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
        )?;
        Ok(Arc::new(Tap {
            front,
            inner,
            state: Mutex::new(state),
            ctl: Mutex::default(),
            changed: Condvar::new(),
            wake,
        }))
    }

    /// Starts the two threads.
    pub fn start(self: &Arc<Self>) -> io::Result<()> {
        let t = self.clone();
        std::thread::Builder::new()
            .name("vhost-user-in".into())
            .spawn(move || t.carry_in())?;
        let t = self.clone();
        std::thread::Builder::new()
            .name("vhost-user-out".into())
            .spawn(move || t.carry_out())?;
        Ok(())
    }

    /// The front-end's connection.
    pub fn front(&self) -> &UnixStream {
        &self.front
    }

    /// What the front-end set up.
    pub fn state(&self) -> MutexGuard<'_, Frontend> {
        self.state.locked()
    }

    /// Front-end → handler, message by message, until the front-end hangs up.
    fn carry_in(&self) {
        loop {
            {
                let mut c = self.ctl.locked();
                if c.pause {
                    c.paused = true;
                    self.changed.notify_all();
                    while c.pause && !c.retired {
                        c = crate::sync::recover(self.changed.wait(c));
                    }
                    if c.retired {
                        return;
                    }
                    c.paused = false;
                }
            }
            match uds::wait_readable(self.front.as_fd(), self.wake.as_fd()) {
                Ok(true) => {}
                Ok(false) => {
                    let mut sink = [0u8; 8];
                    let _ = rustix::io::read(&self.wake, &mut sink);
                    continue;
                }
                Err(e) => {
                    warn!("vhost-user: cannot wait for the front-end: {e}");
                    break;
                }
            }
            match Message::read(&self.front) {
                Ok(Some(m)) => {
                    debug!("vhost-user: front-end request {}", m.request);
                    self.state.locked().record(&m);
                    if let Err(e) = m.write(&self.inner) {
                        warn!("vhost-user: cannot pass request {} on: {e}", m.request);
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    warn!("vhost-user: bad message from the front-end: {e}");
                    break;
                }
            }
        }
        // The handler sees the front-end hang up, and the session ends.
        let _ = self.inner.shutdown(Shutdown::Both);
    }

    /// Handler → front-end (replies), except the probe's answer.
    fn carry_out(&self) {
        loop {
            let m = match Message::read(&self.inner) {
                Ok(Some(m)) => m,
                Ok(None) => break,
                Err(e) => {
                    warn!("vhost-user: bad message from the handler: {e}");
                    break;
                }
            };
            if m.request == req::GET_FEATURES && m.flags & REPLY != 0 {
                let mut c = self.ctl.locked();
                if c.probe == Some(false) {
                    c.probe = Some(true);
                    self.changed.notify_all();
                    continue;
                }
            }
            if let Err(e) = m.write(&self.front) {
                warn!("vhost-user: cannot reply to the front-end: {e}");
                break;
            }
        }
        if !self.ctl.locked().retired {
            let _ = self.front.shutdown(Shutdown::Both);
        }
    }

    /// Stops carrying front-end messages, between two of them, and makes sure the handler
    /// has answered every message carried so far (a probe, GET_FEATURES, comes back after
    /// all of them): from here the front-end's connection may change hands.
    pub fn pause(&self) -> io::Result<()> {
        let deadline = Instant::now() + PAUSE_LIMIT;
        let mut c = self.ctl.locked();
        c.pause = true;
        uds::kick(self.wake.as_fd())?;
        c = self.wait(c, deadline, |c| c.paused)?;
        c.probe = Some(false);
        drop(c);
        Message {
            request: req::GET_FEATURES,
            flags: VERSION,
            body: vec![],
            fds: vec![],
        }
        .write(&self.inner)?;
        let mut c = self.wait(self.ctl.locked(), deadline, |c| c.probe == Some(true))?;
        c.probe = None;
        Ok(())
    }

    fn wait<'a>(
        &self,
        mut c: MutexGuard<'a, Ctl>,
        deadline: Instant,
        done: impl Fn(&Ctl) -> bool,
    ) -> io::Result<MutexGuard<'a, Ctl>> {
        while !done(&c) {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                c.pause = false;
                c.probe = None;
                self.changed.notify_all();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the vhost-user connection did not come to rest",
                ));
            };
            c = crate::sync::recover(self.changed.wait_timeout(c, left)).0;
        }
        Ok(c)
    }

    /// Carries front-end messages again (the upgrade did not happen).
    pub fn resume(&self) {
        let mut c = self.ctl.locked();
        c.pause = false;
        self.changed.notify_all();
    }

    /// The front-end's connection belongs to another daemon now: this tap reads and closes
    /// nothing of it any more.
    pub fn retire(&self) {
        let mut c = self.ctl.locked();
        c.retired = true;
        self.changed.notify_all();
    }
}
