//! The operations this project serves itself, outside fuse-backend-rs 0.14's `FileSystem`
//! (which does not dispatch them, or calls SETLK for SETLKW): host-side locks, SYNCFS, STATX,
//! COPY_FILE_RANGE, TMPFILE, IOCTL, SETXATTR (with FUSE_SETXATTR_EXT) and what INIT settles
//! beyond fuse-backend-rs's names (POSIX ACLs, security contexts). The vhost
//! layer decodes each request once and calls these. Every method has a default answer
//! (ENOSYS), so a `FileSystem` that offers none (the dispatcher's test double) needs no code.

use std::ffi::CStr;
use std::io;
use std::time::Duration;

use fuse_backend_rs::abi::fuse_abi::{stat64, CreateIn, FileLock, OpenOptions};
use fuse_backend_rs::api::filesystem::{Context, Entry};

pub use super::ops::attr::Extra as StatxExtra;

fn enosys<T>() -> io::Result<T> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

/// Why a waiting request was cancelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancel {
    /// FUSE_INTERRUPT, or the end of the session: EINTR (the guest restarts the call, or it
    /// is gone).
    Interrupt,
    /// Its ring is being stopped (a migration, a snapshot, a pause) and must not keep a request
    /// in flight: the wait ends as a lock wait that found no way through (EDEADLK for POSIX,
    /// ENOLCK for flock), which programs handle, where EINTR without a signal would reach them
    /// as errno 512.
    RingStop,
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

    /// SETLK/SETLKW (`wait`), POSIX or `flock`; a waiting request asks `cancelled` whenever
    /// it is woken ([`OwnOps::wake_waits`]) and ends as [`Cancel`] says.
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
        cancelled: &dyn Fn() -> Option<Cancel>,
    ) -> io::Result<()> {
        let _ = (ctx, inode, fh, owner, lk, flock, wait, cancelled);
        enosys()
    }

    /// Wakes every waiting SETLKW to ask its `cancelled` again (after FUSE_INTERRUPT, or at
    /// the end of the session).
    fn wake_waits(&self) {}

    /// Called before each request: what it returns lives while the request is served (the
    /// union pins the branch set and options the request sees).
    fn begin_request(&self) -> Option<super::ViewScope> {
        None
    }

    /// SYNCFS: flush every filesystem written through.
    fn syncfs(&self, ctx: &Context, inode: u64) -> io::Result<()> {
        let _ = (ctx, inode);
        enosys()
    }

    /// STATX: GETATTR's attributes (from open file `fh` if given) plus birth time and flags.
    fn statx(
        &self,
        ctx: &Context,
        inode: u64,
        fh: Option<u64>,
    ) -> io::Result<(stat64, Duration, StatxExtra)> {
        let _ = (ctx, inode, fh);
        enosys()
    }

    /// IOCTL `cmd` on open file `fh` with `input`: the `out_size` bytes to return.
    fn inode_ioctl(
        &self,
        ctx: &Context,
        inode: u64,
        fh: u64,
        cmd: u32,
        input: &[u8],
        out_size: u32,
    ) -> io::Result<Vec<u8>> {
        let _ = (ctx, inode, fh, cmd, input, out_size);
        Err(io::Error::from_raw_os_error(libc::ENOTTY))
    }

    /// TMPFILE: an unnamed file in `parent`, opened (as CREATE answers).
    fn tmpfile(
        &self,
        ctx: &Context,
        parent: u64,
        args: CreateIn,
    ) -> io::Result<(Entry, Option<u64>, OpenOptions)> {
        let _ = (ctx, parent, args);
        enosys()
    }

    /// INIT, after `FileSystem::init`: the INIT flags fuse-backend-rs cannot name to enable
    /// for a guest offering `offered` (`flags | flags2 << 32`).
    fn init_extra(&self, offered: u64) -> io::Result<u64> {
        let _ = offered;
        Ok(0)
    }

    /// The flags [`OwnOps::init_extra`] enabled for the session being served (a moved
    /// session's too).
    fn extra_flags(&self) -> u64 {
        0
    }

    /// SETXATTR, with FUSE_SETXATTR_EXT's `setxattr_flags` (0 without it).
    #[allow(clippy::too_many_arguments)]
    fn set_xattr(
        &self,
        ctx: &Context,
        inode: u64,
        name: &CStr,
        value: &[u8],
        flags: u32,
        setxattr_flags: u32,
    ) -> io::Result<()> {
        let _ = (ctx, inode, name, value, flags, setxattr_flags);
        enosys()
    }

    /// COPY_FILE_RANGE: bytes copied between two open files.
    #[allow(clippy::too_many_arguments)]
    fn copy_file_range(
        &self,
        ctx: &Context,
        inode_in: u64,
        fh_in: u64,
        off_in: u64,
        inode_out: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
        flags: u64,
    ) -> io::Result<usize> {
        let _ = (
            ctx, inode_in, fh_in, off_in, inode_out, fh_out, off_out, len, flags,
        );
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
        if !self.view().opts.host_locks {
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
        cancelled: &dyn Fn() -> Option<Cancel>,
    ) -> io::Result<()> {
        if !self.view().opts.host_locks {
            return enosys();
        }
        super::ops::lock::setlk(self, inode, fh, owner, lk, flock, wait, cancelled)
    }

    fn begin_request(&self) -> Option<super::ViewScope> {
        Some(self.pin_view())
    }

    fn wake_waits(&self) {
        self.locks.wake();
    }

    fn syncfs(&self, _ctx: &Context, _inode: u64) -> io::Result<()> {
        super::ops::sync::syncfs(self)
    }

    fn statx(
        &self,
        _ctx: &Context,
        inode: u64,
        fh: Option<u64>,
    ) -> io::Result<(stat64, Duration, StatxExtra)> {
        let (st, t, x) = super::ops::attr::statx(self, inode, fh)?;
        Ok((self.guest_stat(st), t, x))
    }

    #[allow(clippy::too_many_arguments)]
    fn copy_file_range(
        &self,
        _ctx: &Context,
        inode_in: u64,
        fh_in: u64,
        off_in: u64,
        inode_out: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
        flags: u64,
    ) -> io::Result<usize> {
        super::ops::copy::copy_file_range(
            self, inode_in, fh_in, off_in, inode_out, fh_out, off_out, len, flags,
        )
    }

    fn inode_ioctl(
        &self,
        _ctx: &Context,
        inode: u64,
        fh: u64,
        cmd: u32,
        input: &[u8],
        out_size: u32,
    ) -> io::Result<Vec<u8>> {
        super::ops::ioctl::ioctl(self, inode, fh, cmd, input, out_size)
    }

    fn init_extra(&self, offered: u64) -> io::Result<u64> {
        self.negotiated.init_extra(&self.view().opts, offered)
    }

    fn extra_flags(&self) -> u64 {
        self.negotiated.extra().bits
    }

    fn set_xattr(
        &self,
        ctx: &Context,
        inode: u64,
        name: &CStr,
        value: &[u8],
        flags: u32,
        setxattr_flags: u32,
    ) -> io::Result<()> {
        let ctx = &self.host_ctx(ctx)?;
        super::ops::xattr::setxattr(self, ctx, inode, name, value, flags, setxattr_flags)
    }

    fn tmpfile(
        &self,
        ctx: &Context,
        parent: u64,
        args: CreateIn,
    ) -> io::Result<(Entry, Option<u64>, OpenOptions)> {
        let ctx = &self.host_ctx(ctx)?;
        super::ops::create::tmpfile(self, ctx, parent, args)
            .map(|(e, h, o)| (self.guest_entry(e), h, o))
    }
}
