//! The union's operations called the way the dispatcher calls them before a test looks at
//! what they did: each call one request of its own, as the guest caller `ctx`, seeing the view
//! of the branches current when it begins. Signatures as fuse-backend-rs's `FileSystem` had
//! them (a caller, not a request), so that a test reads as the guest's call.

use std::ffi::CStr;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use fuse_backend_rs::abi::fuse_abi::{
    stat64, statvfs64, CreateIn, FileLock, FsOptions, OpenOptions, SetattrValid,
};
use fuse_backend_rs::api::filesystem::{
    Context, DirEntry, Entry, GetxattrReply, ListxattrReply, ZeroCopyReader, ZeroCopyWriter,
};
use union_virtiofsd::fs::{UnionFs, View};
use union_virtiofsd::fuse::{Cancel, Filesystem, Request, StatxExtra};

/// A request of `ctx` that sees `view`.
fn request<'a>(ctx: &Context, view: &'a Arc<View>) -> Request<'a, Arc<View>> {
    Request {
        unique: 0,
        ctx: *ctx,
        secctx: None,
        view,
    }
}

/// See the module documentation.
#[allow(clippy::too_many_arguments)]
pub trait Calls {
    /// INIT with the guest's offer `capable`.
    fn init(&self, capable: FsOptions) -> io::Result<FsOptions>;
    /// DESTROY.
    fn destroy(&self);
    /// LOOKUP as the guest caller `ctx`.
    fn lookup(&self, ctx: &Context, parent: u64, name: &CStr) -> io::Result<Entry>;
    /// FORGET as the guest caller `ctx`.
    fn forget(&self, ctx: &Context, inode: u64, count: u64);
    /// BATCH_FORGET as the guest caller `ctx`.
    fn batch_forget(&self, ctx: &Context, requests: Vec<(u64, u64)>);
    /// GETATTR as the guest caller `ctx`.
    fn getattr(
        &self,
        ctx: &Context,
        inode: u64,
        handle: Option<u64>,
    ) -> io::Result<(stat64, Duration)>;
    /// SETATTR as the guest caller `ctx`.
    fn setattr(
        &self,
        ctx: &Context,
        inode: u64,
        attr: stat64,
        handle: Option<u64>,
        valid: SetattrValid,
    ) -> io::Result<(stat64, Duration)>;
    /// STATX as the guest caller `ctx`.
    fn statx(
        &self,
        ctx: &Context,
        inode: u64,
        handle: Option<u64>,
    ) -> io::Result<(stat64, Duration, StatxExtra)>;
    /// READLINK as the guest caller `ctx`.
    fn readlink(&self, ctx: &Context, inode: u64) -> io::Result<Vec<u8>>;
    /// ACCESS as the guest caller `ctx`.
    fn access(&self, ctx: &Context, inode: u64, mask: u32) -> io::Result<()>;
    /// SYMLINK as the guest caller `ctx`.
    fn symlink(
        &self,
        ctx: &Context,
        linkname: &CStr,
        parent: u64,
        name: &CStr,
    ) -> io::Result<Entry>;
    /// MKNOD as the guest caller `ctx`.
    fn mknod(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        mode: u32,
        rdev: u32,
        umask: u32,
    ) -> io::Result<Entry>;
    /// MKDIR as the guest caller `ctx`.
    fn mkdir(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        mode: u32,
        umask: u32,
    ) -> io::Result<Entry>;
    /// CREATE as the guest caller `ctx`.
    fn create(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        args: CreateIn,
    ) -> io::Result<(Entry, Option<u64>, OpenOptions, Option<u32>)>;
    /// UNLINK as the guest caller `ctx`.
    fn unlink(&self, ctx: &Context, parent: u64, name: &CStr) -> io::Result<()>;
    /// RMDIR as the guest caller `ctx`.
    fn rmdir(&self, ctx: &Context, parent: u64, name: &CStr) -> io::Result<()>;
    /// RENAME as the guest caller `ctx`.
    fn rename(
        &self,
        ctx: &Context,
        olddir: u64,
        oldname: &CStr,
        newdir: u64,
        newname: &CStr,
        flags: u32,
    ) -> io::Result<()>;
    /// LINK as the guest caller `ctx`.
    fn link(&self, ctx: &Context, inode: u64, newparent: u64, newname: &CStr) -> io::Result<Entry>;
    /// OPEN as the guest caller `ctx`.
    fn open(
        &self,
        ctx: &Context,
        inode: u64,
        flags: u32,
        fuse_flags: u32,
    ) -> io::Result<(Option<u64>, OpenOptions, Option<u32>)>;
    /// RELEASE as the guest caller `ctx`.
    fn release(
        &self,
        ctx: &Context,
        inode: u64,
        flags: u32,
        handle: u64,
        flush: bool,
        flock_release: bool,
        lock_owner: Option<u64>,
    ) -> io::Result<()>;
    /// FLUSH as the guest caller `ctx`.
    fn flush(&self, ctx: &Context, inode: u64, handle: u64, lock_owner: u64) -> io::Result<()>;
    /// FSYNC as the guest caller `ctx`.
    fn fsync(&self, ctx: &Context, inode: u64, datasync: bool, handle: u64) -> io::Result<()>;
    /// READ as the guest caller `ctx`.
    fn read(
        &self,
        ctx: &Context,
        inode: u64,
        handle: u64,
        w: &mut dyn ZeroCopyWriter,
        size: u32,
        offset: u64,
        lock_owner: Option<u64>,
        flags: u32,
    ) -> io::Result<usize>;
    /// WRITE as the guest caller `ctx`.
    fn write(
        &self,
        ctx: &Context,
        inode: u64,
        handle: u64,
        r: &mut dyn ZeroCopyReader,
        size: u32,
        offset: u64,
        lock_owner: Option<u64>,
        delayed_write: bool,
        flags: u32,
        fuse_flags: u32,
    ) -> io::Result<usize>;
    /// FALLOCATE as the guest caller `ctx`.
    fn fallocate(
        &self,
        ctx: &Context,
        inode: u64,
        handle: u64,
        mode: u32,
        offset: u64,
        length: u64,
    ) -> io::Result<()>;
    /// LSEEK as the guest caller `ctx`.
    fn lseek(
        &self,
        ctx: &Context,
        inode: u64,
        handle: u64,
        offset: u64,
        whence: u32,
    ) -> io::Result<u64>;
    /// COPY_FILE_RANGE as the guest caller `ctx`.
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
    ) -> io::Result<usize>;
    /// STATFS as the guest caller `ctx`.
    fn statfs(&self, ctx: &Context, inode: u64) -> io::Result<statvfs64>;
    /// OPENDIR as the guest caller `ctx`.
    fn opendir(
        &self,
        ctx: &Context,
        inode: u64,
        flags: u32,
    ) -> io::Result<(Option<u64>, OpenOptions)>;
    /// READDIR as the guest caller `ctx`.
    fn readdir(
        &self,
        ctx: &Context,
        inode: u64,
        handle: u64,
        size: u32,
        offset: u64,
        add_entry: &mut dyn FnMut(DirEntry) -> io::Result<usize>,
    ) -> io::Result<()>;
    /// READDIRPLUS as the guest caller `ctx`.
    fn readdirplus(
        &self,
        ctx: &Context,
        inode: u64,
        handle: u64,
        size: u32,
        offset: u64,
        add_entry: &mut dyn FnMut(DirEntry, Entry) -> io::Result<usize>,
    ) -> io::Result<()>;
    /// RELEASEDIR as the guest caller `ctx`.
    fn releasedir(&self, ctx: &Context, inode: u64, flags: u32, handle: u64) -> io::Result<()>;
    /// FSYNCDIR as the guest caller `ctx`.
    fn fsyncdir(&self, ctx: &Context, inode: u64, datasync: bool, handle: u64) -> io::Result<()>;
    /// GETXATTR as the guest caller `ctx`.
    fn getxattr(
        &self,
        ctx: &Context,
        inode: u64,
        name: &CStr,
        size: u32,
    ) -> io::Result<GetxattrReply>;
    /// LISTXATTR as the guest caller `ctx`.
    fn listxattr(&self, ctx: &Context, inode: u64, size: u32) -> io::Result<ListxattrReply>;
    /// REMOVEXATTR as the guest caller `ctx`.
    fn removexattr(&self, ctx: &Context, inode: u64, name: &CStr) -> io::Result<()>;
    /// SETXATTR (without FUSE_SETXATTR_EXT's flags).
    fn setxattr(
        &self,
        ctx: &Context,
        inode: u64,
        name: &CStr,
        value: &[u8],
        flags: u32,
    ) -> io::Result<()>;
    /// SETLK/SETLKW as the guest caller `ctx`.
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
    ) -> io::Result<()>;
}

