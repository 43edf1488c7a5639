//! The guest's session as plain data, for migration, snapshots and upgrades: every node the
//! guest holds, every open file and directory, every lock, the copy-on-write state. The
//! source exports it (`Call::export_session`); the destination, over the same branches,
//! finds every object again and takes the locks again (`Call::import_session`). No
//! file data moves. `fuse::state` puts it on the wire with its version; this module does
//! no I/O of its own beyond finding objects again. These types are never serialized
//! themselves: `fuse::state` converts them to and from its frozen versions (`v1.rs`,
//! `v2.rs`), so a field added here needs a new version there (the conversions name every
//! field and fail to compile until it has one).
//!
//! How a node is found again: by its union path on its branch (`--migration-mode=find-paths`,
//! the default: the node table already knows every name the guest reached a node by), or by
//! its file handle (`file-handles`: the same filesystem, and CAP_DAC_READ_SEARCH on the
//! destination). A node without a name (an open file unlinked in the guest) has no path: it
//! is found by its file handle when the source made one, else it is lost (see
//! `--migration-on-error`).

mod export;
mod import;

pub use import::{ImportError, Imported};

use crate::fs::UnionFs;

/// How the source describes nodes (`--migration-mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FindBy {
    /// By union path (the destination may be another host with a copy of the branches).
    #[default]
    Paths,
    /// By file handle (the same filesystems, seen by the destination).
    FileHandles,
}

/// What the source adds and checks when it exports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportOptions {
    /// Whether the daemon may make file handles at all (its seccomp filter allows
    /// name_to_handle_at only where nodes or migration use them).
    pub handles_allowed: bool,
    /// How nodes are described.
    pub find_by: FindBy,
    /// Attach each node's file handle for the destination to compare with what it opened
    /// (`--migration-verify-handles`).
    pub verify_handles: bool,
    /// Check, when exporting, that each node's path still leads to its object
    /// (`--migration-confirm-paths`); a node whose path does not is sent as lost.
    pub confirm_paths: bool,
}

/// What the destination does with a node or handle it cannot find again
/// (`--migration-on-error`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnError {
    /// Fail the import: the front-end aborts the migration and the source goes on.
    #[default]
    Abort,
    /// Import the rest; the guest gets EIO for what was lost.
    GuestError,
}

/// A file handle as the image carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandleImage {
    /// `handle_type`.
    pub kind: i32,
    /// `f_handle`.
    pub bytes: Vec<u8>,
}

/// How the destination finds a node's object again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Locate {
    /// Not bound to one host object (the root, or a node the next operation looks up again
    /// by its path).
    Unbound,
    /// Its union path (from its first name) on this branch.
    Path {
        /// The branch index.
        branch: u32,
    },
    /// This file handle, on this branch's filesystem.
    Handle {
        /// The branch index.
        branch: u32,
        /// The handle.
        handle: HandleImage,
    },
    /// The source could not describe it (no name and no handle, or a path that no longer
    /// leads to it): the destination applies `--migration-on-error`.
    Lost {
        /// Why, for the destination's log.
        why: String,
    },
}

/// One node.
#[derive(Clone, Debug, PartialEq, Eq)]
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
    /// Its file handle when `--migration-verify-handles` asked for one, to compare.
    pub verify: Option<HandleImage>,
    /// (mtime, mtime_nsec, size) at its last open (`cache.files=auto-full`).
    pub stamp: Option<(i64, i64, i64)>,
}

/// One open file or directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpenImage {
    /// A regular file, opened again on its node's object with these flags.
    File {
        /// The FUSE handle.
        fh: u64,
        /// Its node.
        inode: u64,
        /// The host open flags (access mode, O_APPEND, O_DIRECT, O_SYNC…; never O_CREAT or
        /// O_TRUNC).
        flags: u32,
    },
    /// A directory and, once read, its listing (so reading goes on at the same offset).
    Dir {
        /// The FUSE handle.
        fh: u64,
        /// Its node.
        inode: u64,
        /// The merged listing, if the guest started reading.
        listing: Option<Vec<EntryImage>>,
    },
    /// A handle lost in an earlier migration (EIO until released).
    Lost {
        /// The FUSE handle.
        fh: u64,
        /// Its node.
        inode: u64,
    },
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryImage {
    /// The name.
    pub name: Vec<u8>,
    /// The union inode number.
    pub ino: u64,
    /// The `DT_*` type.
    pub dtype: u32,
}

