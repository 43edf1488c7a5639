//! What the front-end (QEMU) has told the device over vhost-user, kept so that a new daemon
//! can be told the same (an upgrade in place): the features, the guest memory regions with
//! their descriptors, and each ring's size, addresses, enable state and eventfds. Recorded
//! from the messages the tap forwards; replayed, message by message, into the new daemon's
//! own vhost-user handler. Knows the vhost-user wire format, nothing about files.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;

use serde::{Deserialize, Serialize};

use crate::sys::uds;

/// A vhost-user message header: request, flags, payload size (little-endian u32s).
pub const HDR_LEN: usize = 12;
/// Largest payload accepted (the crate's MAX_MSG_SIZE).
pub const MAX_BODY: usize = 0x1000;

/// Header flag: version 1 (every message).
pub const VERSION: u32 = 0x1;
/// Header flag: this is a reply.
pub const REPLY: u32 = 0x4;
/// Header flag: the sender wants an ack (REPLY_ACK).
pub const NEED_REPLY: u32 = 0x8;

/// Front-end request codes (vhost-user.rst).
pub mod req {
    #![allow(missing_docs)]
    pub const GET_FEATURES: u32 = 1;
    pub const SET_FEATURES: u32 = 2;
    pub const SET_OWNER: u32 = 3;
    pub const RESET_OWNER: u32 = 4;
    pub const SET_MEM_TABLE: u32 = 5;
    pub const SET_LOG_BASE: u32 = 6;
    pub const SET_VRING_NUM: u32 = 8;
    pub const SET_VRING_ADDR: u32 = 9;
    pub const SET_VRING_BASE: u32 = 10;
    pub const GET_VRING_BASE: u32 = 11;
    pub const SET_VRING_KICK: u32 = 12;
    pub const SET_VRING_CALL: u32 = 13;
    pub const SET_VRING_ERR: u32 = 14;
    pub const GET_PROTOCOL_FEATURES: u32 = 15;
    pub const SET_PROTOCOL_FEATURES: u32 = 16;
    pub const SET_VRING_ENABLE: u32 = 18;
    pub const RESET_DEVICE: u32 = 34;
    pub const ADD_MEM_REG: u32 = 37;
    pub const REM_MEM_REG: u32 = 38;
}

/// VHOST_USER_F_PROTOCOL_FEATURES in the virtio feature bits.
const PROTOCOL_FEATURES: u64 = 1 << 30;
/// VHOST_F_LOG_ALL: the front-end logs dirty memory (a migration runs).
const LOG_ALL: u64 = 1 << 26;
/// VHOST_USER_PROTOCOL_F_REPLY_ACK.
const P_REPLY_ACK: u64 = 1 << 3;
/// VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS.
const P_MEM_SLOTS: u64 = 1 << 15;
/// The vring-fd payload's "no descriptor" bit.
const NO_FD: u64 = 1 << 8;

/// One message as read off a socket.
pub struct Message {
    /// Request code.
    pub request: u32,
    /// Header flags.
    pub flags: u32,
    /// Payload.
    pub body: Vec<u8>,
    /// Descriptors that came with it.
    pub fds: Vec<OwnedFd>,
}

impl Message {
    /// Reads one message; `Ok(None)` when the peer closed between messages.
    pub fn read(sock: &UnixStream) -> io::Result<Option<Message>> {
        let mut hdr = [0u8; HDR_LEN];
        let Some(mut fds) = uds::recv_exact_with_fds(sock, &mut hdr)? else {
            return Ok(None);
        };
        let word =
            |i: usize| u32::from_le_bytes(hdr[i * 4..i * 4 + 4].try_into().unwrap_or([0; 4]));
        let (request, flags, size) = (word(0), word(1), word(2) as usize);
        if size > MAX_BODY {
            return Err(io::Error::other(format!(
                "vhost-user message {request} with a {size}-byte payload"
            )));
        }
        let mut body = vec![0u8; size];
        if size > 0 {
            match uds::recv_exact_with_fds(sock, &mut body)? {
                Some(more) => fds.extend(more),
                None => return Err(io::ErrorKind::UnexpectedEof.into()),
            }
        }
        Ok(Some(Message {
            request,
            flags,
            body,
            fds,
        }))
    }

