//! The filesystem both protocol servers serve in the oracle tests (`oracle_tests.rs`): [`Echo`]
//! answers every call from its arguments alone, so that two servers over it answer alike, and
//! [`Ours`] lets this project's server call the same fuse-backend-rs `FileSystem` code that
//! fuse-backend-rs's `Server` calls.

use std::ffi::CStr;
use std::io;
use std::time::Duration;

use fuse_backend_rs::abi::fuse_abi::{
    stat64, statvfs64, CreateIn, FsOptions, OpenOptions, SetattrValid,
};
use fuse_backend_rs::api::filesystem::{
    Context, DirEntry, Entry, FileSystem, GetxattrReply, ListxattrReply,
};

/// Answers every call from its arguments alone (so two instances answer alike): names
/// starting with `e` fail with the errno of their second byte, others succeed with
/// attributes derived from the name and node.
pub(super) struct Echo;

/// A fuse-backend-rs `FileSystem` (what its `Server` serves) as this project's
/// [`Filesystem`](super::Filesystem): both servers then call the same code.
pub(super) struct Ours<T>(pub(super) T);

impl<T> crate::fs::session::Sessions for Ours<T> {}

type Rq<'a, 'r> = super::Req<'a, 'r, Ours<Echo>>;

#[allow(clippy::too_many_arguments)]
impl super::Filesystem for Ours<Echo> {
    type View = ();

    fn view(&self) {}