#[allow(clippy::too_many_arguments)]
impl Calls for UnionFs {
    fn init(&self, capable: FsOptions) -> io::Result<FsOptions> {
        Filesystem::init(self, capable)
    }

    fn destroy(&self) {
        Filesystem::destroy(self)
    }

    fn lookup(&self, ctx: &Context, parent: u64, name: &CStr) -> io::Result<Entry> {
        let view = self.view();
        Filesystem::lookup(self, &request(ctx, &view), parent, name)
    }

    fn forget(&self, ctx: &Context, inode: u64, count: u64) {
        let view = self.view();
        Filesystem::forget(self, &request(ctx, &view), inode, count)
    }

    fn batch_forget(&self, ctx: &Context, requests: Vec<(u64, u64)>) {
        let view = self.view();
        Filesystem::batch_forget(self, &request(ctx, &view), requests)
    }

    fn getattr(
        &self,
        ctx: &Context,
        inode: u64,
        handle: Option<u64>,
    ) -> io::Result<(stat64, Duration)> {
        let view = self.view();
        Filesystem::getattr(self, &request(ctx, &view), inode, handle)
    }

    fn setattr(
        &self,
        ctx: &Context,
        inode: u64,
        attr: stat64,
        handle: Option<u64>,
        valid: SetattrValid,
    ) -> io::Result<(stat64, Duration)> {
        let view = self.view();
        Filesystem::setattr(self, &request(ctx, &view), inode, attr, handle, valid)
    }

