//! Per-thread filesystem credentials. New entries must be owned by the guest caller, so create
//! operations run under an RAII guard that switches this thread's fsuid/fsgid and restores them.
//! `setfsuid`/`setfsgid` act on the calling thread only, so worker threads never race.

std::thread_local! {
    /// Whether this thread has dropped the daemon's supplementary groups.
    static GROUPS_DROPPED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Drops this thread's supplementary groups (once per thread), so a guest caller never acts
/// with the daemon's groups (CVE-2022-0358: a guest user creating set-group-ID files in a
/// group it is not in). The raw syscall changes only the calling thread; glibc's wrapper
/// would change every thread of the process.
fn drop_groups_once() {
    if GROUPS_DROPPED.with(|d| d.get()) {
        return;
    }
    // SAFETY: setgroups with a zero count reads no memory (the pointer is null).
    let r = unsafe { libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>()) };
    if r == 0 {
        GROUPS_DROPPED.with(|d| d.set(true));
    } else {
        log::warn!(
            "cannot drop supplementary groups: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Whether the daemon can act as its callers (it runs as root, of its user namespace too);
/// an unprivileged daemon acts only as itself.
pub fn acts_as_caller() -> bool {
    rustix::process::geteuid().is_root()
}

/// While alive, this thread's filesystem uid/gid are the guest caller's.
pub struct FsCredsGuard {
    restore: Option<(u32, u32)>,
}

impl FsCredsGuard {
    /// Whether this thread now acts with other ids than the daemon's (false for a caller that
    /// is root, and for an unprivileged daemon, which can act only as itself).
    pub fn switched(&self) -> bool {
        self.restore.is_some()
    }
}

/// While alive, this thread's supplementary groups are the ones given; afterwards none.
pub struct GroupsGuard(());

/// Gives this thread the supplementary groups `gids` (the raw syscall: this thread only).
pub fn with_groups(gids: &[u32]) -> std::io::Result<GroupsGuard> {
    // SAFETY: `gids` is a valid array of `gids.len()` gid_t values, alive for the call.
    let r = unsafe { libc::syscall(libc::SYS_setgroups, gids.len(), gids.as_ptr()) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(GroupsGuard(()))
}

impl Drop for GroupsGuard {
    fn drop(&mut self) {
        // SAFETY: a zero count reads no memory (the pointer is null).
        unsafe { libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>()) };
    }
}

/// While alive, this thread's filesystem ids are the daemon's (root's) again, inside a
/// [`switch_to`]: for what the daemon does on the caller's behalf but not as the caller (the
/// security label the guest's LSM chose for a new object). Does nothing where no switch is in
/// force.
pub fn as_daemon() -> FsCredsGuard {
    if !acts_as_caller() {
        return FsCredsGuard { restore: None };
    }
    // SAFETY: as in `switch_to`: plain integers, the previous ids returned.
    let old_uid = unsafe { libc::setfsuid(0) } as u32;
    // SAFETY: as above.
    let old_gid = unsafe { libc::setfsgid(0) } as u32;
    FsCredsGuard {
        restore: ((old_uid, old_gid) != (0, 0)).then_some((old_uid, old_gid)),
    }
}

/// Switches this thread's fsuid/fsgid to `uid`/`gid` when the daemon runs as root (of its user
/// namespace, too); otherwise (unprivileged daemon) does nothing and entries are owned by the
/// daemon's user. An id the user namespace does not map (the kernel then keeps the old id
/// silently) is EOVERFLOW, as the kernel answers for unmapped ids, never an act as root.
pub fn switch_to(uid: u32, gid: u32) -> std::io::Result<FsCredsGuard> {
    if (uid == 0 && gid == 0) || !acts_as_caller() {
        return Ok(FsCredsGuard { restore: None });
    }
    drop_groups_once();
    // SAFETY: setfsgid/setfsuid take plain integers, touch no memory and cannot fail in a way
    // that leaves memory unsafe; they return the previous id.
    let old_gid = unsafe { libc::setfsgid(gid) } as u32;
    // SAFETY: as above.
    let old_uid = unsafe { libc::setfsuid(uid) } as u32;
    let guard = FsCredsGuard {
        restore: Some((old_uid, old_gid)),
    };
    // SAFETY: as above; an invalid id (u32::MAX) changes nothing and returns the current one.
    let (now_uid, now_gid) = unsafe { (libc::setfsuid(u32::MAX), libc::setfsgid(u32::MAX)) };
    if (now_uid as u32, now_gid as u32) != (uid, gid) {
        return Err(std::io::Error::from_raw_os_error(libc::EOVERFLOW));
    }
    Ok(guard)
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
