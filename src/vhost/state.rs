//! The device state on the wire (VHOST_USER_PROTOCOL_F_DEVICE_STATE): what a migration, a
//! snapshot or an upgrade moves from one daemon to the next. The front-end (QEMU) carries the
//! bytes and never looks inside.
//!
//! Format, version 1 (all integers little-endian):
//!
//! | bytes | what |
//! |---|---|
//! | 8 | magic `UVFSDEV\0` |
//! | 4 | format version (1) |
//! | 8 | length N of the body |
//! | N | body: [`DeviceStateV1`] in postcard's encoding (serde data model, varint integers) |
//!
//! A daemon refuses, with an error naming the cause, bytes that are not such an image (another
//! daemon's device state), a version it does not know (a newer daemon's), a truncated image,
//! or a body that does not decode; it never guesses. A new version adds a variant to
//! [`Versioned`] and keeps reading the old ones.

use serde::{Deserialize, Serialize};

use super::init::Negotiated;
use crate::fs::session::SessionImage;

/// The image's first bytes.
pub const MAGIC: &[u8; 8] = b"UVFSDEV\0";
/// The newest version this daemon writes and reads.
pub const VERSION: u32 = 1;
/// Header size: magic, version, body length.
const HEADER: usize = 8 + 4 + 8;

/// Version 1 of the device state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceStateV1 {
    /// What FUSE_INIT negotiated: pages per request.
    pub max_pages: u16,
    /// ... and the largest WRITE payload.
    pub max_write: u32,
    /// The filesystem session.
    pub session: SessionImage,
}

impl DeviceStateV1 {
    /// The negotiated limits it carries.
    pub fn negotiated(&self) -> Negotiated {
        Negotiated {
            max_pages: self.max_pages,
            max_write: self.max_write,
        }
    }
}

/// Every version this daemon reads, by number.
enum Versioned {
    V1(DeviceStateV1),
}

/// Why bytes are not a device state this daemon can load.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StateError {
    /// Not this daemon's format (another backend's device state?).
    #[error("not a union-virtiofsd device state (no UVFSDEV magic: another daemon's?)")]
    NotOurs,
    /// A version this daemon does not know.
    #[error("device state version {found} is not one this daemon reads (it reads 1 to {VERSION}); upgrade the destination")]
    Version {
        /// The image's version.
        found: u32,
    },
    /// Fewer bytes than the header says.
    #[error("device state truncated: {got} of {want} bytes")]
    Truncated {
        /// Bytes present.
        got: usize,
        /// Bytes the header announced.
        want: usize,
    },
    /// More bytes than the header says.
    #[error("device state has {0} bytes after its end")]
    Trailing(usize),
    /// The body does not decode.
    #[error("device state body does not decode: {0}")]
    Body(String),
}

/// The device state as bytes (current version).
pub fn encode(state: &DeviceStateV1) -> Vec<u8> {
    let body = postcard::to_stdvec(state).expect("serializing plain data into memory");
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// The device state in `bytes`, of any version this daemon reads.
pub fn decode(bytes: &[u8]) -> Result<DeviceStateV1, StateError> {
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(StateError::NotOurs);
    }
    if bytes.len() < HEADER {
        return Err(StateError::Truncated {
            got: bytes.len(),
            want: HEADER,
        });
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    let len = u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes"));
    let body = &bytes[HEADER..];
    let want = usize::try_from(len).unwrap_or(usize::MAX);
    if body.len() < want {
        return Err(StateError::Truncated {
            got: bytes.len(),
            want: HEADER.saturating_add(want),
        });
    }
    if body.len() > want {
        return Err(StateError::Trailing(body.len() - want));
    }
    let v = match version {
        1 => {
            Versioned::V1(postcard::from_bytes(body).map_err(|e| StateError::Body(e.to_string()))?)
        }
        found => return Err(StateError::Version { found }),
    };
    match v {
        Versioned::V1(s) => Ok(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::session::{Locate, NodeImage};

    fn sample() -> DeviceStateV1 {
        DeviceStateV1 {
            max_pages: 256,
            max_write: 1 << 20,
            session: SessionImage {
                branches: 2,
                nodes: vec![NodeImage {
                    id: 1,
                    lookups: 3,
                    names: vec![],
                    is_dir: true,
                    locate: Locate::Unbound,
                    verify: None,
                    stamp: None,
                }],
                next_node: 2,
                ..Default::default()
            },
        }
    }

    #[test]
    fn round_trip() {
        let s = sample();
        assert_eq!(decode(&encode(&s)).unwrap(), s);
    }

    #[test]
    fn refuses_what_it_does_not_understand() {
        let good = encode(&sample());
        assert_eq!(decode(b"virtiofsd state"), Err(StateError::NotOurs));
        assert_eq!(decode(&good[..4]), Err(StateError::NotOurs));
        let mut newer = good.clone();
        newer[8..12].copy_from_slice(&2u32.to_le_bytes());
        assert_eq!(decode(&newer), Err(StateError::Version { found: 2 }));
        assert!(matches!(
            decode(&good[..good.len() - 1]),
            Err(StateError::Truncated { .. })
        ));
        let mut longer = good.clone();
        longer.push(0);
        assert_eq!(decode(&longer), Err(StateError::Trailing(1)));
        let mut garbled = good.clone();
        let n = garbled.len();
        garbled[20..n].fill(0xff);
        assert!(matches!(decode(&garbled), Err(StateError::Body(_))));
    }
}
