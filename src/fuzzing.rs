//! Entry points for the fuzz targets in `fuzz/` (cargo feature `fuzzing`, hidden from the docs):
//! thin forwarding impls so that a target can serve requests through a [`Dispatcher`] while it
//! keeps its own handle on the filesystem to check it between sessions. No logic of its own;
//! never built into the daemon.
//!
//! [`Dispatcher`]: crate::vhost::Dispatcher

use std::io;
use std::sync::Arc;
use std::time::Duration;

use fuse_backend_rs::abi::fuse_abi::{stat64, CreateIn, FileLock, OpenOptions};
use fuse_backend_rs::api::filesystem::{Context, Entry};

use crate::fs::own::{Cancel, OwnOps, StatxExtra};
use crate::fs::session::{ExportOptions, ImportError, Imported, OnError, SessionImage, Sessions};

/// fuse-backend-rs serves `Arc<T>` as `T`'s `FileSystem`; this does the same for the
/// operations the daemon answers itself, so `Dispatcher::new(Arc::clone(&fs), …)` works.
impl<T: OwnOps> OwnOps for Arc<T> {
    fn lock_get(
        &self,
        ctx: &Context,
        inode: u64,
        fh: u64,
        owner: u64,
        lk: FileLock,
    ) -> io::Result<FileLock> {
        (**self).lock_get(ctx, inode, fh, owner, lk)
    }

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
        (**self).lock_set(ctx, inode, fh, owner, lk, flock, wait, cancelled)
    }

    fn wake_waits(&self) {
        (**self).wake_waits()
    }

    fn syncfs(&self, ctx: &Context, inode: u64) -> io::Result<()> {
        (**self).syncfs(ctx, inode)
    }

    fn statx(
        &self,
        ctx: &Context,
        inode: u64,
        fh: Option<u64>,
    ) -> io::Result<(stat64, Duration, StatxExtra)> {
        (**self).statx(ctx, inode, fh)
    }

    fn inode_ioctl(
        &self,
        ctx: &Context,
        inode: u64,
        fh: u64,
        cmd: u32,
        input: &[u8],
        out_size: u32,
    ) -> io::Result<Vec<u8>> {
        (**self).inode_ioctl(ctx, inode, fh, cmd, input, out_size)
    }

    fn tmpfile(
        &self,
        ctx: &Context,
        parent: u64,
        args: CreateIn,
    ) -> io::Result<(Entry, Option<u64>, OpenOptions)> {
        (**self).tmpfile(ctx, parent, args)
    }

    fn init_extra(&self, offered: u64) -> io::Result<u64> {
        (**self).init_extra(offered)
    }

    fn extra_flags(&self) -> u64 {
        (**self).extra_flags()
    }

    fn set_xattr(
        &self,
        ctx: &Context,
        inode: u64,
        name: &std::ffi::CStr,
        value: &[u8],
        flags: u32,
        setxattr_flags: u32,
    ) -> io::Result<()> {
        (**self).set_xattr(ctx, inode, name, value, flags, setxattr_flags)
    }

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
        (**self).copy_file_range(
            ctx, inode_in, fh_in, off_in, inode_out, fh_out, off_out, len, flags,
        )
    }
}

/// As for [`OwnOps`]: `Arc<T>` moves `T`'s session.
impl<T: Sessions> Sessions for Arc<T> {
    fn export(&self, opts: ExportOptions) -> SessionImage {
        (**self).export(opts)
    }

    fn import(&self, img: SessionImage, on_error: OnError) -> Result<Imported, ImportError> {
        (**self).import(img, on_error)
    }

    fn release_host_locks(&self) -> usize {
        (**self).release_host_locks()
    }

    fn retake_host_locks(&self) -> usize {
        (**self).retake_host_locks()
    }
}
