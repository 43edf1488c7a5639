//! Per-thread process-context helpers for the vhost worker threads. No policy here.

use std::io;

/// Gives the calling thread its own filesystem context (cwd, root, umask), so later per-thread
/// umask changes do not leak into other threads.
pub fn unshare_fs() -> io::Result<()> {
    // SAFETY: unshare takes no pointers; CLONE_FS only detaches this thread's fs_struct.
    let ret = unsafe { libc::unshare(libc::CLONE_FS) };
    if ret == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sets the file mode creation mask of the calling thread's fs context (the whole process unless
/// [`unshare_fs`] was called) and returns the previous mask. Used once at startup: the guest
/// kernel applies the caller's umask itself, so the daemon must not apply another.
pub fn set_umask(mask: u32) -> u32 {
    // SAFETY: umask cannot fail and touches no memory.
    unsafe { libc::umask(mask as libc::mode_t) as u32 }
}

/// While alive, the calling thread's umask is the one given (a worker's own, after
/// [`unshare_fs`]); then the one before.
pub struct UmaskGuard(u32);

impl UmaskGuard {
    /// Sets `mask` (its permission bits) until the guard goes.
    pub fn new(mask: u32) -> Self {
        UmaskGuard(set_umask(mask & 0o777))
    }
}

impl Drop for UmaskGuard {
    fn drop(&mut self) {
        set_umask(self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unshare_then_umask_is_thread_local() {
        std::thread::spawn(|| {
            unshare_fs().unwrap();
            let old = set_umask(0o077);
            assert_eq!(set_umask(old), 0o077);
        })
        .join()
        .unwrap();
    }
}