    fn statx(
        &self,
        ctx: &Context,
        inode: u64,
        handle: Option<u64>,
    ) -> io::Result<(stat64, Duration, StatxExtra)> {
        let view = self.view();
        Filesystem::statx(self, &request(ctx, &view), inode, handle)
    }

    fn readlink(&self, ctx: &Context, inode: u64) -> io::Result<Vec<u8>> {
        let view = self.view();
        Filesystem::readlink(self, &request(ctx, &view), inode)
    }

    fn access(&self, ctx: &Context, inode: u64, mask: u32) -> io::Result<()> {
        let view = self.view();
        Filesystem::access(self, &request(ctx, &view), inode, mask)
    }

    fn symlink(
        &self,
        ctx: &Context,
        linkname: &CStr,
        parent: u64,
        name: &CStr,
    ) -> io::Result<Entry> {
        let view = self.view();
        Filesystem::symlink(self, &request(ctx, &view), linkname, parent, name)
    }

    fn mknod(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        mode: u32,
        rdev: u32,
        umask: u32,
    ) -> io::Result<Entry> {
        let view = self.view();
        Filesystem::mknod(self, &request(ctx, &view), parent, name, mode, rdev, umask)
    }

    fn mkdir(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        mode: u32,
        umask: u32,
    ) -> io::Result<Entry> {
        let view = self.view();
        Filesystem::mkdir(self, &request(ctx, &view), parent, name, mode, umask)
    }

