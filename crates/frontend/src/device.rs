//! The fake VMM: connects to a vhost-user-fs socket, negotiates features, shares guest RAM, sets
//! up hiprio + request queues, and moves chains through them. FUSE semantics live in `ops`.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use vhost::vhost_user::message::{
    VhostUserConfigFlags, VhostUserHeaderFlag, VhostUserProtocolFeatures,
};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::VhostBackend;
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_ring::{VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC};

use crate::error::{Error, Result};
use crate::memory::GuestRam;
use crate::request::RawCompletion;
use crate::transport::{Pending, Ticket};
use crate::vring::{ring_bytes, DriverQueue};

/// `VHOST_USER_F_PROTOCOL_FEATURES` (virtio feature bit 30).
pub const VHOST_USER_F_PROTOCOL_FEATURES: u64 = 1 << 30;
/// Index of the high-priority queue.
pub const HIPRIO_QUEUE: usize = 0;
/// Index of the first request queue.
pub const REQUEST_QUEUE: usize = 1;
/// Size of `struct virtio_fs_config` without `notify_buf_size`.
const FS_CONFIG_LEN: u32 = 40;

/// How to set up the fake VM.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// Entries per queue, a power of two up to 32768 (1024 is what QEMU uses).
    pub queue_size: u16,
    /// Bytes of guest RAM shared with the backend.
    pub memory_size: usize,
    /// Request queues to set up (capped by what the backend offers).
    pub request_queues: usize,
    /// Negotiate VIRTIO_RING_F_EVENT_IDX when offered.
    pub event_idx: bool,
    /// Set NEED_REPLY on control messages once REPLY_ACK is negotiated (catches refusals).
    pub reply_ack: bool,
    /// Default wait for a completion before reporting `Error::Timeout`.
    pub timeout: Duration,
    /// Lay requests out as the Linux virtio-fs driver does: the in header, the arguments and
    /// the out header each in a descriptor of their own, payload and reply data one descriptor
    /// per 4 KiB page (a 1 MiB READ is 258 descriptors). Off: one descriptor per part.
    pub linux_layout: bool,
    /// Acknowledge VHOST_USER_PROTOCOL_F_DEVICE_STATE when offered, for
    /// [`Device::save_state`] and [`Device::load_state`] (a migration without a VM).
    pub device_state: bool,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            queue_size: 1024,
            memory_size: 128 << 20,
            request_queues: 1,
            event_idx: true,
            reply_ack: true,
            timeout: Duration::from_secs(10),
            linux_layout: false,
            device_state: false,
        }
    }
}

/// What was negotiated with the backend.
#[derive(Clone, Debug, Default)]
pub struct Negotiated {
    /// Virtio features the backend offered.
    pub offered_features: u64,
    /// Virtio features we acked.
    pub features: u64,
    /// Protocol features we acked.
    pub protocol_features: u64,
    /// Queue count from GET_QUEUE_NUM, if MQ was negotiated.
    pub queue_num: Option<u64>,
    /// Tag from the device config, if CONFIG was negotiated.
    pub tag: Option<String>,
    /// `num_request_queues` from the device config, if CONFIG was negotiated.
    pub num_request_queues: Option<u32>,
}

/// Control channel, RAM and queues of one connected vhost-user-fs backend.
pub struct Device {
    frontend: Frontend,
    pub(crate) ram: GuestRam,
    pub(crate) queues: Vec<DriverQueue>,
    negotiated: Negotiated,
    pub(crate) timeout: Duration,
    pub(crate) pending: Vec<HashMap<u16, Pending>>,
    pub(crate) stash: Vec<(Ticket, RawCompletion)>,
    pub(crate) seq: u64,
    pub(crate) linux_layout: bool,
}

fn parse_config(buf: &[u8]) -> (String, u32) {
    let tag_end = buf[..36].iter().position(|&b| b == 0).unwrap_or(36);
    let tag = String::from_utf8_lossy(&buf[..tag_end]).into_owned();
    let n = u32::from_le_bytes([buf[36], buf[37], buf[38], buf[39]]);
    (tag, n)
}

