//! The filesystem the protocol layer serves, as this project defines it: one method per
//! operation, each taking the [`Request`] the router built once (the caller, the new object's
//! security context, the view of the filesystem pinned for the request, its unique id). Every
//! method but [`Filesystem::view`] has a default answer (ENOSYS, as a FUSE server gives for
//! what it does not serve), so a test double writes only what it serves. The ABI types are
//! fuse-backend-rs's.

use std::ffi::CStr;
use std::io;
use std::time::Duration;

use fuse_backend_rs::abi::fuse_abi::{
    stat64, statvfs64, CreateIn, FileLock, FsOptions, OpenOptions, SetattrValid,
};
use fuse_backend_rs::api::filesystem::{
    Context, DirEntry, Entry, GetxattrReply, ListxattrReply, ZeroCopyReader, ZeroCopyWriter,
};

use super::secctx::SecContext;
use crate::fs::session::Sessions;

/// One request as the filesystem serves it.
pub struct Request<'a, V> {
    /// The FUSE unique id (for logs).
    pub unique: u64,
    /// The caller as the guest names it (uid, gid, pid); the filesystem maps ids.
    pub ctx: Context,
    /// The security context of the object a create-like request makes (FUSE_SECURITY_CTX).
    pub secctx: Option<&'a SecContext>,
    /// What the filesystem pinned for this request ([`Filesystem::view`]): however long it
    /// runs, on however many threads, it sees this.
    pub view: &'a V,
}

impl<V> Clone for Request<'_, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<V> Copy for Request<'_, V> {}

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

/// What STATX adds to GETATTR: the birth time and the file attribute flags (`STATX_ATTR_*`).
#[derive(Clone, Copy, Debug, Default)]
pub struct StatxExtra {
    /// Birth time (seconds, nanoseconds), when the host filesystem records it.
    pub btime: Option<(i64, u32)>,
    /// `stx_attributes`.
    pub attributes: u64,
    /// `stx_attributes_mask`.
    pub attributes_mask: u64,
}

fn enosys<T>() -> io::Result<T> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

/// The request of a filesystem whose view is `V`.
pub type Req<'a, 'r, F> = &'r Request<'a, <F as Filesystem>::View>;