    fn init(&self, capable: FsOptions) -> io::Result<FsOptions> {
        self.0.init(capable)
    }
    fn lookup(&self, r: Rq<'_, '_>, parent: u64, name: &CStr) -> io::Result<Entry> {
        self.0.lookup(&r.ctx, parent, name)
    }
    fn getattr(&self, r: Rq<'_, '_>, node: u64, fh: Option<u64>) -> io::Result<(stat64, Duration)> {
        self.0.getattr(&r.ctx, node, fh)
    }
    fn setattr(
        &self,
        r: Rq<'_, '_>,
        node: u64,
        attr: stat64,
        fh: Option<u64>,
        valid: SetattrValid,
    ) -> io::Result<(stat64, Duration)> {
        self.0.setattr(&r.ctx, node, attr, fh, valid)
    }
    fn mkdir(
        &self,
        r: Rq<'_, '_>,
        p: u64,
        name: &CStr,
        mode: u32,
        umask: u32,
    ) -> io::Result<Entry> {
        self.0.mkdir(&r.ctx, p, name, mode, umask)
    }
    fn unlink(&self, r: Rq<'_, '_>, p: u64, name: &CStr) -> io::Result<()> {
        self.0.unlink(&r.ctx, p, name)
    }
    fn rmdir(&self, r: Rq<'_, '_>, p: u64, name: &CStr) -> io::Result<()> {
        self.0.rmdir(&r.ctx, p, name)
    }
    fn create(
        &self,
        r: Rq<'_, '_>,
        p: u64,
        name: &CStr,
        args: CreateIn,
    ) -> io::Result<(Entry, Option<u64>, OpenOptions, Option<u32>)> {
        self.0.create(&r.ctx, p, name, args)
    }
    fn open(
        &self,
        r: Rq<'_, '_>,
        node: u64,
        flags: u32,
        fuse_flags: u32,
    ) -> io::Result<(Option<u64>, OpenOptions, Option<u32>)> {
        self.0.open(&r.ctx, node, flags, fuse_flags)
    }
    fn opendir(
        &self,
        r: Rq<'_, '_>,
        node: u64,
        flags: u32,
    ) -> io::Result<(Option<u64>, OpenOptions)> {
        self.0.opendir(&r.ctx, node, flags)
    }
    fn flush(&self, r: Rq<'_, '_>, node: u64, fh: u64, owner: u64) -> io::Result<()> {
        self.0.flush(&r.ctx, node, fh, owner)
    }
    fn release(
        &self,
        r: Rq<'_, '_>,
        node: u64,
        flags: u32,
        fh: u64,
        flush: bool,
        flock: bool,
        owner: Option<u64>,
    ) -> io::Result<()> {
        self.0.release(&r.ctx, node, flags, fh, flush, flock, owner)
    }
    fn releasedir(&self, r: Rq<'_, '_>, node: u64, flags: u32, fh: u64) -> io::Result<()> {
        self.0.releasedir(&r.ctx, node, flags, fh)
    }
    fn getxattr(
        &self,
        r: Rq<'_, '_>,
        node: u64,
        name: &CStr,
        size: u32,
    ) -> io::Result<GetxattrReply> {
        self.0.getxattr(&r.ctx, node, name, size)
    }
    fn listxattr(&self, r: Rq<'_, '_>, node: u64, size: u32) -> io::Result<ListxattrReply> {
        self.0.listxattr(&r.ctx, node, size)
    }
    fn fsync(&self, r: Rq<'_, '_>, node: u64, datasync: bool, fh: u64) -> io::Result<()> {
        self.0.fsync(&r.ctx, node, datasync, fh)
    }
    fn fsyncdir(&self, r: Rq<'_, '_>, node: u64, datasync: bool, fh: u64) -> io::Result<()> {
        self.0.fsyncdir(&r.ctx, node, datasync, fh)
    }
    fn fallocate(
        &self,
        r: Rq<'_, '_>,
        node: u64,
        fh: u64,
        mode: u32,
        offset: u64,
        length: u64,
    ) -> io::Result<()> {
        self.0.fallocate(&r.ctx, node, fh, mode, offset, length)
    }
    fn lseek(
        &self,
        r: Rq<'_, '_>,
        node: u64,
        fh: u64,
        offset: u64,
        whence: u32,
    ) -> io::Result<u64> {
        self.0.lseek(&r.ctx, node, fh, offset, whence)
    }
    fn access(&self, r: Rq<'_, '_>, node: u64, mask: u32) -> io::Result<()> {
        self.0.access(&r.ctx, node, mask)
    }
    fn statfs(&self, r: Rq<'_, '_>, node: u64) -> io::Result<statvfs64> {
        self.0.statfs(&r.ctx, node)
    }
    fn readdir(
        &self,
        r: Rq<'_, '_>,
        node: u64,
        fh: u64,
        size: u32,
        offset: u64,
        add: &mut dyn FnMut(DirEntry) -> io::Result<usize>,
    ) -> io::Result<()> {
        self.0.readdir(&r.ctx, node, fh, size, offset, add)
    }
    fn readdirplus(
        &self,
        r: Rq<'_, '_>,
        node: u64,
        fh: u64,
        size: u32,
        offset: u64,
        add: &mut dyn FnMut(DirEntry, Entry) -> io::Result<usize>,
    ) -> io::Result<()> {
        self.0.readdirplus(&r.ctx, node, fh, size, offset, add)
    }
    fn readlink(&self, r: Rq<'_, '_>, node: u64) -> io::Result<Vec<u8>> {
        self.0.readlink(&r.ctx, node)
    }
    fn symlink(&self, r: Rq<'_, '_>, target: &CStr, p: u64, name: &CStr) -> io::Result<Entry> {
        self.0.symlink(&r.ctx, target, p, name)
    }
    fn mknod(
        &self,
        r: Rq<'_, '_>,
        p: u64,
        name: &CStr,
        mode: u32,
        rdev: u32,
        umask: u32,
    ) -> io::Result<Entry> {
        self.0.mknod(&r.ctx, p, name, mode, rdev, umask)
    }
    fn link(&self, r: Rq<'_, '_>, node: u64, p: u64, name: &CStr) -> io::Result<Entry> {
        self.0.link(&r.ctx, node, p, name)
    }
    fn rename(
        &self,
        r: Rq<'_, '_>,
        p: u64,
        old: &CStr,
        newp: u64,
        new: &CStr,
        flags: u32,
    ) -> io::Result<()> {
        self.0.rename(&r.ctx, p, old, newp, new, flags)
    }
    fn removexattr(&self, r: Rq<'_, '_>, node: u64, name: &CStr) -> io::Result<()> {
        self.0.removexattr(&r.ctx, node, name)
    }
}

fn attr_of(seed: u64) -> stat64 {
    let mut st = crate::sys::abi::zeroed_stat();
    st.st_ino = seed;
    st.st_mode = libc::S_IFREG | (seed as u32 & 0o777);
    st.st_size = (seed * 7) as i64;
    st.st_nlink = 1 + seed % 3;
    st.st_mtime = seed as i64;
    st
}

fn seed_of(node: u64, name: &CStr) -> io::Result<u64> {
    let b = name.to_bytes();
    if b.first() == Some(&b'e') {
        return Err(io::Error::from_raw_os_error(i32::from(
            *b.get(1).unwrap_or(&5),
        )));
    }
    Ok(b.iter()
        .fold(node, |h, c| h.wrapping_mul(31).wrapping_add(u64::from(*c))))
}

fn entry_of(seed: u64) -> Entry {
    Entry {
        inode: seed,
        generation: 3,
        attr: attr_of(seed),
        attr_flags: 0,
        attr_timeout: Duration::new(seed % 5, 17),
        entry_timeout: Duration::new(seed % 7, 9),
    }
}

