//! Per-thread filesystem credentials. New entries must be owned by the guest caller, so create
//! operations run under an RAII guard that switches this thread's fsuid/fsgid and restores them.
//! `setfsuid`/`setfsgid` act on the calling thread only, so worker threads never race.

/// While alive, this thread's filesystem uid/gid are the guest caller's.
pub struct FsCredsGuard {
    restore: Option<(u32, u32)>,
}

/// Switches this thread's fsuid/fsgid to `uid`/`gid` when the daemon runs as root; otherwise
/// (unprivileged daemon) does nothing and entries are owned by the daemon's user.
pub fn switch_to(uid: u32, gid: u32) -> FsCredsGuard {
    if !rustix::process::geteuid().is_root() || (uid == 0 && gid == 0) {
        return FsCredsGuard { restore: None };
    }
    // SAFETY: setfsgid/setfsuid take plain integers, touch no memory and cannot fail in a way
    // that leaves memory unsafe; they return the previous id.
    let old_gid = unsafe { libc::setfsgid(gid) } as u32;
    // SAFETY: as above.
    let old_uid = unsafe { libc::setfsuid(uid) } as u32;
    FsCredsGuard {
        restore: Some((old_uid, old_gid)),
    }
}

impl Drop for FsCredsGuard {
    fn drop(&mut self) {
        if let Some((uid, gid)) = self.restore {
            // SAFETY: as in `switch_to`; restoring the ids saved there.
            unsafe {
                libc::setfsuid(uid);
                libc::setfsgid(gid);
            }
        }
    }
}