/// See the module documentation. Node ids and handles are the guest's `u64`s.
#[allow(clippy::too_many_arguments, unused_variables)]
pub trait Filesystem: Send + Sync + 'static {
    /// What a request pins when it begins (the union: its branch set and options).
    type View: Clone + Send + Sync + 'static;

    /// The view a request beginning now sees.
    fn view(&self) -> Self::View;

    /// INIT: what to enable of the guest's offer `capable`.
    fn init(&self, capable: FsOptions) -> io::Result<FsOptions> {
        Ok(FsOptions::empty())
    }

    /// INIT, after [`Filesystem::init`]: the INIT flags fuse-backend-rs cannot name to enable
    /// for a guest offering `offered` (`flags | flags2 << 32`).
    fn init_extra(&self, offered: u64) -> io::Result<u64> {
        Ok(0)
    }

    /// The flags [`Filesystem::init_extra`] enabled for the session being served.
    fn extra_flags(&self) -> u64 {
        0
    }

    /// DESTROY, or the end of the session: drop every node and handle.
    fn destroy(&self) {}

    /// Wakes every waiting SETLKW to ask its `cancelled` again (after FUSE_INTERRUPT, or at
    /// the end of the session).
    fn wake_waits(&self) {}

    /// LOOKUP `name` in `parent`.
    fn lookup(&self, req: Req<'_, '_, Self>, parent: u64, name: &CStr) -> io::Result<Entry> {
        enosys()
    }

    /// FORGET `count` lookups of `inode`.
    fn forget(&self, req: Req<'_, '_, Self>, inode: u64, count: u64) {}

    /// BATCH_FORGET.
    fn batch_forget(&self, req: Req<'_, '_, Self>, requests: Vec<(u64, u64)>) {
        for (inode, count) in requests {
            self.forget(req, inode, count)
        }
    }

    /// GETATTR (from open file `fh` if given).
    fn getattr(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        fh: Option<u64>,
    ) -> io::Result<(stat64, Duration)> {
        enosys()
    }

    /// SETATTR of what `valid` names.
    fn setattr(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        attr: stat64,
        fh: Option<u64>,
        valid: SetattrValid,
    ) -> io::Result<(stat64, Duration)> {
        enosys()
    }

    /// STATX: GETATTR's attributes plus birth time and flags.
    fn statx(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        fh: Option<u64>,
    ) -> io::Result<(stat64, Duration, StatxExtra)> {
        enosys()
    }

    /// READLINK.
    fn readlink(&self, req: Req<'_, '_, Self>, inode: u64) -> io::Result<Vec<u8>> {
        enosys()
    }

    /// ACCESS.
    fn access(&self, req: Req<'_, '_, Self>, inode: u64, mask: u32) -> io::Result<()> {
        enosys()
    }

    /// SYMLINK `name` in `parent` pointing to `target`.
    fn symlink(
        &self,
        req: Req<'_, '_, Self>,
        target: &CStr,
        parent: u64,
        name: &CStr,
    ) -> io::Result<Entry> {
        enosys()
    }

    /// MKNOD.
    fn mknod(
        &self,
        req: Req<'_, '_, Self>,
        parent: u64,
        name: &CStr,
        mode: u32,
        rdev: u32,
        umask: u32,
    ) -> io::Result<Entry> {
        enosys()
    }

    /// MKDIR.
    fn mkdir(
        &self,
        req: Req<'_, '_, Self>,
        parent: u64,
        name: &CStr,
        mode: u32,
        umask: u32,
    ) -> io::Result<Entry> {
        enosys()
    }

    /// CREATE: the new node, opened (handle, open flags, passthrough backing id).
    fn create(
        &self,
        req: Req<'_, '_, Self>,
        parent: u64,
        name: &CStr,
        args: CreateIn,
    ) -> io::Result<(Entry, Option<u64>, OpenOptions, Option<u32>)> {
        enosys()
    }

    /// TMPFILE: an unnamed file in `parent`, opened (as CREATE answers).
    fn tmpfile(
        &self,
        req: Req<'_, '_, Self>,
        parent: u64,
        args: CreateIn,
    ) -> io::Result<(Entry, Option<u64>, OpenOptions)> {
        enosys()
    }

    /// UNLINK.
    fn unlink(&self, req: Req<'_, '_, Self>, parent: u64, name: &CStr) -> io::Result<()> {
        enosys()
    }

    /// RMDIR.
    fn rmdir(&self, req: Req<'_, '_, Self>, parent: u64, name: &CStr) -> io::Result<()> {
        enosys()
    }

    /// RENAME and RENAME2 (`flags`: RENAME_NOREPLACE, RENAME_EXCHANGE, RENAME_WHITEOUT).
    fn rename(
        &self,
        req: Req<'_, '_, Self>,
        olddir: u64,
        oldname: &CStr,
        newdir: u64,
        newname: &CStr,
        flags: u32,
    ) -> io::Result<()> {
        enosys()
    }

    /// LINK `inode` as `newname` in `newparent`.
    fn link(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        newparent: u64,
        newname: &CStr,
    ) -> io::Result<Entry> {
        enosys()
    }

    /// OPEN: handle, open flags, passthrough backing id.
    fn open(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        flags: u32,
        fuse_flags: u32,
    ) -> io::Result<(Option<u64>, OpenOptions, Option<u32>)> {
        enosys()
    }

    /// RELEASE of handle `fh` (the lock owner's locks go when FLUSH or FLOCK_UNLOCK is set).
    fn release(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        flags: u32,
        fh: u64,
        flush: bool,
        flock_release: bool,
        lock_owner: Option<u64>,
    ) -> io::Result<()> {
        enosys()
    }

    /// FLUSH.
    fn flush(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        fh: u64,
        lock_owner: u64,
    ) -> io::Result<()> {
        enosys()
    }

    /// FSYNC.
    fn fsync(&self, req: Req<'_, '_, Self>, inode: u64, datasync: bool, fh: u64) -> io::Result<()> {
        enosys()
    }

    /// READ of up to `size` bytes at `offset` straight into `w`.
    fn read(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        fh: u64,
        w: &mut dyn ZeroCopyWriter,
        size: u32,
        offset: u64,
        lock_owner: Option<u64>,
        flags: u32,
    ) -> io::Result<usize> {
        enosys()
    }

    /// WRITE of `size` bytes at `offset` straight from `r`.
    fn write(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        fh: u64,
        r: &mut dyn ZeroCopyReader,
        size: u32,
        offset: u64,
        lock_owner: Option<u64>,
        delayed_write: bool,
        flags: u32,
        fuse_flags: u32,
    ) -> io::Result<usize> {
        enosys()
    }

    /// FALLOCATE.
    fn fallocate(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        fh: u64,
        mode: u32,
        offset: u64,
        length: u64,
    ) -> io::Result<()> {
        enosys()
    }

    /// LSEEK (SEEK_DATA, SEEK_HOLE).
    fn lseek(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        fh: u64,
        offset: u64,
        whence: u32,
    ) -> io::Result<u64> {
        enosys()
    }

    /// COPY_FILE_RANGE: bytes copied between two open files.
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
        enosys()
    }

    /// STATFS.
    fn statfs(&self, req: Req<'_, '_, Self>, inode: u64) -> io::Result<statvfs64> {
        enosys()
    }

    /// SYNCFS: flush every filesystem written through.
    fn syncfs(&self, req: Req<'_, '_, Self>, inode: u64) -> io::Result<()> {
        enosys()
    }

    /// OPENDIR: handle and open flags.
    fn opendir(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        flags: u32,
    ) -> io::Result<(Option<u64>, OpenOptions)> {
        enosys()
    }

    /// READDIR from `offset`: entries handed to `add` until it takes no more (returns 0).
    fn readdir(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        fh: u64,
        size: u32,
        offset: u64,
        add: &mut dyn FnMut(DirEntry) -> io::Result<usize>,
    ) -> io::Result<()> {
        enosys()
    }

    /// READDIRPLUS: as READDIR, each entry with its node (a lookup the guest counts).
    fn readdirplus(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        fh: u64,
        size: u32,
        offset: u64,
        add: &mut dyn FnMut(DirEntry, Entry) -> io::Result<usize>,
    ) -> io::Result<()> {
        enosys()
    }

    /// RELEASEDIR.
    fn releasedir(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        flags: u32,
        fh: u64,
    ) -> io::Result<()> {
        enosys()
    }

    /// FSYNCDIR.
    fn fsyncdir(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        datasync: bool,
        fh: u64,
    ) -> io::Result<()> {
        enosys()
    }

    /// SETXATTR, with FUSE_SETXATTR_EXT's `setxattr_flags` (0 without it).
    fn setxattr(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        name: &CStr,
        value: &[u8],
        flags: u32,
        setxattr_flags: u32,
    ) -> io::Result<()> {
        enosys()
    }

    /// GETXATTR: the value, or its size when `size` is 0.
    fn getxattr(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        name: &CStr,
        size: u32,
    ) -> io::Result<GetxattrReply> {
        enosys()
    }

    /// LISTXATTR: the names, or their size when `size` is 0.
    fn listxattr(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        size: u32,
    ) -> io::Result<ListxattrReply> {
        enosys()
    }

    /// REMOVEXATTR.
    fn removexattr(&self, req: Req<'_, '_, Self>, inode: u64, name: &CStr) -> io::Result<()> {
        enosys()
    }

    /// IOCTL `cmd` on open file `fh` with `input`: the `out_size` bytes to return.
    fn ioctl(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        fh: u64,
        cmd: u32,
        input: &[u8],
        out_size: u32,
    ) -> io::Result<Vec<u8>> {
        Err(io::Error::from_raw_os_error(libc::ENOTTY))
    }

    /// GETLK: the lock that would conflict with `lk` for `owner` on `inode`'s handle `fh`.
    fn getlk(
        &self,
        req: Req<'_, '_, Self>,
        inode: u64,
        fh: u64,
        owner: u64,
        lk: FileLock,
    ) -> io::Result<FileLock> {
        enosys()
    }

    /// SETLK/SETLKW (`wait`), POSIX or `flock`; a waiting request asks `cancelled` whenever
    /// it is woken ([`Filesystem::wake_waits`]) and ends as [`Cancel`] says.
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
        enosys()
    }
}

/// What the protocol server needs of a filesystem: [`Filesystem`], and [`Sessions`] for the
/// state that moves with a session (migration, upgrade).
pub trait ServedFs: Filesystem + Sessions {}

impl<T: Filesystem + Sessions> ServedFs for T {}
