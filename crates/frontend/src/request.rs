//! FUSE frames as the driver queues them: a request (header fields, argument bytes, optional data
//! payload, reply capacity), its reply, and raw descriptor layouts for malformed-frame tests.
//! Knows the FUSE header layout, not individual operations (see `ops`).

use std::sync::Arc;

use fuse_backend_rs::abi::fuse_abi::{InHeader, OutHeader};
use vm_memory::ByteValued;

use crate::error::{Error, Result};

/// Size of `fuse_in_header`.
pub const IN_HEADER_LEN: usize = std::mem::size_of::<InHeader>();
/// Size of `fuse_out_header`.
pub const OUT_HEADER_LEN: usize = std::mem::size_of::<OutHeader>();

/// One well-formed FUSE request. `unique` is assigned by the driver when it is queued.
#[derive(Clone, Debug, Default)]
pub struct FuseRequest {
    /// FUSE opcode (`fuse_abi::Opcode as u32`).
    pub opcode: u32,
    /// Target inode.
    pub nodeid: u64,
    /// Caller credentials and pid put in the header.
    pub uid: u32,
    /// Caller group.
    pub gid: u32,
    /// Caller pid.
    pub pid: u32,
    /// Operation arguments following the header (fixed struct, then names).
    pub args: Vec<u8>,
    /// Bulk payload (WRITE data), placed in its own readable descriptor as the kernel does.
    pub data: Option<Arc<[u8]>>,
    /// Writable bytes offered for the reply, `fuse_out_header` included; 0 for no reply (FORGET).
    pub reply_capacity: u32,
}

impl FuseRequest {
    /// A request with `args` and room for `reply_payload` bytes after the out header.
    pub fn new(opcode: u32, nodeid: u64, args: Vec<u8>, reply_payload: usize) -> Self {
        FuseRequest {
            opcode,
            nodeid,
            args,
            reply_capacity: (OUT_HEADER_LEN + reply_payload) as u32,
            ..Default::default()
        }
    }

    /// Total length the header announces: header + args + data.
    pub fn total_len(&self) -> usize {
        IN_HEADER_LEN + self.args.len() + self.data.as_ref().map_or(0, |d| d.len())
    }

    /// The in-header plus args as sent in the first readable descriptor.
    pub fn head_bytes(&self, unique: u64) -> Vec<u8> {
        let hdr = InHeader {
            len: self.total_len() as u32,
            opcode: self.opcode,
            unique,
            nodeid: self.nodeid,
            uid: self.uid,
            gid: self.gid,
            pid: self.pid,
            padding: 0,
        };
        let mut v = Vec::with_capacity(IN_HEADER_LEN + self.args.len());
        v.extend_from_slice(hdr.as_slice());
        v.extend_from_slice(&self.args);
        v
    }
}

/// What came back for one request.
#[derive(Clone, Debug, Default)]
pub struct FuseReply {
    /// Bytes the device reported in the used ring.
    pub used_len: u32,
    /// The writable area as read back, truncated to `min(used_len, capacity)`.
    pub bytes: Vec<u8>,
}

impl FuseReply {
    /// The out header, if at least one was written.
    pub fn header(&self) -> Option<OutHeader> {
        self.bytes
            .get(..OUT_HEADER_LEN)
            .and_then(OutHeader::from_slice)
            .copied()
    }

    /// Positive errno if the reply is an error reply.
    pub fn errno(&self) -> Option<i32> {
        self.header().filter(|h| h.error != 0).map(|h| -h.error)
    }

    /// Payload after the out header, or `Error::Errno` for an error reply.
    pub fn payload(&self) -> Result<&[u8]> {
        let h = self
            .header()
            .ok_or_else(|| Error::BadReply(format!("{} bytes, no out header", self.bytes.len())))?;
        if h.error != 0 {
            return Err(Error::Errno(-h.error));
        }
        Ok(&self.bytes[OUT_HEADER_LEN..])
    }

    /// The payload's leading `T` (like `EntryOut`), erroring on a short or error reply.
    pub fn parse<T: ByteValued>(&self) -> Result<T> {
        let p = self.payload()?;
        p.get(..std::mem::size_of::<T>())
            .and_then(T::from_slice)
            .copied()
            .ok_or_else(|| {
                Error::BadReply(format!(
                    "payload {} bytes, want {}",
                    p.len(),
                    std::mem::size_of::<T>()
                ))
            })
    }
}

/// One buffer of a hand-made descriptor chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RawSegment {
    /// A device-readable buffer holding these bytes.
    In(Vec<u8>),
    /// A device-writable buffer of this many bytes (zeroed before queueing).
    Out(u32),
    /// A descriptor with an arbitrary address and length that the driver does not back.
    Addr {
        /// Guest physical address.
        addr: u64,
        /// Descriptor length.
        len: u32,
        /// Device-writable flag.
        writable: bool,
    },
}

/// What came back for a raw chain.
#[derive(Clone, Debug, Default)]
pub struct RawCompletion {
    /// Bytes the device reported in the used ring.
    pub used_len: u32,
    /// Contents of each `RawSegment::Out` buffer, in chain order.
    pub out: Vec<Vec<u8>>,
}

impl RawCompletion {
    /// The writable buffers concatenated, truncated to `used_len`, as a [`FuseReply`].
    pub fn into_reply(mut self) -> FuseReply {
        let mut all = if self.out.len() == 1 {
            self.out.pop().unwrap_or_default()
        } else {
            self.out.concat()
        };
        all.truncate(self.used_len as usize);
        FuseReply {
            used_len: self.used_len,
            bytes: all,
        }
    }
}
