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
use crate::fs::BranchId;

/// An open regular file on one branch.
pub struct FileHandle {
    /// The open host file (its number is stable; `moveonenospc` may swap the file behind it).
    pub fd: OwnedFd,
    /// The node it was opened for.
    pub inode: u64,
    /// The branch the file is on (a `moveonenospc` move changes it: [`FileHandle::moved`]).
    branch: AtomicUsize,
    /// The host open flags, to reopen the file after a move.
    pub flags: OFlags,
    /// Opened by the kernel to execute the file (`__FMODE_EXEC`): it stays open while the
    /// program runs.
    exec: bool,
}

impl FileHandle {
    /// `fd`, opened with `flags` for node `inode` on branch `branch`.
    pub(crate) fn new(fd: OwnedFd, inode: u64, branch: BranchId, flags: OFlags) -> Self {
        FileHandle {
            fd,
            inode,
            branch: AtomicUsize::new(branch.raw()),
            flags,
            exec: false,
        }
    }

    /// The same, opened by the kernel to execute the file when `exec`.
    pub(crate) fn for_exec(mut self, exec: bool) -> Self {
        self.exec = exec;
        self
    }

    /// The branch the file is on now.
    pub(crate) fn branch(&self) -> BranchId {
        BranchId::from_raw(self.branch.load(Ordering::Acquire))
    }

    /// Records that the file now lives on branch `to` (after a `moveonenospc` move).
    pub(crate) fn moved(&self, to: BranchId) {
        self.branch.store(to.raw(), Ordering::Release);
    }

    /// Whether the file was opened for writing (a change through it is the caller's right).
    pub fn is_writable(&self) -> bool {
        self.flags.intersects(OFlags::WRONLY | OFlags::RDWR)
    }
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
    /// A file or directory not found again after a migration (`--migration-on-error=
    /// guest-error`): every use but its release answers EIO.
    Lost {
        /// The node it was opened for.
        inode: u64,
    },
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

fn eio() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
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
            Handle::Lost { inode: i } if *i == inode => Err(eio()),
            _ => Err(ebadf()),
        }
    }

    /// Whether `inode` is open for an exec: a program runs from it (ETXTBSY for a truncate).
    /// Scans every handle: only a truncating open without write access asks.
    pub fn executing(&self, inode: u64) -> bool {
        self.map
            .reading()
            .values()
            .any(|h| matches!(&**h, Handle::File(f) if f.inode == inode && f.exec))
    }

    /// Removes `fh` if it is a lost handle of `inode` (its release); whether it was.
    pub fn remove_lost(&self, fh: u64, inode: u64) -> bool {
        let mut map = self.map.writing();
        let lost =
            matches!(map.get(&fh).map(|h| &**h), Some(Handle::Lost { inode: i }) if *i == inode);
        if lost {
            map.remove(&fh);
        }
        lost
    }

    /// Every handle with its number, in number order, and the next number (for a session
    /// image).
    pub fn entries(&self) -> (Vec<(u64, Arc<Handle>)>, u64) {
        let map = self.map.reading();
        let mut out: Vec<_> = map.iter().map(|(k, v)| (*k, v.clone())).collect();
        out.sort_unstable_by_key(|e| e.0);
        (out, self.next.load(Ordering::Relaxed))
    }

    /// Replaces every handle with `entries`; numbers continue from `next` (never below the
    /// numbers already given out, so none is reused).
    pub fn restore(&self, entries: Vec<(u64, Handle)>, next: u64) {
        let mut map = self.map.writing();
        map.clear();
        let top = entries.iter().map(|e| e.0 + 1).max().unwrap_or(1);
        for (fh, h) in entries {
            map.insert(fh, Arc::new(h));
        }
        self.next.fetch_max(next.max(top), Ordering::Relaxed);
    }

    /// Removes `fh`; EBADF if it was not there.
    pub fn remove(&self, fh: u64) -> io::Result<Arc<Handle>> {
        self.map.writing().remove(&fh).ok_or_else(ebadf)
    }

    /// Closes every handle (FUSE_DESTROY, device reset). Handle numbers are still never reused.
    pub fn clear(&self) {
        self.map.writing().clear();
    }

    /// Whether some open file (or lost) handle of `inode` is left.
    pub fn any_file_of(&self, inode: u64) -> bool {
        self.map.reading().values().any(|h| match &**h {
            Handle::File(f) => f.inode == inode,
            Handle::Lost { inode: i } => *i == inode,
            _ => false,
        })
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
            Handle::Lost { .. } => Err(eio()),
        }
    }

    /// The directory part, or EBADF for a file handle.
    pub fn as_dir(&self) -> io::Result<&DirHandle> {
        match self {
            Handle::Dir(d) => Ok(d),
            Handle::File(_) => Err(ebadf()),
            Handle::Lost { .. } => Err(eio()),
        }
    }
}
