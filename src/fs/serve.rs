//! The union as the protocol layer's [`Filesystem`]: each method maps the caller's ids, takes
//! the request's [`Call`] (the view it pinned, the security context it carries) and delegates
//! to `ops/<family>.rs`; ids in what goes back are the guest's.

use std::ffi::CStr;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use fuse_backend_rs::abi::fuse_abi::{
    stat64, statvfs64, CreateIn, FileLock, FsOptions, OpenOptions, SetattrValid,
};
use fuse_backend_rs::api::filesystem::{
    DirEntry, Entry, GetxattrReply, ListxattrReply, ZeroCopyReader, ZeroCopyWriter,
};

use super::call::Call;
use super::view::View;
use super::{errno, forbidden, ops, UnionFs};
use crate::fuse::{Cancel, Filesystem, Req, Request, StatxExtra};

impl UnionFs {
    /// The call serving `req`.
    fn on<'a>(&'a self, req: &'a Request<'a, Arc<View>>) -> Call<'a> {
        self.call(req.view, req.secctx)
    }
}

#[allow(clippy::too_many_arguments)]
impl Filesystem for UnionFs {
    type View = Arc<View>;

    fn view(&self) -> Arc<View> {
        self.now()
    }

    fn init(&self, capable: FsOptions) -> io::Result<FsOptions> {
        // An INIT while a session holds nodes or handles: the guest was reset without a
        // DESTROY or a device reset (a hard reboot, a crash, kexec). Its kernel forgot
        // everything, so the old session ends here as a DESTROY would end it.
        self.destroy();
        // Whether each branch's nodes use file handles, worked out (and logged) now, in the
        // serving process.
        self.call(&self.now(), None).probe_branches();
        Ok(self.negotiated.init(&self.now().opts, capable))
    }

    fn destroy(&self) {
        // The session is over (FUSE_DESTROY, or the device was reset by a guest reboot): the
        // guest holds nothing any more, so every node and handle goes, descriptors included.
        let (nodes, handles) = (self.inode_count().saturating_sub(1), self.handle_count());
        let locks = self.locks.clear();
        if nodes > 0 || handles > 0 || locks > 0 {
            log::info!("session ended: dropped {nodes} nodes and {handles} handles, {locks} locks");
        }
        self.passthrough.clear();
        self.node_listings.clear();
        self.handles.clear();
        self.inodes.clear();
    }

    fn lookup(&self, req: Req<'_, '_, Self>, parent: u64, name: &CStr) -> io::Result<Entry> {
        ops::lookup::lookup(&self.on(req), parent, name).map(|e| self.guest_entry(e))
    }

    fn forget(&self, _req: Req<'_, '_, Self>, inode: u64, count: u64) {
        self.inodes.forget(inode, count);
    }

    fn batch_forget(&self, _req: Req<'_, '_, Self>, requests: Vec<(u64, u64)>) {
        for (inode, count) in requests {
            self.inodes.forget(inode, count);
        }
    }

    fn getattr(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        handle: Option<u64>,
    ) -> io::Result<(stat64, Duration)> {
        ops::attr::getattr(&self.on(req), inode, handle).map(|(st, t)| (self.guest_stat(st), t))
    }

    fn setattr(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        attr: stat64,
        handle: Option<u64>,
        valid: SetattrValid,
    ) -> io::Result<(stat64, Duration)> {
        let ctx = &self.host_ctx(&req.ctx)?;
        let mut attr = attr;
        if valid.contains(SetattrValid::UID) {
            attr.st_uid = self.cfg.ids.uid.to_host(attr.st_uid).map_err(forbidden)?;
        }
        if valid.contains(SetattrValid::GID) {
            attr.st_gid = self.cfg.ids.gid.to_host(attr.st_gid).map_err(forbidden)?;
        }
        ops::attr::setattr(&self.on(req), ctx, inode, attr, handle, valid)
            .map(|(st, t)| (self.guest_stat(st), t))
    }

    fn readlink(&self, req: Req<'_, '_, Self>, inode: u64) -> io::Result<Vec<u8>> {
        ops::attr::readlink(&self.on(req), inode)
    }

    fn access(&self, req: Req<'_, '_, Self>, inode: u64, mask: u32) -> io::Result<()> {
        ops::attr::access(&self.on(req), &self.host_ctx(&req.ctx)?, inode, mask)
    }

    fn symlink(
        &self,
        req: Req<'_, '_, Self>,
        linkname: &CStr,
        parent: u64,
        name: &CStr,
    ) -> io::Result<Entry> {
        let new = ops::create::NewEntry {
            umask: None,
            label: req.secctx.cloned(),
        };
        ops::create::symlink(
            &self.on(req),
            &self.host_ctx(&req.ctx)?,
            linkname,
            parent,
            name,
            &new,
        )
        .map(|e| self.guest_entry(e))
    }

