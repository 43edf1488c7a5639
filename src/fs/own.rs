//! The operations this project serves itself, outside fuse-backend-rs 0.14's `FileSystem`
//! (which does not dispatch them, or calls SETLK for SETLKW): host-side locks. The vhost
//! layer decodes each request once and calls these. Every method has a default answer
//! (ENOSYS), so a `FileSystem` that offers none (the dispatcher's test double) needs no code.

use std::io;

use fuse_backend_rs::abi::fuse_abi::FileLock;
use fuse_backend_rs::api::filesystem::Context;

fn enosys<T>() -> io::Result<T> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

/// See the module documentation.
pub trait OwnOps {
    /// GETLK: the lock that would conflict with `lk` for `owner` on `inode`'s handle `fh`.
    fn lock_get(
        &self,
        ctx: &Context,
        inode: u64,
        fh: u64,
        owner: u64,
        lk: FileLock,
    ) -> io::Result<FileLock> {
        let _ = (ctx, inode, fh, owner, lk);
        enosys()
    }

    /// SETLK/SETLKW (`wait`), POSIX or `flock`; a blocked wait that a signal interrupts asks
    /// `cancelled` and answers EINTR when it says so.
    #[allow(clippy::too_many_arguments)]
    fn lock_set(
        &self,
        ctx: &Context,
        inode: u64,
        fh: u64,
        owner: u64,
        lk: FileLock,
        flock: bool,
        wait: bool,
        cancelled: &dyn Fn() -> bool,
    ) -> io::Result<()> {
        let _ = (ctx, inode, fh, owner, lk, flock, wait, cancelled);
        enosys()
    }
}

impl OwnOps for super::UnionFs {
    fn lock_get(
        &self,
        _ctx: &Context,
        inode: u64,
        fh: u64,
        owner: u64,
        lk: FileLock,
    ) -> io::Result<FileLock> {
        if !self.cfg.opts.host_locks {
            return enosys();
        }
        super::ops::lock::getlk(self, inode, fh, owner, lk)
    }

    fn lock_set(
        &self,
        _ctx: &Context,
        inode: u64,
        fh: u64,
        owner: u64,
        lk: FileLock,
        flock: bool,
        wait: bool,
        cancelled: &dyn Fn() -> bool,
    ) -> io::Result<()> {
        if !self.cfg.opts.host_locks {
            return enosys();
        }
        super::ops::lock::setlk(self, inode, fh, owner, lk, flock, wait, cancelled)
    }
}
