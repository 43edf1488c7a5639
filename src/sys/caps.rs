//! Per-thread capability guards. With FUSE_HANDLE_KILLPRIV_V2 the daemon clears set-user-ID
//! and set-group-ID bits the way the host kernel does for an unprivileged writer: by acting
//! without CAP_FSETID for that one write, truncate or truncating open. Capabilities are
//! per-thread (capset on the calling thread), so other workers are unaffected.

use caps::{CapSet, Capability};

/// While alive, this thread acts without CAP_FSETID (restored on drop if it had it).
pub struct WithoutFsetid {
    restore: bool,
}

/// Drops CAP_FSETID from this thread's effective set until the guard is dropped. A thread
/// that does not have it (an unprivileged daemon, or fsuid switched away from root) is left
/// as it is: the kernel already clears the bits for it.
pub fn without_fsetid() -> WithoutFsetid {
    let had = caps::has_cap(None, CapSet::Effective, Capability::CAP_FSETID).unwrap_or(false);
    let restore = had && caps::drop(None, CapSet::Effective, Capability::CAP_FSETID).is_ok();
    WithoutFsetid { restore }
}

impl Drop for WithoutFsetid {
    fn drop(&mut self) {
        if self.restore {
            if let Err(e) = caps::raise(None, CapSet::Effective, Capability::CAP_FSETID) {
                log::error!("cannot restore CAP_FSETID on this thread: {e}");
            }
        }
    }
}

/// Whether the host kernel would clear privileges of a file with `mode` on a write or
/// truncate by a caller without CAP_FSETID: set-user-ID, or set-group-ID with group execute.
pub fn mode_has_privs(mode: u32) -> bool {
    mode & libc::S_ISUID != 0
        || mode & (libc::S_ISGID | libc::S_IXGRP) == (libc::S_ISGID | libc::S_IXGRP)
}

/// The capabilities a serving daemon keeps by default: virtiofsd's set. Acting for guest
/// callers of any uid needs CHOWN, DAC_OVERRIDE, FOWNER, FSETID, MKNOD and SETFCAP; switching
/// the per-thread filesystem ids needs SETUID and SETGID.
pub const SERVING: [Capability; 8] = [
    Capability::CAP_CHOWN,
    Capability::CAP_DAC_OVERRIDE,
    Capability::CAP_FOWNER,
    Capability::CAP_FSETID,
    Capability::CAP_SETGID,
    Capability::CAP_SETUID,
    Capability::CAP_MKNOD,
    Capability::CAP_SETFCAP,
];

/// Limits this thread (and every thread it starts later) to `keep`: the effective and permitted
/// sets become `keep` (less what the process does not have), the inheritable and ambient sets
/// are emptied and, where the process may, every other capability leaves the bounding set.
/// Returns the capabilities kept. Call before any other thread starts.
pub fn limit_to(keep: &[Capability]) -> std::io::Result<Vec<Capability>> {
    use std::collections::HashSet;
    let err = |e: caps::errors::CapsError| std::io::Error::other(e.to_string());
    let permitted = caps::read(None, CapSet::Permitted).map_err(err)?;
    let kept: HashSet<Capability> = keep
        .iter()
        .copied()
        .filter(|c| permitted.contains(c))
        .collect();
    if permitted.contains(&Capability::CAP_SETPCAP) {
        for cap in caps::all() {
            if !kept.contains(&cap) && caps::has_cap(None, CapSet::Bounding, cap).unwrap_or(false) {
                caps::drop(None, CapSet::Bounding, cap).map_err(err)?;
            }
        }
    }
    caps::clear(None, CapSet::Ambient).map_err(err)?;
    caps::clear(None, CapSet::Inheritable).map_err(err)?;
    caps::set(None, CapSet::Effective, &kept).map_err(err)?;
    caps::set(None, CapSet::Permitted, &kept).map_err(err)?;
    let mut v: Vec<Capability> = kept.into_iter().collect();
    v.sort_by_key(|c| c.index());
    Ok(v)
}