    fn create(
        &self,
        ctx: &Context,
        parent: u64,
        name: &CStr,
        args: CreateIn,
    ) -> io::Result<(Entry, Option<u64>, OpenOptions, Option<u32>)> {
        let view = self.view();
        Filesystem::create(self, &request(ctx, &view), parent, name, args)
    }

    fn unlink(&self, ctx: &Context, parent: u64, name: &CStr) -> io::Result<()> {
        let view = self.view();
        Filesystem::unlink(self, &request(ctx, &view), parent, name)
    }

    fn rmdir(&self, ctx: &Context, parent: u64, name: &CStr) -> io::Result<()> {
        let view = self.view();
        Filesystem::rmdir(self, &request(ctx, &view), parent, name)
    }

    fn rename(
        &self,
        ctx: &Context,
        olddir: u64,
        oldname: &CStr,
        newdir: u64,
        newname: &CStr,
        flags: u32,
    ) -> io::Result<()> {
        let view = self.view();
        Filesystem::rename(
            self,
            &request(ctx, &view),
            olddir,
            oldname,
            newdir,
            newname,
            flags,
        )
    }

    fn link(&self, ctx: &Context, inode: u64, newparent: u64, newname: &CStr) -> io::Result<Entry> {
        let view = self.view();
        Filesystem::link(self, &request(ctx, &view), inode, newparent, newname)
    }

    fn open(
        &self,
        ctx: &Context,
        inode: u64,
        flags: u32,
        fuse_flags: u32,
    ) -> io::Result<(Option<u64>, OpenOptions, Option<u32>)> {
        let view = self.view();
        Filesystem::open(self, &request(ctx, &view), inode, flags, fuse_flags)
    }

    fn release(
        &self,
        ctx: &Context,
        inode: u64,
        flags: u32,
        handle: u64,
        flush: bool,
        flock_release: bool,
        lock_owner: Option<u64>,
    ) -> io::Result<()> {
        let view = self.view();
        Filesystem::release(
            self,
            &request(ctx, &view),
            inode,
            flags,
            handle,
            flush,
            flock_release,
            lock_owner,
        )
    }

    fn flush(&self, ctx: &Context, inode: u64, handle: u64, lock_owner: u64) -> io::Result<()> {
        let view = self.view();
        Filesystem::flush(self, &request(ctx, &view), inode, handle, lock_owner)
    }

    fn fsync(&self, ctx: &Context, inode: u64, datasync: bool, handle: u64) -> io::Result<()> {
        let view = self.view();
        Filesystem::fsync(self, &request(ctx, &view), inode, datasync, handle)
    }

    fn read(
        &self,
        ctx: &Context,
        inode: u64,
        handle: u64,
        w: &mut dyn ZeroCopyWriter,
        size: u32,
        offset: u64,
        lock_owner: Option<u64>,
        flags: u32,
    ) -> io::Result<usize> {
        let view = self.view();
        Filesystem::read(
            self,
            &request(ctx, &view),
            inode,
            handle,
            w,
            size,
            offset,
            lock_owner,
            flags,
        )
    }

    fn write(
        &self,
        ctx: &Context,
        inode: u64,
        handle: u64,
        r: &mut dyn ZeroCopyReader,
        size: u32,
        offset: u64,
        lock_owner: Option<u64>,
        delayed_write: bool,
        flags: u32,
        fuse_flags: u32,
    ) -> io::Result<usize> {
        let view = self.view();
        Filesystem::write(
            self,
            &request(ctx, &view),
            inode,
            handle,
            r,
            size,
            offset,
            lock_owner,
            delayed_write,
            flags,
            fuse_flags,
        )
    }

