//! Moving a backend's device state as QEMU does for a migration or a snapshot
//! (VHOST_USER_PROTOCOL_F_DEVICE_STATE): stop the rings, hand the backend one end of a
//! channel with SET_DEVICE_STATE_FD, carry the bytes, then ask CHECK_DEVICE_STATE whether the
//! transfer worked. The bytes are the backend's own; nothing here looks inside them. Connect
//! with [`ConnectOptions::device_state`](crate::ConnectOptions::device_state).

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;

use vhost::VhostBackend;
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

use crate::device::Device;
use crate::error::{Error, Result};

/// `VHOST_USER_SET_DEVICE_STATE_FD`.
const SET_DEVICE_STATE_FD: u32 = 42;
/// `VHOST_USER_CHECK_DEVICE_STATE`.
const CHECK_DEVICE_STATE: u32 = 43;
/// Header flags: protocol version 1.
const VERSION_1: u32 = 0x1;
/// The transfer's direction: from the backend.
const SAVE: u32 = 0;
/// ... into the backend.
const LOAD: u32 = 1;
/// The migration phase: the device is stopped (the only one QEMU uses).
const STOPPED: u32 = 0;

impl Device {
    /// Stops every ring (GET_VRING_BASE, as QEMU before a save); each ring's next available
    /// index. The device takes no request afterwards.
    pub fn stop_rings(&mut self) -> Result<Vec<u32>> {
        let n = self.queues.len();
        let fe = self.frontend_mut();
        let mut bases = Vec::new();
        for i in 0..n {
            bases.push(
                fe.get_vring_base(i)
                    .map_err(Error::vhost("GET_VRING_BASE"))?,
            );
        }
        Ok(bases)
    }

    /// The backend's device state (call [`Device::stop_rings`] first, as QEMU does).
    pub fn save_state(&mut self) -> Result<Vec<u8>> {
        let (ours, theirs) = UnixStream::pair().map_err(Error::io("socketpair"))?;
        self.set_device_state_fd(SAVE, theirs)?;
        let mut bytes = Vec::new();
        (&ours)
            .read_to_end(&mut bytes)
            .map_err(Error::io("reading the device state"))?;
        self.check_device_state()?;
        Ok(bytes)
    }

    /// Makes `bytes` the backend's device state (a destination before its rings start).
    pub fn load_state(&mut self, bytes: &[u8]) -> Result<()> {
        let (ours, theirs) = UnixStream::pair().map_err(Error::io("socketpair"))?;
        self.set_device_state_fd(LOAD, theirs)?;
        let wrote = (&ours).write_all(bytes);
        drop(ours);
        // The backend's verdict first: a backend that refuses may close its end early.
        self.check_device_state()?;
        wrote.map_err(Error::io("writing the device state"))
    }

    /// SET_DEVICE_STATE_FD with `channel` (which the backend now owns).
    fn set_device_state_fd(&mut self, direction: u32, channel: UnixStream) -> Result<()> {
        let mut body = direction.to_le_bytes().to_vec();
        body.extend_from_slice(&STOPPED.to_le_bytes());
        let sock = self.control()?;
        let msg = message(SET_DEVICE_STATE_FD, &body);
        sock.send_with_fd(&msg[..], channel.as_raw_fd())
            .map_err(|e| Error::io("SET_DEVICE_STATE_FD")(e.into()))?;
        drop(channel);
        match reply_u64(sock, SET_DEVICE_STATE_FD)? {
            // Bit 8: no descriptor comes back (the backend uses ours).
            0x100 => Ok(()),
            v => Err(Error::BadReply(format!(
                "SET_DEVICE_STATE_FD answered {v:#x}"
            ))),
        }
    }

    /// CHECK_DEVICE_STATE: whether the transfer worked.
    fn check_device_state(&mut self) -> Result<()> {
        let sock = self.control()?;
        let msg = message(CHECK_DEVICE_STATE, &[]);
        let sent = sock
            .send_with_fds(&[&msg[..]], &[])
            .map_err(|e| Error::io("CHECK_DEVICE_STATE")(e.into()))?;
        if sent != msg.len() {
            return Err(Error::BadReply("CHECK_DEVICE_STATE sent in part".into()));
        }
        match reply_u64(sock, CHECK_DEVICE_STATE)? {
            0 => Ok(()),
            v => Err(Error::BadReply(format!(
                "CHECK_DEVICE_STATE answered {v}: the backend failed the transfer"
            ))),
        }
    }

    /// The control connection, for the messages the vhost crate does not send.
    fn control(&mut self) -> Result<Control> {
        let fe = self.frontend_mut();
        // A round trip first: every message the vhost crate sent has been answered.
        fe.get_features().map_err(Error::vhost("GET_FEATURES"))?;
        Ok(Control(fe.as_raw_fd()))
    }
}

/// The frontend's control socket, borrowed for one message and its reply (the vhost crate
/// reads nothing meanwhile: the device is `&mut`).
#[derive(Clone, Copy)]
struct Control(RawFd);

impl ScmSocket for Control {
    fn socket_fd(&self) -> RawFd {
        self.0
    }
}

/// A vhost-user message: header (request, flags, size) and body.
fn message(request: u32, body: &[u8]) -> Vec<u8> {
    let mut out = request.to_le_bytes().to_vec();
    out.extend_from_slice(&VERSION_1.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// Reads the reply to `request`, a u64 (any descriptor sent along is closed).
fn reply_u64(sock: Control, request: u32) -> Result<u64> {
    let mut reply = [0u8; 20];
    let mut got = 0;
    while got < reply.len() {
        let (n, _fd) = sock
            .recv_with_fd(&mut reply[got..])
            .map_err(|e| Error::io("reading a vhost-user reply")(e.into()))?;
        if n == 0 {
            return Err(Error::BadReply("the backend hung up".into()));
        }
        got += n;
    }
    let word = |i: usize| u32::from_le_bytes(reply[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
    if word(0) != request || word(2) != 8 {
        return Err(Error::BadReply(format!(
            "reply {} of {} bytes to request {request}",
            word(0),
            word(2)
        )));
    }
    Ok(u64::from_le_bytes(reply[12..].try_into().expect("8 bytes")))
}
