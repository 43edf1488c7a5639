//! Host-side locks (FUSE_POSIX_LOCKS, FUSE_FLOCK_LOCKS): a guest's locks are real locks on the
//! host file, so another guest (through another daemon over the same branches) and host
//! processes see them.
//!
//! POSIX record locks belong to a lock owner (a guest process's file table), not to an open
//! file. Each (node, owner) gets its own open file description on the host, on which the
//! owner's locks are open-file-description locks (`F_OFD_*`): the same owner never conflicts
//! with itself, ranges merge and split as POSIX says, and they conflict with every other
//! owner's, and with host processes' classic POSIX locks. Closing that description (FLUSH or
//! RELEASE of the owner, DESTROY) releases the owner's locks, as POSIX's close does. flock
//! locks belong to the open file, so they are `flock(2)` on the handle's own descriptor.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};

use fuse_backend_rs::abi::fuse_abi::FileLock;
use rustix::fs::OFlags;

use crate::fs::errno;
use crate::fs::UnionFs;
use crate::sys::beneath;
use crate::sys::lock::{self, Kind, Range};

/// The host descriptions that carry each lock owner's POSIX locks.
#[derive(Default)]
pub struct LockOwners {
    map: Mutex<HashMap<(u64, u64), Arc<OwnedFd>>>,
}

impl LockOwners {
    /// Forgets `owner`'s description for `inode` (its locks go when the last user closes it).
    pub fn drop_owner(&self, inode: u64, owner: u64) {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(inode, owner));
    }

    /// Forgets every owner (DESTROY, device reset).
    pub fn clear(&self) {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// Number of owners holding a description (for tests).
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// The lock kind of a FUSE lock type (F_RDLCK, F_WRLCK, F_UNLCK), or EINVAL.
fn kind(t: u32) -> io::Result<Kind> {
    match t as i32 {
        libc::F_RDLCK => Ok(Kind::Read),
        libc::F_WRLCK => Ok(Kind::Write),
        libc::F_UNLCK => Ok(Kind::Unlock),
        _ => Err(errno(libc::EINVAL)),
    }
}

/// The byte range of a FUSE lock (`end` inclusive; u64::MAX or OFFSET_MAX = to the end).
fn range(lk: &FileLock) -> io::Result<Range> {
    if lk.start > i64::MAX as u64 || (lk.end < lk.start) {
        return Err(errno(libc::EINVAL));
    }
    let len = if lk.end >= i64::MAX as u64 {
        0
    } else {
        lk.end - lk.start + 1
    };
    Ok(Range {
        start: lk.start,
        len,
    })
}

/// The description carrying `owner`'s locks on `inode`, opened from handle `fh` the first time
/// (read-write where the host allows, else with the handle's own access mode).
fn owner_fd(fs: &UnionFs, inode: u64, fh: u64, owner: u64) -> io::Result<Arc<OwnedFd>> {
    if let Some(fd) = fs
        .locks
        .map
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&(inode, owner))
    {
        return Ok(fd.clone());
    }
    let h = fs.handles.file(fh, inode)?;
    let f = h.as_file()?;
    fs.check_handle_room()?;
    let opened = beneath::reopen(f.fd.as_fd(), OFlags::RDWR)
        .or_else(|_| beneath::reopen(f.fd.as_fd(), f.flags & OFlags::RWMODE))?;
    let fd = Arc::new(opened);
    let mut map = fs.locks.map.lock().unwrap_or_else(|e| e.into_inner());
    Ok(map.entry((inode, owner)).or_insert(fd).clone())
}

/// GETLK: the first lock that would conflict with `lk` for `owner` (type F_UNLCK if none).
/// Host processes' pids mean nothing to the guest: a conflicting lock reports pid 0.
pub fn getlk(fs: &UnionFs, inode: u64, fh: u64, owner: u64, lk: FileLock) -> io::Result<FileLock> {
    let fd = owner_fd(fs, inode, fh, owner)?;
    match lock::test(fd.as_fd(), kind(lk.type_)?, range(&lk)?)? {
        None => Ok(FileLock {
            type_: libc::F_UNLCK as u32,
            ..lk
        }),
        Some((k, r)) => Ok(FileLock {
            start: r.start,
            end: if r.len == 0 {
                i64::MAX as u64
            } else {
                r.start + r.len - 1
            },
            type_: match k {
                Kind::Read => libc::F_RDLCK as u32,
                _ => libc::F_WRLCK as u32,
            },
            pid: 0,
        }),
    }
}

/// SETLK/SETLKW: takes or releases `lk` for `owner` (POSIX) or for the handle (`flock`).
/// With `wait`, blocks until granted; `cancelled` is asked whenever the wait is interrupted
/// by a signal (FUSE_INTERRUPT, or the session ending): true answers EINTR.
#[allow(clippy::too_many_arguments)]
pub fn setlk(
    fs: &UnionFs,
    inode: u64,
    fh: u64,
    owner: u64,
    lk: FileLock,
    flock: bool,
    wait: bool,
    cancelled: &dyn Fn() -> bool,
) -> io::Result<()> {
    let k = kind(lk.type_)?;
    loop {
        // Interrupted before it could block (or between a wake-up and the next try).
        if wait && cancelled() {
            return Err(errno(libc::EINTR));
        }
        let r = if flock {
            let h = fs.handles.file(fh, inode)?;
            lock::flock(h.as_file()?.fd.as_fd(), k, wait)
        } else {
            let fd = owner_fd(fs, inode, fh, owner)?;
            lock::set(fd.as_fd(), k, range(&lk)?, wait)
        };
        match r {
            // Woken: the loop asks whether it was an interrupt.
            Err(e) if wait && e.raw_os_error() == Some(libc::EINTR) => {}
            // A non-blocking flock that conflicts says EWOULDBLOCK; FUSE wants EAGAIN (equal
            // on Linux) as for fcntl.
            r => return r,
        }
    }
}

/// FLUSH or RELEASE by `owner`: POSIX says closing any descriptor of a file releases all of
/// the closing process's locks on it.
pub fn release_owner(fs: &UnionFs, inode: u64, owner: u64) {
    fs.locks.drop_owner(inode, owner);
}