    fn fallocate(
        &self,
        ctx: &Context,
        inode: u64,
        handle: u64,
        mode: u32,
        offset: u64,
        length: u64,
    ) -> io::Result<()> {
        let view = self.view();
        Filesystem::fallocate(
            self,
            &request(ctx, &view),
            inode,
            handle,
            mode,
            offset,
            length,
        )
    }

    fn lseek(
        &self,
        ctx: &Context,
        inode: u64,
        handle: u64,
        offset: u64,
        whence: u32,
    ) -> io::Result<u64> {
        let view = self.view();
        Filesystem::lseek(self, &request(ctx, &view), inode, handle, offset, whence)
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
        let view = self.view();
        Filesystem::copy_file_range(
            self,
            &request(ctx, &view),
            inode_in,
            fh_in,
            off_in,
            inode_out,
            fh_out,
            off_out,
            len,
            flags,
        )
    }

    fn statfs(&self, ctx: &Context, inode: u64) -> io::Result<statvfs64> {
        let view = self.view();
        Filesystem::statfs(self, &request(ctx, &view), inode)
    }

    fn opendir(
        &self,
        ctx: &Context,
        inode: u64,
        flags: u32,
    ) -> io::Result<(Option<u64>, OpenOptions)> {
        let view = self.view();
        Filesystem::opendir(self, &request(ctx, &view), inode, flags)
    }

    fn readdir(
        &self,
        ctx: &Context,
        inode: u64,
        handle: u64,
        size: u32,
        offset: u64,
        add_entry: &mut dyn FnMut(DirEntry) -> io::Result<usize>,
    ) -> io::Result<()> {
        let view = self.view();
        Filesystem::readdir(
            self,
            &request(ctx, &view),
            inode,
            handle,
            size,
            offset,
            add_entry,
        )
    }

    fn readdirplus(
        &self,
        ctx: &Context,
        inode: u64,
        handle: u64,
        size: u32,
        offset: u64,
        add_entry: &mut dyn FnMut(DirEntry, Entry) -> io::Result<usize>,
    ) -> io::Result<()> {
        let view = self.view();
        Filesystem::readdirplus(
            self,
            &request(ctx, &view),
            inode,
            handle,
            size,
            offset,
            add_entry,
        )
    }

    fn releasedir(&self, ctx: &Context, inode: u64, flags: u32, handle: u64) -> io::Result<()> {
        let view = self.view();
        Filesystem::releasedir(self, &request(ctx, &view), inode, flags, handle)
    }

    fn fsyncdir(&self, ctx: &Context, inode: u64, datasync: bool, handle: u64) -> io::Result<()> {
        let view = self.view();
        Filesystem::fsyncdir(self, &request(ctx, &view), inode, datasync, handle)
    }

    fn getxattr(
        &self,
        ctx: &Context,
        inode: u64,
        name: &CStr,
        size: u32,
    ) -> io::Result<GetxattrReply> {
        let view = self.view();
        Filesystem::getxattr(self, &request(ctx, &view), inode, name, size)
    }

    fn listxattr(&self, ctx: &Context, inode: u64, size: u32) -> io::Result<ListxattrReply> {
        let view = self.view();
        Filesystem::listxattr(self, &request(ctx, &view), inode, size)
    }

    fn removexattr(&self, ctx: &Context, inode: u64, name: &CStr) -> io::Result<()> {
        let view = self.view();
        Filesystem::removexattr(self, &request(ctx, &view), inode, name)
    }

    fn setxattr(
        &self,
        ctx: &Context,
        inode: u64,
        name: &CStr,
        value: &[u8],
        flags: u32,
    ) -> io::Result<()> {
        let view = self.view();
        Filesystem::setxattr(self, &request(ctx, &view), inode, name, value, flags, 0)
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
        let view = self.view();
        Filesystem::setlk(
            self,
            &request(ctx, &view),
            inode,
            fh,
            owner,
            lk,
            flock,
            wait,
            cancelled,
        )
    }
}
