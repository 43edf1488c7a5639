//! The bodies daemons wrote under version 1's number after its layout had changed, FROZEN as
//! they wrote them, so that their sessions still load:
//!
//! - commits 592a8b6 to f782537: version 1's session plus `posix_acl`, `security_ctx` and
//!   `idmap` (twelve fields: [`SessionImage`] here);
//! - commits 8e7487e up to the fix that made version 2: those plus `edited_branches`, which is
//!   version 2's layout exactly ([`super::v2::DeviceState`]).
//!
//! Each body is told apart by being used up exactly (see `decode_v1` in `mod.rs`): the
//! layouts only append, so no body is used up by two of them. Never edit these types.

use serde::{Deserialize, Serialize};

use super::v1;
use crate::fs::session as live;

/// The session of commits 592a8b6 to f782537.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionImage {
    /// Number of branches.
    pub branches: u32,
    /// Every node, the root included.
    pub nodes: Vec<v1::NodeImage>,
    /// The next node id.
    pub next_node: u64,
    /// Every open file and directory.
    pub open: Vec<v1::OpenImage>,
    /// The next handle number.
    pub next_handle: u64,
    /// Every lock.
    pub locks: Vec<v1::LockImage>,
    /// Copy-on-write state.
    pub copied_up: Vec<v1::CopiedUpImage>,
    /// FUSE_WRITEBACK_CACHE was negotiated.
    pub writeback: bool,
    /// Mount points are announced to the guest.
    pub submounts: bool,
    /// POSIX ACLs were negotiated.
    pub posix_acl: bool,
    /// Security contexts come with each create.
    pub security_ctx: bool,
    /// Idmapped mounts are allowed.
    pub idmap: bool,
}

/// The device state body of commits 592a8b6 to f782537.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceState {
    /// What FUSE_INIT negotiated: pages per request.
    pub max_pages: u16,
    /// ... and the largest WRITE payload.
    pub max_write: u32,
    /// The filesystem session.
    pub session: SessionImage,
}

impl From<SessionImage> for live::SessionImage {
    /// Those daemons carried no branch edit in the session (8e7487e added it): none.
    fn from(s: SessionImage) -> Self {
        let SessionImage {
            branches,
            nodes,
            next_node,
            open,
            next_handle,
            locks,
            copied_up,
            writeback,
            submounts,
            posix_acl,
            security_ctx,
            idmap,
        } = s;
        live::SessionImage {
            branches,
            nodes: nodes.into_iter().map(Into::into).collect(),
            next_node,
            open: open.into_iter().map(Into::into).collect(),
            next_handle,
            locks: locks.into_iter().map(Into::into).collect(),
            copied_up: copied_up.into_iter().map(Into::into).collect(),
            writeback,
            submounts,
            posix_acl,
            security_ctx,
            idmap,
            edited_branches: Vec::new(),
        }
    }
}
