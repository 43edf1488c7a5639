//! The device state on the wire (VHOST_USER_PROTOCOL_F_DEVICE_STATE): what a migration, a
//! snapshot or an upgrade moves from one daemon to the next. The front-end (QEMU) carries the
//! bytes and never looks inside. Only the frozen types of `v1.rs`, `v1_interim.rs` and
//! `v2.rs` are ever serialized; the live session types (`fs::session`) are not, so editing them cannot change
//! what an older or newer daemon reads.
//!
//! Format (all integers little-endian):
//!
//! | bytes | what |
//! |---|---|
//! | 8 | magic `UVFSDEV\0` |
//! | 4 | format version: 1 or 2 |
//! | 8 | length N of the body |
//! | N | body: version 1's or 2's (below) in postcard's encoding (serde data model, varint integers) |
//!
//! The promise: a daemon reads every version from [`OLDEST`] to [`VERSION`], and writes the
//! newest its peer reads ([`encode_for`]; for a migration through QEMU the destination cannot
//! say, so [`VERSION`]). A golden image of each version (`tests/golden/`) is read back by a
//! test on every build, and version 2's written again byte for byte. A daemon refuses, with an
//! error naming the cause, bytes that are not such an image (another daemon's device state), a
//! version it does not read (a newer daemon's), a truncated image, or a body that does not
//! decode; it never guesses, and never loads part of a session. A new layout is a new frozen
//! module `vN.rs`, one arm in [`decode`] and [`encode_for`], and a golden file.
//!
//! - Version 1 is what the daemon of commit 1e60aa4 wrote ([`v1`]). Later builds kept its
//!   number while appending fields (issue 43): their bodies ([`v1_interim`], and version 2's
//!   layout) are read as well, each told apart by being used up exactly. To a peer that
//!   reads only version 1, this daemon writes version 1 in the longest of those bodies, the
//!   additions off (it refuses if the session needs them): 1e60aa4's daemon reads its first
//!   fields and leaves the rest (postcard's `from_bytes`), the later builds read it whole.
//! - Version 2 adds to version 1 the POSIX ACL, security context and idmap choices and an
//!   edited branch set ([`v2`]).

pub mod v1;
pub mod v1_interim;
pub mod v2;

#[cfg(test)]
mod tests;

use serde::Serialize;

use super::init::Negotiated;
use crate::fs::session::SessionImage;

/// The image's first bytes.
pub const MAGIC: &[u8; 8] = b"UVFSDEV\0";
/// The oldest version this daemon reads.
pub const OLDEST: u32 = 1;
/// The newest version this daemon reads, and the one it writes unless its peer reads only
/// older ones.
pub const VERSION: u32 = 2;
/// Header size: magic, version, body length.
const HEADER: usize = 8 + 4 + 8;

/// The device state versions a daemon reads, `oldest..=newest`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Versions {
    /// The oldest.
    pub oldest: u32,
    /// The newest.
    pub newest: u32,
}

impl Versions {
    /// What this daemon reads.
    pub const OURS: Versions = Versions {
        oldest: OLDEST,
        newest: VERSION,
    };
    /// What a daemon that does not say reads (1e60aa4 and earlier: version 1 only).
    pub const FIRST: Versions = Versions {
        oldest: 1,
        newest: 1,
    };

    /// Whether `version` is one of them.
    pub fn contains(self, version: u32) -> bool {
        (self.oldest..=self.newest).contains(&version)
    }
}

impl std::fmt::Display for Versions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} to {}", self.oldest, self.newest)
    }
}

/// The device state in the live types, whatever version it came in or goes out as.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceState {
    /// What FUSE_INIT negotiated: pages per request.
    pub max_pages: u16,
    /// ... and the largest WRITE payload.
    pub max_write: u32,
    /// The filesystem session.
    pub session: SessionImage,
}

impl DeviceState {
    /// The negotiated limits it carries.
    pub fn negotiated(&self) -> Negotiated {
        Negotiated {
            max_pages: self.max_pages,
            max_write: self.max_write,
        }
    }
}

impl From<v1::DeviceState> for DeviceState {
    fn from(
        v1::DeviceState {
            max_pages,
            max_write,
            session,
        }: v1::DeviceState,
    ) -> Self {
        DeviceState {
            max_pages,
            max_write,
            session: session.into(),
        }
    }
}

