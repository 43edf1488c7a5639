//! The host mount's [`BackingRegistrar`]: lends branch files to the kernel of its FUSE
//! connection for passthrough (`passthrough.io`), through a descriptor of the connection of
//! its own. Decides nothing: which opens use passthrough is the union's business.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::fs::passthrough::BackingRegistrar;
use crate::sys::fusedev::{backing_close, backing_open};

/// A descriptor of the mount's connection, used for its backing ioctls only.
pub struct Backing(pub OwnedFd);

impl BackingRegistrar for Backing {
    fn open(&self, file: BorrowedFd<'_>) -> io::Result<u32> {
        backing_open(self.0.as_fd(), file)
    }

    fn close(&self, id: u32) -> io::Result<()> {
        backing_close(self.0.as_fd(), id)
    }
}