    /// Writes the message (header, payload and descriptors in one go).
    pub fn write(&self, sock: &UnixStream) -> io::Result<()> {
        let mut bytes = Vec::with_capacity(HDR_LEN + self.body.len());
        bytes.extend_from_slice(&self.request.to_le_bytes());
        bytes.extend_from_slice(&self.flags.to_le_bytes());
        bytes.extend_from_slice(&(self.body.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&self.body);
        let fds: Vec<_> = self.fds.iter().map(|f| f.as_fd()).collect();
        uds::send_with_fds(sock, &bytes, &fds)
    }

    fn u64_at(&self, at: usize) -> Option<u64> {
        Some(u64::from_le_bytes(
            self.body.get(at..at + 8)?.try_into().ok()?,
        ))
    }

    fn u32_at(&self, at: usize) -> Option<u32> {
        Some(u32::from_le_bytes(
            self.body.get(at..at + 4)?.try_into().ok()?,
        ))
    }
}

/// A guest memory region as SET_MEM_TABLE / ADD_MEM_REG describe it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    /// Guest physical address.
    pub gpa: u64,
    /// Size in bytes.
    pub size: u64,
    /// The front-end's own address of it (ring addresses are given in these).
    pub user_addr: u64,
    /// Offset of the region in its descriptor.
    pub mmap_offset: u64,
}

impl Region {
    fn parse(b: &[u8]) -> Option<Region> {
        let q = |i: usize| {
            Some(u64::from_le_bytes(
                b.get(i * 8..i * 8 + 8)?.try_into().ok()?,
            ))
        };
        Some(Region {
            gpa: q(0)?,
            size: q(1)?,
            user_addr: q(2)?,
            mmap_offset: q(3)?,
        })
    }

    fn bytes(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, v) in [self.gpa, self.size, self.user_addr, self.mmap_offset]
            .iter()
            .enumerate()
        {
            out[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        out
    }
}

/// One ring as the front-end set it up.
#[derive(Default)]
pub struct Ring {
    num: Option<u32>,
    /// SET_VRING_ADDR's payload (index, flags, four addresses).
    addr: Option<Vec<u8>>,
    enabled: bool,
    kick: Option<OwnedFd>,
    call: Option<OwnedFd>,
    err: Option<OwnedFd>,
}

impl Ring {
    /// The ring runs: it has a kick and a call descriptor (GET_VRING_BASE took them away).
    pub fn running(&self) -> bool {
        self.kick.is_some() && self.call.is_some() && self.addr.is_some()
    }

    /// Its kick eventfd.
    pub fn kick(&self) -> Option<&OwnedFd> {
        self.kick.as_ref()
    }
}

/// Everything the front-end told the device that a new daemon must be told again.
#[derive(Default)]
pub struct Frontend {
    owner: bool,
    features: Option<u64>,
    protocol: Option<u64>,
    regions: Vec<(Region, OwnedFd)>,
    rings: Vec<Ring>,
    logging: bool,
}

impl Frontend {
    /// Takes note of a message the front-end sent; its descriptors are kept (duplicated).
    pub fn record(&mut self, m: &Message) {
        let dup = |i: usize| m.fds.get(i).and_then(|f| f.try_clone().ok());
        match m.request {
            req::SET_OWNER => self.owner = true,
            req::RESET_OWNER => {
                self.owner = false;
                self.features = None;
                self.protocol = None;
            }
            req::RESET_DEVICE => self.features = None,
            req::SET_FEATURES => {
                self.features = m.u64_at(0);
                let f = self.features.unwrap_or(0);
                self.logging = f & LOG_ALL != 0;
                if f & PROTOCOL_FEATURES == 0 {
                    for r in &mut self.rings {
                        r.enabled = true;
                    }
                }
            }
            req::SET_PROTOCOL_FEATURES => self.protocol = m.u64_at(0),
            req::SET_LOG_BASE => self.logging = true,
            req::SET_MEM_TABLE => {
                let n = m.u32_at(0).unwrap_or(0) as usize;
                self.regions = (0..n)
                    .filter_map(|i| {
                        let r = Region::parse(m.body.get(8 + i * 32..8 + (i + 1) * 32)?)?;
                        Some((r, dup(i)?))
                    })
                    .collect();
            }
            req::ADD_MEM_REG => {
                if let (Some(r), Some(fd)) = (m.body.get(8..40).and_then(Region::parse), dup(0)) {
                    self.regions.push((r, fd));
                }
            }
            req::REM_MEM_REG => {
                if let Some(r) = m.body.get(8..40).and_then(Region::parse) {
                    self.regions.retain(|(x, _)| {
                        !(x.gpa == r.gpa && x.size == r.size && x.user_addr == r.user_addr)
                    });
                }
            }
            req::SET_VRING_NUM | req::SET_VRING_ENABLE => {
                if let (Some(i), Some(v)) = (m.u32_at(0), m.u32_at(4)) {
                    let ring = self.ring(i);
                    if m.request == req::SET_VRING_NUM {
                        ring.num = Some(v);
                    } else {
                        ring.enabled = v == 1;
                    }
                }
            }
            req::SET_VRING_ADDR => {
                if let Some(i) = m.u32_at(0) {
                    self.ring(i).addr = Some(m.body.clone());
                }
            }
            req::GET_VRING_BASE => {
                if let Some(i) = m.u32_at(0) {
                    let ring = self.ring(i);
                    ring.kick = None;
                    ring.call = None;
                }
            }
            req::SET_VRING_KICK | req::SET_VRING_CALL | req::SET_VRING_ERR => {
                if let Some(v) = m.u64_at(0) {
                    let fd = if v & NO_FD != 0 { None } else { dup(0) };
                    let ring = self.ring((v & 0xff) as u32);
                    match m.request {
                        req::SET_VRING_KICK => ring.kick = fd,
                        req::SET_VRING_CALL => ring.call = fd,
                        _ => ring.err = fd,
                    }
                }
            }
            _ => {}
        }
    }

