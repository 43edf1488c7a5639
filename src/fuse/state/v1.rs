//! Device state version 1, FROZEN: the body exactly as the daemon of commit 1e60aa4 (the last
//! to write version 1) serialized it, and its conversions to and from the live session types.
//! postcard is positional (no field names, no defaults): changing, adding, removing or
//! reordering anything here breaks every version-1 image ever written. Never edit these types;
//! a new layout is a new version (see `v2.rs`). `tests/golden/device-state-v1.bin`, written by
//! that daemon, is read back by a test on every build.
//!
//! Version 2 reuses every type here but the session and the state themselves (the nested
//! types did not change), so they are frozen for version 2 too. Later builds wrote longer
//! bodies under this version's number: see `v1_interim.rs`.

use serde::{Deserialize, Serialize};

use crate::fs::session as live;

/// A file handle (`handle_type`, `f_handle`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandleImage {
    /// `handle_type`.
    pub kind: i32,
    /// `f_handle`.
    pub bytes: Vec<u8>,
}

/// How the destination finds a node's object again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Locate {
    /// Not bound to one host object.
    Unbound,
    /// By its union path on this branch (index).
    Path {
        /// The branch index.
        branch: u32,
    },
    /// By this file handle on this branch's filesystem.
    Handle {
        /// The branch index.
        branch: u32,
        /// The handle.
        handle: HandleImage,
    },
    /// The source could not describe it.
    Lost {
        /// Why.
        why: String,
    },
}

/// One node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeImage {
    /// Its FUSE node id.
    pub id: u64,
    /// The guest's lookup count.
    pub lookups: u64,
    /// Every (parent node, name) the guest reached it by; the first is its path.
    pub names: Vec<(u64, Vec<u8>)>,
    /// Whether it is a directory.
    pub is_dir: bool,
    /// How to find its object.
    pub locate: Locate,
    /// Its file handle, to compare (`--migration-verify-handles`).
    pub verify: Option<HandleImage>,
    /// (mtime, mtime_nsec, size) at its last open.
    pub stamp: Option<(i64, i64, i64)>,
}

/// One open file or directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpenImage {
    /// A regular file.
    File {
        /// The FUSE handle.
        fh: u64,
        /// Its node.
        inode: u64,
        /// The host open flags.
        flags: u32,
    },
    /// A directory and, once read, its listing.
    Dir {
        /// The FUSE handle.
        fh: u64,
        /// Its node.
        inode: u64,
        /// The merged listing, if the guest started reading.
        listing: Option<Vec<EntryImage>>,
    },
    /// A handle lost in an earlier migration.
    Lost {
        /// The FUSE handle.
        fh: u64,
        /// Its node.
        inode: u64,
    },
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryImage {
    /// The name.
    pub name: Vec<u8>,
    /// The union inode number.
    pub ino: u64,
    /// The `DT_*` type.
    pub dtype: u32,
}

/// One lock the guest holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LockImage {
    /// A POSIX record lock.
    Posix {
        /// The node.
        inode: u64,
        /// The guest's lock owner.
        owner: u64,
        /// First byte.
        start: u64,
        /// Last byte (inclusive).
        end: u64,
        /// Exclusive or shared.
        write: bool,
        /// The guest process.
        pid: u32,
    },
    /// An flock lock of an open file.
    Flock {
        /// The node.
        inode: u64,
        /// The handle.
        fh: u64,
        /// Exclusive or shared.
        write: bool,
        /// The guest process.
        pid: u32,
    },
}

/// A copied-up hard-linked file (`cow=true`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopiedUpImage {
    /// The base object (st_dev, st_ino).
    pub base: (u64, u64),
    /// The upper branch.
    pub branch: u32,
    /// The copy's union path.
    pub path: Vec<u8>,
}

/// The whole session, version 1.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionImage {
    /// Number of branches.
    pub branches: u32,
    /// Every node, the root included.
    pub nodes: Vec<NodeImage>,
    /// The next node id.
    pub next_node: u64,
    /// Every open file and directory.
    pub open: Vec<OpenImage>,
    /// The next handle number.
    pub next_handle: u64,
    /// Every lock.
    pub locks: Vec<LockImage>,
    /// Copy-on-write state.
    pub copied_up: Vec<CopiedUpImage>,
    /// FUSE_WRITEBACK_CACHE was negotiated.
    pub writeback: bool,
    /// Mount points are announced to the guest.
    pub submounts: bool,
}

/// The device state body, version 1.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceState {
    /// What FUSE_INIT negotiated: pages per request.
    pub max_pages: u16,
    /// ... and the largest WRITE payload.
    pub max_write: u32,
    /// The filesystem session.
    pub session: SessionImage,
}

/// What a version-1 image cannot carry, so the session cannot be written as version 1.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("version 1 has no room for {0}")]
pub struct NoRoom(pub &'static str);

impl From<SessionImage> for live::SessionImage {
    /// A version-1 session as the live type: version 1 predates POSIX ACLs, security
    /// contexts, idmapped mounts and branch edits, so none of them was in use.
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
            posix_acl: false,
            security_ctx: false,
            idmap: false,
            edited_branches: Vec::new(),
        }
    }
}

/// Whether `s` says nothing version 1 cannot (for a peer that reads only version 1).
pub fn fits(s: &live::SessionImage) -> Result<(), NoRoom> {
    for (on, what) in [
        (s.posix_acl, "negotiated POSIX ACLs"),
        (s.security_ctx, "negotiated security contexts"),
        (s.idmap, "negotiated idmapped mounts"),
        (!s.edited_branches.is_empty(), "an edited branch set"),
    ] {
        if on {
            return Err(NoRoom(what));
        }
    }
    Ok(())
}