/// One lock the guest holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockImage {
    /// A POSIX record lock of a lock owner.
    Posix {
        /// The node.
        inode: u64,
        /// The guest's lock owner.
        owner: u64,
        /// First byte.
        start: u64,
        /// Last byte (inclusive; `u64::MAX`: to the end of the file).
        end: u64,
        /// Exclusive (F_WRLCK) or shared.
        write: bool,
        /// The guest process that took it.
        pid: u32,
    },
    /// An flock lock of an open file.
    Flock {
        /// The node.
        inode: u64,
        /// The handle.
        fh: u64,
        /// Exclusive (LOCK_EX) or shared.
        write: bool,
        /// The guest process that took it.
        pid: u32,
    },
}

/// A copied-up hard-linked file (`cow=true`): where its base object's copy went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopiedUpImage {
    /// The base object (st_dev, st_ino).
    pub base: (u64, u64),
    /// The upper branch.
    pub branch: u32,
    /// The copy's union path.
    pub path: Vec<u8>,
}

/// The whole session.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionImage {
    /// Number of branches (the destination must have as many).
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
    /// FUSE_WRITEBACK_CACHE was negotiated: the guest's page cache holds writes, so the
    /// destination opens as the source did (read access with write-only, no O_APPEND).
    pub writeback: bool,
    /// Mount points are announced to the guest (FUSE_ATTR_SUBMOUNT).
    pub submounts: bool,
    /// POSIX ACLs were negotiated (the umask comes with each create).
    pub posix_acl: bool,
    /// Security contexts come with each create (FUSE_SECURITY_CTX).
    pub security_ctx: bool,
    /// Idmapped mounts are allowed (FUSE_ALLOW_IDMAP).
    pub idmap: bool,
    /// The branch paths in branch order, when the branch set was edited while the daemon
    /// ran (its command line no longer says what it is): the destination must serve these.
    pub edited_branches: Vec<Vec<u8>>,
}

/// What the vhost layer needs of a filesystem to move its session to another daemon. The
/// defaults have no session to move.
pub trait Sessions {
    /// The session as it stands (the rings are stopped).
    fn export(&self, opts: ExportOptions) -> SessionImage {
        let _ = opts;
        SessionImage::default()
    }

    /// Makes `img` the session.
    fn import(&self, img: SessionImage, on_error: OnError) -> Result<Imported, ImportError> {
        let _ = on_error;
        match img.nodes.len() {
            0 | 1 => Ok(Imported::default()),
            _ => Err(ImportError::Table("this filesystem keeps no nodes".into())),
        }
    }

    /// Lets go of the host locks the guest holds, keeping the record of them (the next
    /// daemon takes them). How many.
    fn release_host_locks(&self) -> usize {
        0
    }

    /// Takes them again (the session did not move). How many were lost.
    fn retake_host_locks(&self) -> usize {
        0
    }

    /// Why the session cannot move to a daemon that reads device state version 1 only (the
    /// previous release), beyond what the image says: the guest relies on something that
    /// daemon does not do. None if it can.
    fn needs_after_v1(&self) -> Option<&'static str> {
        None
    }
}

impl Sessions for UnionFs {
    fn export(&self, opts: ExportOptions) -> SessionImage {
        self.call(&self.now(), None).export_session(opts)
    }

    fn import(&self, img: SessionImage, on_error: OnError) -> Result<Imported, ImportError> {
        self.call(&self.now(), None).import_session(img, on_error)
    }

    fn release_host_locks(&self) -> usize {
        self.locks.release_host(&self.call(&self.now(), None))
    }

    /// A guest told it need not open directories reads them without a handle, which the
    /// previous release answers EBADF. Whether it was told is not in the session (this
    /// build's daemons serve such reads whatever they were told), so where it may have been:
    /// wherever the options let every directory's listing stay cached.
    fn needs_after_v1(&self) -> Option<&'static str> {
        let cached = self.now().keeps_every_listing();
        (self.negotiated.opendir_elided() || (cached && self.negotiated.handleless_readdir()))
            .then_some("a guest that opens directories without OPENDIR (cache.readdir=true)")
    }

    fn retake_host_locks(&self) -> usize {
        self.locks.retake_host(&self.call(&self.now(), None))
    }
}
