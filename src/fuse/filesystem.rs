//! What the protocol layer needs of a filesystem: fuse-backend-rs's `FileSystem` trait (its
//! methods, not its server), [`OwnOps`] for what that trait has no method for, and
//! [`Sessions`] for the state that moves with a session.

use fuse_backend_rs::api::filesystem::FileSystem;

use crate::fs::own::OwnOps;
use crate::fs::session::Sessions;

/// What the protocol layer needs of a filesystem: fuse-backend-rs's `FileSystem` trait (its
/// methods, not its server) and [`OwnOps`] for what that trait has no method for.
pub trait ServedFs:
    FileSystem<Inode = u64, Handle = u64> + OwnOps + Sessions + Send + Sync + 'static
{
}

impl<T> ServedFs for T where
    T: FileSystem<Inode = u64, Handle = u64> + OwnOps + Sessions + Send + Sync + 'static
{
}
