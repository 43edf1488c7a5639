//! The handle table: open files and directory snapshots, keyed by the FUSE file handle.
//! Handles are never reused, so a stale or forged handle from the guest gets EBADF.

use crate::sync::RwRecover;
use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use rustix::fs::OFlags;
use std::sync::{Arc, Mutex, RwLock};

use super::readdir_snapshot::DirSnapshot;

/// An open regular file on one branch.
pub struct FileHandle {
    /// The open host file (its number is stable; `moveonenospc` may swap the file behind it).
    pub fd: OwnedFd,
    /// The node it was opened for.
    pub inode: u64,
    /// The branch the file is on.
    pub branch: AtomicUsize,
    /// The host open flags, to reopen the file after a move.
    pub flags: OFlags,
}

/// An open directory: the merged listing, taken when the guest first reads it.
pub struct DirHandle {
    /// The node it was opened for.
    pub inode: u64,
    /// The listing, built on the first readdir at offset 0.
    pub snapshot: Mutex<Option<Arc<DirSnapshot>>>,
}

/// Either kind of handle.
pub enum Handle {
    /// A regular file.
    File(FileHandle),
    /// A directory.
    Dir(DirHandle),
}

/// Maps FUSE file handles to open files and directories.
pub struct HandleTable {
    map: RwLock<HashMap<u64, Arc<Handle>>>,
    next: AtomicU64,
}

impl Default for HandleTable {
    fn default() -> Self {
        HandleTable {
            map: RwLock::new(HashMap::new()),
            next: AtomicU64::new(1),
        }
    }
}

fn ebadf() -> io::Error {
    io::Error::from_raw_os_error(libc::EBADF)
}

impl HandleTable {
    /// Stores a handle and returns its number.
    pub fn insert(&self, h: Handle) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        self.map.writing().insert(fh, Arc::new(h));
        fh
    }

    /// The handle `fh`, or EBADF.
    pub fn get(&self, fh: u64) -> io::Result<Arc<Handle>> {
        self.map.reading().get(&fh).cloned().ok_or_else(ebadf)
    }

    /// The open file `fh` opened for `inode`, or EBADF (unknown, a directory, or another node's).
    pub fn file(&self, fh: u64, inode: u64) -> io::Result<Arc<Handle>> {
        let h = self.get(fh)?;
        match &*h {
            Handle::File(f) if f.inode == inode => Ok(h),
            _ => Err(ebadf()),
        }
    }

    /// Removes `fh`; EBADF if it was not there.
    pub fn remove(&self, fh: u64) -> io::Result<Arc<Handle>> {
        self.map.writing().remove(&fh).ok_or_else(ebadf)
    }

    /// Closes every handle (FUSE_DESTROY, device reset). Handle numbers are still never reused.
    pub fn clear(&self) {
        self.map.writing().clear();
    }

    /// Number of open handles (for tests and leak checks).
    pub fn len(&self) -> usize {
        self.map.reading().len()
    }
}

impl Handle {
    /// The file part, or EBADF for a directory handle.
    pub fn as_file(&self) -> io::Result<&FileHandle> {
        match self {
            Handle::File(f) => Ok(f),
            Handle::Dir(_) => Err(ebadf()),
        }
    }

    /// The directory part, or EBADF for a file handle.
    pub fn as_dir(&self) -> io::Result<&DirHandle> {
        match self {
            Handle::Dir(d) => Ok(d),
            Handle::File(_) => Err(ebadf()),
        }
    }
}
