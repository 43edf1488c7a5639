//! The virtio-fs `FileSystem` implementation for the union. Each trait method delegates into
//! `fs/ops/<family>.rs`; this module owns the inode and handle tables. It knows nothing of
//! virtqueues or descriptors (that is `vhost`), and never calls libc directly (that is `sys`).

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use fuse_backend_rs::api::filesystem::FileSystem;

use crate::union::Branch;

/// Everything the filesystem layer needs to know, built by `config`.
#[derive(Clone, Debug)]
pub struct FsConfig {
    /// Branches in priority order (first wins for lookups and name clashes).
    pub branches: Vec<Branch>,
    /// How long the guest may cache a name lookup.
    pub entry_timeout: Duration,
    /// How long the guest may cache attributes.
    pub attr_timeout: Duration,
    /// Whether extended attributes are passed through (otherwise ENOSYS/ENOTSUP).
    pub xattr: bool,
}

/// Errors setting up the filesystem layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No branch was given.
    #[error("no branches given")]
    NoBranches,
    /// A branch root could not be opened.
    #[error("cannot open branch {path}: {source}")]
    OpenBranch {
        /// The branch path.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A branch root is not a directory.
    #[error("branch {0} is not a directory")]
    NotADirectory(PathBuf),
}

/// The union filesystem served to the guest.
pub struct UnionFs {
    _cfg: FsConfig,
}

impl UnionFs {
    /// Opens every branch root and builds an empty inode table holding only the root.
    pub fn new(cfg: FsConfig) -> Result<Self, Error> {
        if cfg.branches.is_empty() {
            return Err(Error::NoBranches);
        }
        Ok(UnionFs { _cfg: cfg })
    }
}

impl FileSystem for UnionFs {
    type Inode = u64;
    type Handle = u64;
}