impl FileSystem for Echo {
    type Inode = u64;
    type Handle = u64;

    fn init(&self, _capable: FsOptions) -> io::Result<FsOptions> {
        Ok(FsOptions::empty())
    }
    fn lookup(&self, _: &Context, parent: u64, name: &CStr) -> io::Result<Entry> {
        seed_of(parent, name).map(entry_of)
    }
    fn getattr(&self, _: &Context, node: u64, fh: Option<u64>) -> io::Result<(stat64, Duration)> {
        Ok((attr_of(node + fh.unwrap_or(0)), Duration::new(1, 2)))
    }
    fn setattr(
        &self,
        _: &Context,
        node: u64,
        attr: stat64,
        fh: Option<u64>,
        valid: SetattrValid,
    ) -> io::Result<(stat64, Duration)> {
        if node == 66 {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        let seed = node + u64::from(attr.st_mode) + fh.unwrap_or(0) + u64::from(valid.bits());
        Ok((attr_of(seed), Duration::new(3, 4)))
    }
    fn mkdir(&self, _: &Context, p: u64, name: &CStr, mode: u32, umask: u32) -> io::Result<Entry> {
        seed_of(p + u64::from(mode) + u64::from(umask), name).map(entry_of)
    }
    fn unlink(&self, _: &Context, p: u64, name: &CStr) -> io::Result<()> {
        seed_of(p, name).map(drop)
    }
    fn rmdir(&self, _: &Context, p: u64, name: &CStr) -> io::Result<()> {
        seed_of(p, name).map(drop)
    }
    fn create(
        &self,
        _: &Context,
        p: u64,
        name: &CStr,
        args: CreateIn,
    ) -> io::Result<(Entry, Option<u64>, OpenOptions, Option<u32>)> {
        let seed = seed_of(p + u64::from(args.flags), name)?;
        Ok((
            entry_of(seed),
            Some(seed + 1),
            OpenOptions::KEEP_CACHE,
            None,
        ))
    }
    fn open(
        &self,
        _: &Context,
        node: u64,
        flags: u32,
        _fuse_flags: u32,
    ) -> io::Result<(Option<u64>, OpenOptions, Option<u32>)> {
        if node == 66 {
            return Err(io::Error::from_raw_os_error(libc::EACCES));
        }
        Ok((Some(node + u64::from(flags)), OpenOptions::DIRECT_IO, None))
    }
    fn opendir(
        &self,
        _: &Context,
        node: u64,
        flags: u32,
    ) -> io::Result<(Option<u64>, OpenOptions)> {
        Ok((Some(node * 2 + u64::from(flags)), OpenOptions::CACHE_DIR))
    }
    fn flush(&self, _: &Context, node: u64, _fh: u64, _owner: u64) -> io::Result<()> {
        (node != 66)
            .then_some(())
            .ok_or(io::Error::from_raw_os_error(libc::EIO))
    }
    #[allow(clippy::too_many_arguments)]
    fn release(
        &self,
        _: &Context,
        node: u64,
        _flags: u32,
        _fh: u64,
        _flush: bool,
        _flock: bool,
        _owner: Option<u64>,
    ) -> io::Result<()> {
        (node != 66)
            .then_some(())
            .ok_or(io::Error::from_raw_os_error(libc::EBADF))
    }
    fn releasedir(&self, _: &Context, node: u64, _flags: u32, _fh: u64) -> io::Result<()> {
        (node != 66)
            .then_some(())
            .ok_or(io::Error::from_raw_os_error(libc::EBADF))
    }
    fn getxattr(
        &self,
        _: &Context,
        node: u64,
        name: &CStr,
        size: u32,
    ) -> io::Result<GetxattrReply> {
        let seed = seed_of(node, name)?;
        Ok(match size {
            0 => GetxattrReply::Count(seed as u32 % 100),
            // A value as long as the guest allows, up to 300 bytes: small and large replies.
            n => GetxattrReply::Value(
                (0..n.min(300))
                    .map(|i| (seed + u64::from(i)) as u8)
                    .collect(),
            ),
        })
    }
    fn listxattr(&self, _: &Context, node: u64, size: u32) -> io::Result<ListxattrReply> {
        match (node, size) {
            (66, _) => Err(io::Error::from_raw_os_error(libc::ENOTSUP)),
            (_, 0) => Ok(ListxattrReply::Count(node as u32 * 3)),
            (_, n) => Ok(ListxattrReply::Names(
                b"user.a\0user.bb\0".repeat(n as usize / 16),
            )),
        }
    }
    fn fsync(&self, _: &Context, node: u64, datasync: bool, fh: u64) -> io::Result<()> {
        (node != 66 && (fh != 9 || datasync))
            .then_some(())
            .ok_or(io::Error::from_raw_os_error(libc::EIO))
    }
    fn fsyncdir(&self, _: &Context, node: u64, datasync: bool, fh: u64) -> io::Result<()> {
        (node != 66 && (fh != 9 || !datasync))
            .then_some(())
            .ok_or(io::Error::from_raw_os_error(libc::EBADF))
    }
    fn fallocate(
        &self,
        _: &Context,
        node: u64,
        fh: u64,
        mode: u32,
        offset: u64,
        length: u64,
    ) -> io::Result<()> {
        (node != 66 && mode == 0 && offset + length == fh)
            .then_some(())
            .ok_or(io::Error::from_raw_os_error(libc::EOPNOTSUPP))
    }
    fn lseek(&self, _: &Context, node: u64, fh: u64, offset: u64, whence: u32) -> io::Result<u64> {
        match node {
            66 => Err(io::Error::from_raw_os_error(libc::ENXIO)),
            _ => Ok(offset * 3 + fh + u64::from(whence)),
        }
    }
    fn access(&self, _: &Context, node: u64, mask: u32) -> io::Result<()> {
        (node != 66 && mask != 2)
            .then_some(())
            .ok_or(io::Error::from_raw_os_error(libc::EACCES))
    }
    fn statfs(&self, _: &Context, node: u64) -> io::Result<statvfs64> {
        if node == 66 {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        let mut st = crate::sys::abi::zeroed_statvfs();
        st.f_bsize = 4096;
        st.f_frsize = 512;
        st.f_blocks = node * 11;
        st.f_bfree = node * 5;
        st.f_bavail = node * 4;
        st.f_files = node * 13;
        st.f_ffree = node * 7;
        st.f_namemax = 255;
        Ok(st)
    }
    fn readlink(&self, _: &Context, node: u64) -> io::Result<Vec<u8>> {
        match node {
            66 => Err(io::Error::from_raw_os_error(libc::EINVAL)),
            n => Ok(format!("target-of-{n}").into_bytes()),
        }
    }
    fn symlink(&self, _: &Context, target: &CStr, p: u64, name: &CStr) -> io::Result<Entry> {
        let seed = seed_of(p, name)?;
        Ok(entry_of(seed ^ seed_of(1, target)?))
    }
    fn mknod(
        &self,
        _: &Context,
        p: u64,
        name: &CStr,
        mode: u32,
        rdev: u32,
        umask: u32,
    ) -> io::Result<Entry> {
        Ok(entry_of(
            seed_of(p, name)? ^ u64::from(mode) ^ u64::from(rdev) << 8 ^ u64::from(umask),
        ))
    }
    fn link(&self, _: &Context, node: u64, p: u64, name: &CStr) -> io::Result<Entry> {
        Ok(entry_of(seed_of(p, name)? ^ node))
    }
    fn rename(
        &self,
        _: &Context,
        p: u64,
        old: &CStr,
        newp: u64,
        new: &CStr,
        flags: u32,
    ) -> io::Result<()> {
        let seed = seed_of(p, old)? ^ seed_of(newp, new)?;
        // Succeeds for some combinations, fails with one derived from the arguments else.
        match (seed ^ u64::from(flags)) % 3 {
            0 => Ok(()),
            k => Err(io::Error::from_raw_os_error(k as i32 + libc::EPERM)),
        }
    }
    fn removexattr(&self, _: &Context, node: u64, name: &CStr) -> io::Result<()> {
        seed_of(node, name).map(|_| ())
    }
    fn readdir(
        &self,
        _: &Context,
        node: u64,
        _fh: u64,
        _size: u32,
        offset: u64,
        add: &mut dyn FnMut(DirEntry) -> io::Result<usize>,
    ) -> io::Result<()> {
        self.readdirplus(&Context::default(), node, 0, 0, offset, &mut |d, _| add(d))
    }
    fn readdirplus(
        &self,
        _: &Context,
        node: u64,
        _fh: u64,
        _size: u32,
        offset: u64,
        add: &mut dyn FnMut(DirEntry, Entry) -> io::Result<usize>,
    ) -> io::Result<()> {
        if node == 66 {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        for i in offset..40 {
            // Names of every length from 1 to 40 bytes: each padding case.
            let name = vec![b'a' + (i % 26) as u8; i as usize + 1];
            let d = DirEntry {
                ino: 100 + i,
                offset: i + 1,
                type_: libc::DT_REG.into(),
                name: &name,
            };
            if add(d, entry_of(200 + i))? == 0 {
                break;
            }
        }
        Ok(())
    }
}