    fn ring(&mut self, i: u32) -> &mut Ring {
        let i = (i as usize).min(MAX_RINGS - 1);
        if self.rings.len() <= i {
            self.rings.resize_with(i + 1, Ring::default);
        }
        &mut self.rings[i]
    }

    /// The rings, by index.
    pub fn rings(&self) -> &[Ring] {
        &self.rings
    }

    /// Why this session cannot move to a new daemon now, if it cannot.
    pub fn busy(&self) -> Option<&'static str> {
        if self.logging {
            return Some("the front-end logs dirty memory (a migration runs)");
        }
        if !self.owner || self.features.is_none() || self.regions.is_empty() {
            return Some("the front-end has not set the device up yet");
        }
        None
    }

    /// The recorded state as an image plus the descriptors it refers to (by position).
    pub fn image(&self) -> io::Result<(FrontendImage, Vec<OwnedFd>)> {
        let mut fds = Vec::new();
        let mut slot = |f: &Option<OwnedFd>| -> io::Result<Option<u32>> {
            match f {
                None => Ok(None),
                Some(f) => {
                    fds.push(f.try_clone()?);
                    Ok(Some(fds.len() as u32 - 1))
                }
            }
        };
        let mut regions = Vec::new();
        for (r, fd) in &self.regions {
            let i = slot(&Some(fd.try_clone()?))?.unwrap_or(0);
            regions.push((*r, i));
        }
        let mut rings = Vec::new();
        for r in &self.rings {
            rings.push(RingImage {
                num: r.num,
                addr: r.addr.clone(),
                enabled: r.enabled,
                kick: slot(&r.kick)?,
                call: slot(&r.call)?,
                err: slot(&r.err)?,
            });
        }
        Ok((
            FrontendImage {
                owner: self.owner,
                features: self.features,
                protocol: self.protocol,
                regions,
                rings,
            },
            fds,
        ))
    }
}

/// Rings a front-end may set up (virtio-fs: hiprio plus request queues).
const MAX_RINGS: usize = 64;

/// A ring in a [`FrontendImage`]; descriptors are positions in the image's list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingImage {
    num: Option<u32>,
    addr: Option<Vec<u8>>,
    enabled: bool,
    kick: Option<u32>,
    call: Option<u32>,
    err: Option<u32>,
}

impl RingImage {
    /// The ring ran when it was handed over (it will be started again at its position).
    pub fn running(&self) -> bool {
        self.kick.is_some() && self.call.is_some() && self.addr.is_some() && self.num.is_some()
    }

    /// Position of its kick eventfd in the descriptor list.
    pub fn kick(&self) -> Option<u32> {
        self.kick
    }
}

/// [`Frontend`] as it travels to the new daemon.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrontendImage {
    owner: bool,
    features: Option<u64>,
    protocol: Option<u64>,
    regions: Vec<(Region, u32)>,
    rings: Vec<RingImage>,
}

impl FrontendImage {
    /// The rings, by index.
    pub fn rings(&self) -> &[RingImage] {
        &self.rings
    }

