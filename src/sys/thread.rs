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

/// The signal that wakes a thread blocked in a lock wait (see [`wake`]).
const WAKE: libc::c_int = libc::SIGUSR2;

extern "C" fn on_wake(_: libc::c_int) {}

/// Installs a do-nothing handler for the wake signal, without SA_RESTART, so that a blocking
/// system call in the woken thread returns EINTR. Call once, before the seccomp filter.
pub fn install_wake_handler() -> io::Result<()> {
    // SAFETY: the sigaction is fully initialised (zeroed, then the handler and an empty
    // mask); the handler is async-signal-safe (it does nothing).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_wake as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(WAKE, &sa, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The calling thread, for [`wake`].
pub fn current() -> libc::pthread_t {
    // SAFETY: pthread_self cannot fail.
    unsafe { libc::pthread_self() }
}

/// Interrupts `thread`'s blocking system call (it returns EINTR). The caller must know that
/// `thread` is still running.
pub fn wake(thread: libc::pthread_t) {
    // SAFETY: the caller guarantees `thread` has not exited (pthread_kill on a live thread).
    unsafe { libc::pthread_kill(thread, WAKE) };
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