impl TryFrom<live::SessionImage> for SessionImage {
    type Error = NoRoom;

    /// The session as version 1 in 1e60aa4's own layout, if it fits ([`fits`]).
    fn try_from(s: live::SessionImage) -> Result<Self, NoRoom> {
        fits(&s)?;
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
            posix_acl: _,
            security_ctx: _,
            idmap: _,
            edited_branches: _,
        } = s;
        Ok(SessionImage {
            branches,
            nodes: nodes.into_iter().map(Into::into).collect(),
            next_node,
            open: open.into_iter().map(Into::into).collect(),
            next_handle,
            locks: locks.into_iter().map(Into::into).collect(),
            copied_up: copied_up.into_iter().map(Into::into).collect(),
            writeback,
            submounts,
        })
    }
}

impl From<HandleImage> for live::HandleImage {
    fn from(HandleImage { kind, bytes }: HandleImage) -> Self {
        live::HandleImage { kind, bytes }
    }
}

impl From<live::HandleImage> for HandleImage {
    fn from(live::HandleImage { kind, bytes }: live::HandleImage) -> Self {
        HandleImage { kind, bytes }
    }
}

impl From<Locate> for live::Locate {
    fn from(l: Locate) -> Self {
        match l {
            Locate::Unbound => live::Locate::Unbound,
            Locate::Path { branch } => live::Locate::Path { branch },
            Locate::Handle { branch, handle } => live::Locate::Handle {
                branch,
                handle: handle.into(),
            },
            Locate::Lost { why } => live::Locate::Lost { why },
        }
    }
}

impl From<live::Locate> for Locate {
    fn from(l: live::Locate) -> Self {
        match l {
            live::Locate::Unbound => Locate::Unbound,
            live::Locate::Path { branch } => Locate::Path { branch },
            live::Locate::Handle { branch, handle } => Locate::Handle {
                branch,
                handle: handle.into(),
            },
            live::Locate::Lost { why } => Locate::Lost { why },
        }
    }
}

impl From<NodeImage> for live::NodeImage {
    fn from(n: NodeImage) -> Self {
        let NodeImage {
            id,
            lookups,
            names,
            is_dir,
            locate,
            verify,
            stamp,
        } = n;
        live::NodeImage {
            id,
            lookups,
            names,
            is_dir,
            locate: locate.into(),
            verify: verify.map(Into::into),
            stamp,
        }
    }
}

impl From<live::NodeImage> for NodeImage {
    fn from(n: live::NodeImage) -> Self {
        let live::NodeImage {
            id,
            lookups,
            names,
            is_dir,
            locate,
            verify,
            stamp,
        } = n;
        NodeImage {
            id,
            lookups,
            names,
            is_dir,
            locate: locate.into(),
            verify: verify.map(Into::into),
            stamp,
        }
    }
}

impl From<OpenImage> for live::OpenImage {
    fn from(o: OpenImage) -> Self {
        match o {
            OpenImage::File { fh, inode, flags } => live::OpenImage::File { fh, inode, flags },
            OpenImage::Dir { fh, inode, listing } => live::OpenImage::Dir {
                fh,
                inode,
                listing: listing.map(|l| l.into_iter().map(Into::into).collect()),
            },
            OpenImage::Lost { fh, inode } => live::OpenImage::Lost { fh, inode },
        }
    }
}

impl From<live::OpenImage> for OpenImage {
    fn from(o: live::OpenImage) -> Self {
        match o {
            live::OpenImage::File { fh, inode, flags } => OpenImage::File { fh, inode, flags },
            live::OpenImage::Dir { fh, inode, listing } => OpenImage::Dir {
                fh,
                inode,
                listing: listing.map(|l| l.into_iter().map(Into::into).collect()),
            },
            live::OpenImage::Lost { fh, inode } => OpenImage::Lost { fh, inode },
        }
    }
}

impl From<EntryImage> for live::EntryImage {
    fn from(EntryImage { name, ino, dtype }: EntryImage) -> Self {
        live::EntryImage { name, ino, dtype }
    }
}

impl From<live::EntryImage> for EntryImage {
    fn from(live::EntryImage { name, ino, dtype }: live::EntryImage) -> Self {
        EntryImage { name, ino, dtype }
    }
}

impl From<LockImage> for live::LockImage {
    fn from(l: LockImage) -> Self {
        match l {
            LockImage::Posix {
                inode,
                owner,
                start,
                end,
                write,
                pid,
            } => live::LockImage::Posix {
                inode,
                owner,
                start,
                end,
                write,
                pid,
            },
            LockImage::Flock {
                inode,
                fh,
                write,
                pid,
            } => live::LockImage::Flock {
                inode,
                fh,
                write,
                pid,
            },
        }
    }
}

impl From<live::LockImage> for LockImage {
    fn from(l: live::LockImage) -> Self {
        match l {
            live::LockImage::Posix {
                inode,
                owner,
                start,
                end,
                write,
                pid,
            } => LockImage::Posix {
                inode,
                owner,
                start,
                end,
                write,
                pid,
            },
            live::LockImage::Flock {
                inode,
                fh,
                write,
                pid,
            } => LockImage::Flock {
                inode,
                fh,
                write,
                pid,
            },
        }
    }
}

impl From<CopiedUpImage> for live::CopiedUpImage {
    fn from(CopiedUpImage { base, branch, path }: CopiedUpImage) -> Self {
        live::CopiedUpImage { base, branch, path }
    }
}

impl From<live::CopiedUpImage> for CopiedUpImage {
    fn from(live::CopiedUpImage { base, branch, path }: live::CopiedUpImage) -> Self {
        CopiedUpImage { base, branch, path }
    }
}
