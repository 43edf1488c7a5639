//! Record locks on open file descriptions (`F_OFD_*`) and `flock(2)`, never blocking: the
//! daemon waits for a lock itself (`fs/ops/lock.rs`), so that it can always end a wait.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// What a lock request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Shared.
    Read,
    /// Exclusive.
    Write,
    /// Release.
    Unlock,
}

/// A byte range: `len` 0 means to the end of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    /// First byte.
    pub start: u64,
    /// Length (0: to the end).
    pub len: u64,
}

fn flock_struct(kind: Kind, r: Range) -> io::Result<libc::flock> {
    let too_big = || io::Error::from_raw_os_error(libc::EINVAL);
    // SAFETY: flock is plain data; all-zero is a valid value (pid 0, as OFD locks require).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = match kind {
        Kind::Read => libc::F_RDLCK,
        Kind::Write => libc::F_WRLCK,
        Kind::Unlock => libc::F_UNLCK,
    } as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = i64::try_from(r.start).map_err(|_| too_big())?;
    fl.l_len = i64::try_from(r.len).map_err(|_| too_big())?;
    Ok(fl)
}

fn fcntl_lock(fd: BorrowedFd<'_>, cmd: libc::c_int, fl: &mut libc::flock) -> io::Result<()> {
    // SAFETY: `fl` is a valid, writable flock for the duration of the call.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), cmd, fl as *mut libc::flock) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Takes or releases `kind` on `r` for the description `fd` (F_OFD_SETLK): EAGAIN when another
/// description's lock conflicts.
pub fn set(fd: BorrowedFd<'_>, kind: Kind, r: Range) -> io::Result<()> {
    let mut fl = flock_struct(kind, r)?;
    fcntl_lock(fd, libc::F_OFD_SETLK, &mut fl)
}

/// The first lock that conflicts with `kind` on `r` for description `fd` (F_OFD_GETLK):
/// its kind and range, or None.
pub fn test(fd: BorrowedFd<'_>, kind: Kind, r: Range) -> io::Result<Option<(Kind, Range)>> {
    if kind == Kind::Unlock {
        return Ok(None);
    }
    let mut fl = flock_struct(kind, r)?;
    fcntl_lock(fd, libc::F_OFD_GETLK, &mut fl)?;
    let k = match i32::from(fl.l_type) {
        libc::F_UNLCK => return Ok(None),
        libc::F_RDLCK => Kind::Read,
        _ => Kind::Write,
    };
    Ok(Some((
        k,
        Range {
            start: fl.l_start.max(0) as u64,
            len: fl.l_len.max(0) as u64,
        },
    )))
}

/// flock(2) on `fd` with LOCK_NB: shared, exclusive or unlock; EWOULDBLOCK when another open
/// file's lock conflicts.
pub fn flock(fd: BorrowedFd<'_>, kind: Kind) -> io::Result<()> {
    let op = match kind {
        Kind::Read => libc::LOCK_SH,
        Kind::Write => libc::LOCK_EX,
        Kind::Unlock => libc::LOCK_UN,
    } | libc::LOCK_NB;
    // SAFETY: flock takes a descriptor and an integer.
    if unsafe { libc::flock(fd.as_raw_fd(), op) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