impl From<v1_interim::DeviceState> for DeviceState {
    fn from(
        v1_interim::DeviceState {
            max_pages,
            max_write,
            session,
        }: v1_interim::DeviceState,
    ) -> Self {
        DeviceState {
            max_pages,
            max_write,
            session: session.into(),
        }
    }
}

impl From<v2::DeviceState> for DeviceState {
    fn from(
        v2::DeviceState {
            max_pages,
            max_write,
            session,
        }: v2::DeviceState,
    ) -> Self {
        DeviceState {
            max_pages,
            max_write,
            session: session.into(),
        }
    }
}

/// Why bytes are not a device state this daemon can load, or a session cannot be written
/// in a version its peer reads.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StateError {
    /// Not this daemon's format (another backend's device state?).
    #[error("not a union-virtiofsd device state (no UVFSDEV magic: another daemon's?)")]
    NotOurs,
    /// A version this daemon does not read.
    #[error("device state version {found} is not one this daemon reads (it reads {OLDEST} to {VERSION}); upgrade the destination")]
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
    /// The peer reads no version this session can be written in.
    #[error("the other daemon reads device state {reads}, this one writes {OLDEST} to {VERSION}{why}; upgrade the other daemon")]
    PeerTooOld {
        /// What the peer reads.
        reads: Versions,
        /// Why the versions both know do not do (`: ...`), or nothing.
        why: String,
    },
}

/// The device state as bytes, in the newest version.
pub fn encode(state: DeviceState) -> Vec<u8> {
    encode_for(state, Versions::OURS).expect("this daemon reads its own newest version")
}

/// The device state as bytes, in the newest version a peer that reads `reads` reads. An
/// older version is written only if it carries the whole session.
pub fn encode_for(state: DeviceState, reads: Versions) -> Result<Vec<u8>, StateError> {
    let DeviceState {
        max_pages,
        max_write,
        session,
    } = state;
    if reads.contains(2) {
        let body = v2::DeviceState {
            max_pages,
            max_write,
            session: session.into(),
        };
        return Ok(framed(2, &body));
    }
    if reads.contains(1) {
        v1::fits(&session).map_err(|e| StateError::PeerTooOld {
            reads,
            why: format!(": {e}"),
        })?;
        // Version 2's body (the additions off) under version 1's number: see the module's text.
        let body = v2::DeviceState {
            max_pages,
            max_write,
            session: session.into(),
        };
        return Ok(framed(1, &body));
    }
    Err(StateError::PeerTooOld {
        reads,
        why: String::new(),
    })
}

/// `body` behind the header for `version`.
fn framed(version: u32, body: &impl Serialize) -> Vec<u8> {
    let body = postcard::to_stdvec(body).expect("serializing plain data into memory");
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// The version and body of the image in `bytes`, checked for magic and length.
fn unframe(bytes: &[u8]) -> Result<(u32, &[u8]), StateError> {
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
    Ok((version, body))
}

/// A body of one version, all of it.
fn body<'a, T: serde::Deserialize<'a>>(body: &'a [u8]) -> Result<T, StateError> {
    let (value, rest) =
        postcard::take_from_bytes(body).map_err(|e| StateError::Body(e.to_string()))?;
    if !rest.is_empty() {
        return Err(StateError::Body(format!(
            "{} bytes left after the session",
            rest.len()
        )));
    }
    Ok(value)
}

/// The device state in `bytes`, of any version this daemon reads.
pub fn decode(bytes: &[u8]) -> Result<DeviceState, StateError> {
    match unframe(bytes)? {
        (1, b) => decode_v1(b),
        (2, b) => Ok(body::<v2::DeviceState>(b)?.into()),
        (found, _) => Err(StateError::Version { found }),
    }
}

/// A version-1 body: 1e60aa4's, else one of the longer bodies later builds wrote under the same
/// number (see the module's text); the error is the one of 1e60aa4's layout.
fn decode_v1(b: &[u8]) -> Result<DeviceState, StateError> {
    let first = match body::<v1::DeviceState>(b) {
        Ok(s) => return Ok(s.into()),
        Err(e) => e,
    };
    if let Ok(s) = body::<v2::DeviceState>(b) {
        return Ok(s.into());
    }
    if let Ok(s) = body::<v1_interim::DeviceState>(b) {
        return Ok(s.into());
    }
    Err(first)
}

/// The version of the image in `bytes`, if it is one (for the logs).
pub fn version_of(bytes: &[u8]) -> Option<u32> {
    unframe(bytes).ok().map(|(v, _)| v)
}