impl Device {
    /// Connect to `socket` and bring the device up as QEMU would, ready for FUSE_INIT.
    pub fn connect(socket: &Path, opts: &ConnectOptions) -> Result<Self> {
        let mut fe = Frontend::connect(socket, 2).map_err(|source| Error::Connect {
            path: socket.to_path_buf(),
            source,
        })?;
        fe.set_owner().map_err(Error::vhost("SET_OWNER"))?;
        let offered = fe.get_features().map_err(Error::vhost("GET_FEATURES"))?;
        if offered & (1 << VIRTIO_F_VERSION_1) == 0 {
            return Err(Error::MissingFeature("VIRTIO_F_VERSION_1"));
        }
        let mut want = (1 << VIRTIO_F_VERSION_1)
            | (1 << VIRTIO_RING_F_INDIRECT_DESC)
            | VHOST_USER_F_PROTOCOL_FEATURES;
        if opts.event_idx {
            want |= 1 << VIRTIO_RING_F_EVENT_IDX;
        }
        let features = offered & want;
        let mut neg = Negotiated {
            offered_features: offered,
            features,
            ..Default::default()
        };
        if features & VHOST_USER_F_PROTOCOL_FEATURES != 0 {
            let pf = fe
                .get_protocol_features()
                .map_err(Error::vhost("GET_PROTOCOL_FEATURES"))?;
            let mut wanted = VhostUserProtocolFeatures::MQ
                | VhostUserProtocolFeatures::CONFIG
                | VhostUserProtocolFeatures::REPLY_ACK;
            if opts.device_state {
                wanted |= VhostUserProtocolFeatures::DEVICE_STATE;
            }
            let pf = pf & wanted;
            fe.set_protocol_features(pf)
                .map_err(Error::vhost("SET_PROTOCOL_FEATURES"))?;
            neg.protocol_features = pf.bits();
            if opts.reply_ack && pf.contains(VhostUserProtocolFeatures::REPLY_ACK) {
                fe.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
            }
            if pf.contains(VhostUserProtocolFeatures::MQ) {
                neg.queue_num = Some(fe.get_queue_num().map_err(Error::vhost("GET_QUEUE_NUM"))?);
            }
            if pf.contains(VhostUserProtocolFeatures::CONFIG) {
                let buf = [0u8; FS_CONFIG_LEN as usize];
                let (_, payload) = fe
                    .get_config(0, FS_CONFIG_LEN, VhostUserConfigFlags::empty(), &buf)
                    .map_err(Error::vhost("GET_CONFIG"))?;
                let (tag, n) = parse_config(&payload);
                neg.tag = Some(tag);
                neg.num_request_queues = Some(n);
            }
        }
        let available = match (neg.num_request_queues, neg.queue_num) {
            (Some(n), _) => n as usize,
            (None, Some(q)) => q.saturating_sub(1) as usize,
            (None, None) => 1,
        };
        let nreq = opts.request_queues.clamp(1, available.max(1));
        fe.set_features(features)
            .map_err(Error::vhost("SET_FEATURES"))?;

        let per_queue = ring_bytes(opts.queue_size);
        let ram = GuestRam::new(opts.memory_size, per_queue * (nreq as u64 + 1))?;
        fe.set_mem_table(&[ram.region_info()?])
            .map_err(Error::vhost("SET_MEM_TABLE"))?;
        let event_idx = features & (1 << VIRTIO_RING_F_EVENT_IDX) != 0;
        let mut queues = Vec::new();
        for i in 0..=nreq {
            let q = DriverQueue::new(i, opts.queue_size, per_queue * i as u64, event_idx)?;
            fe.set_vring_num(i, opts.queue_size)
                .map_err(Error::vhost("SET_VRING_NUM"))?;
            fe.set_vring_addr(i, &q.config_data(&ram)?)
                .map_err(Error::vhost("SET_VRING_ADDR"))?;
            fe.set_vring_base(i, 0)
                .map_err(Error::vhost("SET_VRING_BASE"))?;
            fe.set_vring_call(i, q.call_fd())
                .map_err(Error::vhost("SET_VRING_CALL"))?;
            fe.set_vring_kick(i, q.kick_fd())
                .map_err(Error::vhost("SET_VRING_KICK"))?;
            queues.push(q);
        }
        if features & VHOST_USER_F_PROTOCOL_FEATURES != 0 {
            for i in 0..=nreq {
                fe.set_vring_enable(i, true)
                    .map_err(Error::vhost("SET_VRING_ENABLE"))?;
            }
        }
        // A request/reply round trip: every message above has been handled once it returns.
        fe.get_features().map_err(Error::vhost("GET_FEATURES"))?;
        Ok(Device {
            frontend: fe,
            ram,
            queues,
            negotiated: neg,
            timeout: opts.timeout,
            pending: (0..=nreq).map(|_| HashMap::new()).collect(),
            stash: Vec::new(),
            seq: 0,
            linux_layout: opts.linux_layout,
        })
    }

    /// What was negotiated.
    pub fn negotiated(&self) -> &Negotiated {
        &self.negotiated
    }

    /// Entries per queue.
    pub fn queue_size(&self) -> u16 {
        self.queues[0].size()
    }

    /// Number of request queues set up (queue indices `1..=n`).
    pub fn request_queues(&self) -> usize {
        self.queues.len() - 1
    }

    /// Kicks sent on queue `q` so far (0 if unknown queue).
    pub fn kicks(&self, q: usize) -> u64 {
        self.queues.get(q).map_or(0, |q| q.kicks())
    }

    /// Default completion timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Change the default completion timeout.
    pub fn set_timeout(&mut self, t: Duration) {
        self.timeout = t;
    }

    /// The raw vhost-user control channel, for control-plane tests.
    pub fn frontend_mut(&mut self) -> &mut Frontend {
        &mut self.frontend
    }

    /// Close the control socket (the backend sees a frontend disconnect).
    pub fn disconnect(self) {
        drop(self);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn config_parses_tag_and_queues() {
        let mut b = [0u8; 40];
        b[..5].copy_from_slice(b"myfs\0");
        b[36] = 3;
        assert_eq!(super::parse_config(&b), ("myfs".to_string(), 3));
    }
}
