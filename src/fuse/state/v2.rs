//! Device state version 2, FROZEN: version 1's session plus what FUSE_INIT settled for POSIX
//! ACLs, security contexts and idmapped mounts, and an edited branch set (first written by
//! the daemon after commits 592a8b6 and 8e7487e, which had added them to the session while
//! still calling it version 1: from 8e7487e their version-1 bodies are this layout). The nested
//! types are version 1's (`v1.rs`), unchanged.
//! Never edit these types: a new layout is a new version. `tests/golden/device-state-v2.bin`
//! is read back, and written again byte for byte, by a test on every build.

use serde::{Deserialize, Serialize};

use super::v1;
use crate::fs::session as live;

/// The whole session, version 2.
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
    /// The branch paths in branch order when the branch set was edited; empty otherwise.
    pub edited_branches: Vec<Vec<u8>>,
}

/// The device state body, version 2.
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
            edited_branches,
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
            edited_branches,
        }
    }
}

impl From<live::SessionImage> for SessionImage {
    /// Every field by name: a field added to the live type fails to compile here, and needs
    /// a version 3.
    fn from(s: live::SessionImage) -> Self {
        let live::SessionImage {
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
            edited_branches,
        } = s;
        SessionImage {
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
            edited_branches,
        }
    }
}
