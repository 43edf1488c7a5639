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