    fn mknod(
        &self,
        req: Req<'_, '_, Self>,
        parent: u64,
        name: &CStr,
        mode: u32,
        rdev: u32,
        umask: u32,
    ) -> io::Result<Entry> {
        let new = ops::create::NewEntry::of_request(&self.on(req), umask);
        ops::create::mknod(
            &self.on(req),
            &self.host_ctx(&req.ctx)?,
            parent,
            name,
            mode,
            rdev,
            &new,
        )
        .map(|e| self.guest_entry(e))
    }

    fn mkdir(
        &self,
        req: Req<'_, '_, Self>,
        parent: u64,
        name: &CStr,
        mode: u32,
        umask: u32,
    ) -> io::Result<Entry> {
        let new = ops::create::NewEntry::of_request(&self.on(req), umask);
        ops::create::mkdir(
            &self.on(req),
            &self.host_ctx(&req.ctx)?,
            parent,
            name,
            mode,
            &new,
        )
        .map(|e| self.guest_entry(e))
    }

    fn create(
        &self,
        req: Req<'_, '_, Self>,
        parent: u64,
        name: &CStr,
        args: CreateIn,
    ) -> io::Result<(Entry, Option<u64>, OpenOptions, Option<u32>)> {
        ops::create::create(&self.on(req), &self.host_ctx(&req.ctx)?, parent, name, args)
            .map(|(e, h, o, p)| (self.guest_entry(e), h, o, p))
    }

    fn unlink(&self, req: Req<'_, '_, Self>, parent: u64, name: &CStr) -> io::Result<()> {
        ops::remove::remove(
            &self.on(req),
            &self.host_ctx(&req.ctx)?,
            parent,
            name,
            false,
        )
    }

    fn rmdir(&self, req: Req<'_, '_, Self>, parent: u64, name: &CStr) -> io::Result<()> {
        ops::remove::remove(&self.on(req), &self.host_ctx(&req.ctx)?, parent, name, true)
    }

    fn rename(
        &self,
        req: Req<'_, '_, Self>,
        olddir: u64,
        oldname: &CStr,
        newdir: u64,
        newname: &CStr,
        flags: u32,
    ) -> io::Result<()> {
        let ctx = &self.host_ctx(&req.ctx)?;
        ops::rename::rename(&self.on(req), ctx, olddir, oldname, newdir, newname, flags)
    }

    fn link(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        newparent: u64,
        newname: &CStr,
    ) -> io::Result<Entry> {
        ops::link::link(
            &self.on(req),
            &self.host_ctx(&req.ctx)?,
            inode,
            newparent,
            newname,
        )
        .map(|e| self.guest_entry(e))
    }

    fn open(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        flags: u32,
        fuse_flags: u32,
    ) -> io::Result<(Option<u64>, OpenOptions, Option<u32>)> {
        ops::open::open(
            &self.on(req),
            &self.host_ctx(&req.ctx)?,
            inode,
            flags,
            fuse_flags,
        )
    }

    fn release(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        _flags: u32,
        handle: u64,
        _flush: bool,
        _flock_release: bool,
        lock_owner: Option<u64>,
    ) -> io::Result<()> {
        // The handle's own descriptor closes with it, and its flock locks with that.
        if let Some(owner) = lock_owner {
            ops::lock::release_owner(&self.on(req), inode, owner);
        }
        let r = ops::open::release(&self.on(req), inode, handle);
        ops::lock::release_handle(&self.on(req), inode, handle);
        r
    }

    fn flush(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        handle: u64,
        lock_owner: u64,
    ) -> io::Result<()> {
        ops::lock::release_owner(&self.on(req), inode, lock_owner);
        ops::open::flush(&self.on(req), inode, handle)
    }

    fn fsync(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        datasync: bool,
        handle: u64,
    ) -> io::Result<()> {
        ops::open::fsync(&self.on(req), inode, datasync, handle)
    }

    fn read(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        handle: u64,
        w: &mut dyn ZeroCopyWriter,
        size: u32,
        offset: u64,
        _lock_owner: Option<u64>,
        _flags: u32,
    ) -> io::Result<usize> {
        ops::io::read(&self.on(req), inode, handle, w, size, offset)
    }

    fn write(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        handle: u64,
        r: &mut dyn ZeroCopyReader,
        size: u32,
        offset: u64,
        _lock_owner: Option<u64>,
        _delayed_write: bool,
        _flags: u32,
        fuse_flags: u32,
    ) -> io::Result<usize> {
        ops::io::write(
            &self.on(req),
            &self.host_ctx(&req.ctx)?,
            inode,
            handle,
            r,
            size,
            offset,
            fuse_flags,
        )
    }

    fn fallocate(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        handle: u64,
        mode: u32,
        offset: u64,
        length: u64,
    ) -> io::Result<()> {
        ops::io::fallocate(&self.on(req), inode, handle, mode, offset, length)
    }

    fn lseek(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        handle: u64,
        offset: u64,
        whence: u32,
    ) -> io::Result<u64> {
        ops::io::lseek(&self.on(req), inode, handle, offset, whence)
    }