    /// Tells the vhost-user handler at the other end of `sock` all of it, as a front-end
    /// setting the device up would, each ring starting at `bases[i]` (its position in the
    /// old daemon). Afterwards the tap records the same state. Every step is acknowledged;
    /// the first refusal is an error.
    pub fn replay(
        &self,
        sock: &UnixStream,
        fds: &[OwnedFd],
        bases: &[Option<u16>],
        tap_state: &mut Frontend,
    ) -> io::Result<()> {
        let fd = |i: u32| {
            fds.get(i as usize)
                .ok_or_else(|| io::Error::other("a descriptor missing from the handover"))
                .and_then(|f| f.try_clone())
        };
        let protocol = self.protocol.unwrap_or(0);
        // Acks only once SET_PROTOCOL_FEATURES turned REPLY_ACK on.
        let mut talk = Talk {
            sock,
            ack: false,
            state: tap_state,
        };
        let features = talk.ask(req::GET_FEATURES)?;
        if let Some(f) = self.features {
            if f & !features != 0 {
                return Err(io::Error::other(format!(
                    "the front-end acked features {f:#x} this daemon does not offer ({features:#x})"
                )));
            }
        }
        if self.features.unwrap_or(0) & PROTOCOL_FEATURES != 0 || self.protocol.is_some() {
            talk.ask(req::GET_PROTOCOL_FEATURES)?;
        }
        if let Some(p) = self.protocol {
            talk.set(req::SET_PROTOCOL_FEATURES, p.to_le_bytes().to_vec(), vec![])?;
            // REPLY_ACK takes effect for the handler from here.
        }
        if self.owner {
            talk.set(req::SET_OWNER, vec![], vec![])?;
        }
        if let Some(f) = self.features {
            talk.set(req::SET_FEATURES, f.to_le_bytes().to_vec(), vec![])?;
        }
        if protocol & P_MEM_SLOTS != 0 {
            for (r, i) in &self.regions {
                let mut body = vec![0u8; 8];
                body.extend_from_slice(&r.bytes());
                talk.set(req::ADD_MEM_REG, body, vec![fd(*i)?])?;
            }
        } else if !self.regions.is_empty() {
            let mut body = (self.regions.len() as u32).to_le_bytes().to_vec();
            body.extend_from_slice(&[0; 4]);
            let mut files = Vec::new();
            for (r, i) in &self.regions {
                body.extend_from_slice(&r.bytes());
                files.push(fd(*i)?);
            }
            talk.set(req::SET_MEM_TABLE, body, files)?;
        }
        for (index, ring) in self.rings.iter().enumerate() {
            let index = index as u32;
            let pair = |v: u32| {
                let mut b = index.to_le_bytes().to_vec();
                b.extend_from_slice(&v.to_le_bytes());
                b
            };
            if let Some(n) = ring.num {
                talk.set(req::SET_VRING_NUM, pair(n), vec![])?;
            }
            if let Some(base) = bases.get(index as usize).copied().flatten() {
                talk.set(req::SET_VRING_BASE, pair(u32::from(base)), vec![])?;
            }
            if let Some(addr) = &ring.addr {
                talk.set(req::SET_VRING_ADDR, addr.clone(), vec![])?;
            }
            if self.features.unwrap_or(0) & PROTOCOL_FEATURES != 0 {
                talk.set(req::SET_VRING_ENABLE, pair(u32::from(ring.enabled)), vec![])?;
            }
            for (code, slot) in [
                (req::SET_VRING_ERR, ring.err),
                (req::SET_VRING_CALL, ring.call),
                (req::SET_VRING_KICK, ring.kick),
            ] {
                if let Some(i) = slot {
                    talk.set(code, u64::from(index).to_le_bytes().to_vec(), vec![fd(i)?])?;
                }
            }
        }
        Ok(())
    }
}

/// The replaying front-end's side of the conversation.
struct Talk<'a> {
    sock: &'a UnixStream,
    ack: bool,
    state: &'a mut Frontend,
}

impl Talk<'_> {
    /// Sends a request that has a u64 reply; returns it.
    fn ask(&mut self, request: u32) -> io::Result<u64> {
        let m = Message {
            request,
            flags: VERSION,
            body: vec![],
            fds: vec![],
        };
        m.write(self.sock)?;
        self.reply(request)
    }

    /// Sends a request that sets something, and waits for its ack when REPLY_ACK was
    /// negotiated (the handler answers nothing otherwise).
    fn set(&mut self, request: u32, body: Vec<u8>, fds: Vec<OwnedFd>) -> io::Result<()> {
        let ack = self.ack && request != req::SET_PROTOCOL_FEATURES;
        let m = Message {
            request,
            flags: VERSION | if ack { NEED_REPLY } else { 0 },
            body,
            fds,
        };
        m.write(self.sock)?;
        self.state.record(&m);
        if request == req::SET_PROTOCOL_FEATURES {
            self.ack = self.state.protocol.unwrap_or(0) & P_REPLY_ACK != 0;
        }
        if ack {
            let status = self.reply(request)?;
            if status != 0 {
                return Err(io::Error::other(format!(
                    "the new daemon's vhost-user handler refused request {request} (status {status})"
                )));
            }
        }
        Ok(())
    }

    fn reply(&mut self, request: u32) -> io::Result<u64> {
        let r = Message::read(self.sock)?
            .ok_or_else(|| io::Error::other("the vhost-user handler hung up during the replay"))?;
        if r.request != request || r.flags & REPLY == 0 {
            return Err(io::Error::other(format!(
                "reply to request {} while waiting for {request}",
                r.request
            )));
        }
        r.u64_at(0)
            .ok_or_else(|| io::Error::other(format!("short reply to request {request}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(request: u32, body: Vec<u8>, fds: Vec<OwnedFd>) -> Message {
        Message {
            request,
            flags: VERSION,
            body,
            fds,
        }
    }

    fn eventfd() -> OwnedFd {
        rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap()
    }

    #[test]
    fn records_what_a_front_end_sets_up_and_what_it_stops() {
        let mut f = Frontend::default();
        assert!(f.busy().is_some());
        f.record(&msg(req::SET_OWNER, vec![], vec![]));
        f.record(&msg(
            req::SET_FEATURES,
            (PROTOCOL_FEATURES | 1).to_le_bytes().to_vec(),
            vec![],
        ));
        let mut table = 1u32.to_le_bytes().to_vec();
        table.extend_from_slice(&[0; 4]);
        let r = Region {
            gpa: 0,
            size: 1 << 20,
            user_addr: 0x7f00_0000_0000,
            mmap_offset: 0,
        };
        table.extend_from_slice(&r.bytes());
        f.record(&msg(req::SET_MEM_TABLE, table, vec![eventfd()]));
        assert_eq!(f.busy(), None);
        let mut num = 1u32.to_le_bytes().to_vec();
        num.extend_from_slice(&128u32.to_le_bytes());
        f.record(&msg(req::SET_VRING_NUM, num, vec![]));
        let mut addr = 1u32.to_le_bytes().to_vec();
        addr.extend_from_slice(&[0; 36]);
        f.record(&msg(req::SET_VRING_ADDR, addr, vec![]));
        f.record(&msg(
            req::SET_VRING_KICK,
            1u64.to_le_bytes().to_vec(),
            vec![eventfd()],
        ));
        f.record(&msg(
            req::SET_VRING_CALL,
            1u64.to_le_bytes().to_vec(),
            vec![eventfd()],
        ));
        assert!(f.rings()[1].running());
        assert!(!f.rings()[0].running());
        let (image, fds) = f.image().unwrap();
        assert_eq!(fds.len(), 3);
        assert_eq!(image.regions, vec![(r, 0)]);
        assert!(image.rings()[1].running());
        let back: FrontendImage =
            postcard::from_bytes(&postcard::to_stdvec(&image).unwrap()).unwrap();
        assert_eq!(back, image);
        // GET_VRING_BASE stops the ring.
        let mut get = 1u32.to_le_bytes().to_vec();
        get.extend_from_slice(&[0; 4]);
        f.record(&msg(req::GET_VRING_BASE, get, vec![]));
        assert!(!f.rings()[1].running());
        // A migration's dirty logging makes it busy.
        f.record(&msg(
            req::SET_FEATURES,
            (PROTOCOL_FEATURES | LOG_ALL).to_le_bytes().to_vec(),
            vec![],
        ));
        assert!(f.busy().is_some());
    }

    #[test]
    fn a_hostile_ring_index_is_bounded() {
        let mut f = Frontend::default();
        let mut num = u32::MAX.to_le_bytes().to_vec();
        num.extend_from_slice(&8u32.to_le_bytes());
        f.record(&msg(req::SET_VRING_NUM, num, vec![]));
        assert_eq!(f.rings().len(), MAX_RINGS);
    }

    #[test]
    fn messages_cross_a_socket_whole() {
        let (a, b) = UnixStream::pair().unwrap();
        msg(
            req::SET_VRING_KICK,
            2u64.to_le_bytes().to_vec(),
            vec![eventfd()],
        )
        .write(&a)
        .unwrap();
        let m = Message::read(&b).unwrap().unwrap();
        assert_eq!(
            (m.request, m.flags, m.body.len(), m.fds.len()),
            (req::SET_VRING_KICK, VERSION, 8, 1)
        );
        drop(a);
        assert!(Message::read(&b).unwrap().is_none());
    }
}