    fn statfs(&self, req: Req<'_, '_, Self>, inode: u64) -> io::Result<statvfs64> {
        ops::statfs::statfs(&self.on(req), inode)
    }

    fn opendir(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        _flags: u32,
    ) -> io::Result<(Option<u64>, OpenOptions)> {
        ops::readdir::opendir(&self.on(req), inode)
    }

    fn readdir(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        handle: u64,
        _size: u32,
        offset: u64,
        add_entry: &mut dyn FnMut(DirEntry) -> io::Result<usize>,
    ) -> io::Result<()> {
        ops::readdir::readdir(&self.on(req), inode, handle, offset, add_entry)
    }

    fn readdirplus(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        handle: u64,
        _size: u32,
        offset: u64,
        add_entry: &mut dyn FnMut(DirEntry, Entry) -> io::Result<usize>,
    ) -> io::Result<()> {
        let mut add = |d: DirEntry, e: Entry| add_entry(d, self.guest_entry(e));
        ops::readdir::readdirplus(&self.on(req), inode, handle, offset, &mut add)
    }

    fn releasedir(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        _flags: u32,
        handle: u64,
    ) -> io::Result<()> {
        ops::readdir::releasedir(&self.on(req), inode, handle)
    }

    fn fsyncdir(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        datasync: bool,
        handle: u64,
    ) -> io::Result<()> {
        ops::readdir::fsyncdir(&self.on(req), inode, datasync, handle)
    }

    fn setxattr(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        name: &CStr,
        value: &[u8],
        flags: u32,
        setxattr_flags: u32,
    ) -> io::Result<()> {
        let ctx = &self.host_ctx(&req.ctx)?;
        ops::xattr::setxattr(
            &self.on(req),
            ctx,
            inode,
            name,
            value,
            flags,
            setxattr_flags,
        )
    }

    fn getxattr(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        name: &CStr,
        size: u32,
    ) -> io::Result<GetxattrReply> {
        ops::xattr::getxattr(&self.on(req), inode, name, size)
    }

    fn listxattr(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        size: u32,
    ) -> io::Result<ListxattrReply> {
        ops::xattr::listxattr(&self.on(req), inode, size)
    }

    fn removexattr(&self, req: Req<'_, '_, Self>, inode: u64, name: &CStr) -> io::Result<()> {
        ops::xattr::removexattr(&self.on(req), &self.host_ctx(&req.ctx)?, inode, name)
    }

    fn getlk(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        fh: u64,
        owner: u64,
        lk: FileLock,
    ) -> io::Result<FileLock> {
        if !req.view.opts.host_locks {
            return Err(errno(libc::ENOSYS));
        }
        ops::lock::getlk(&self.on(req), inode, fh, owner, lk)
    }

    fn setlk(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        fh: u64,
        owner: u64,
        lk: FileLock,
        flock: bool,
        wait: bool,
        cancelled: &dyn Fn() -> Option<Cancel>,
    ) -> io::Result<()> {
        if !req.view.opts.host_locks {
            return Err(errno(libc::ENOSYS));
        }
        ops::lock::setlk(&self.on(req), inode, fh, owner, lk, flock, wait, cancelled)
    }

    fn wake_waits(&self) {
        self.locks.wake();
    }

    fn syncfs(&self, req: Req<'_, '_, Self>, _inode: u64) -> io::Result<()> {
        ops::sync::syncfs(&self.on(req))
    }

    fn statx(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        fh: Option<u64>,
    ) -> io::Result<(stat64, Duration, StatxExtra)> {
        let (st, t, x) = ops::attr::statx(&self.on(req), inode, fh)?;
        Ok((self.guest_stat(st), t, x))
    }

    fn copy_file_range(
        &self,
        req: Req<'_, '_, Self>,
        inode_in: u64,
        fh_in: u64,
        off_in: u64,
        inode_out: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
        flags: u64,
    ) -> io::Result<usize> {
        ops::copy::copy_file_range(
            &self.on(req),
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

    fn ioctl(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        fh: u64,
        cmd: u32,
        input: &[u8],
        out_size: u32,
    ) -> io::Result<Vec<u8>> {
        ops::ioctl::ioctl(&self.on(req), inode, fh, cmd, input, out_size)
    }

    fn init_extra(&self, offered: u64) -> io::Result<u64> {
        let pt = self
            .passthrough
            .init(self.now().opts.passthrough_io, offered);
        Ok(self.negotiated.init_extra(&self.now().opts, offered)? | pt)
    }

    fn extra_flags(&self) -> u64 {
        self.negotiated.extra().bits | self.passthrough.bits()
    }

    fn tmpfile(
        &self,
        req: Req<'_, '_, Self>,
        parent: u64,
        args: CreateIn,
    ) -> io::Result<(Entry, Option<u64>, OpenOptions)> {
        let ctx = &self.host_ctx(&req.ctx)?;
        ops::create::tmpfile(&self.on(req), ctx, parent, args)
            .map(|(e, h, o)| (self.guest_entry(e), h, o))
    }
}
