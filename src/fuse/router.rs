//! The table of opcodes and the router: for each opcode, which handler answers it ([`Op`]),
//! whether it gets a reply, the least reply room the state it creates needs, and how costly it
//! is (for a transport to place it on a thread); then one `match` from [`Op`] to handler for
//! every request served from its private copy (all but READ and WRITE, `io.rs`), each
//! request's arguments decoded from that copy (`body.rs`) and its reply written straight into
//! the reply's buffers. The replies are the ones fuse-backend-rs's `Server` gives, byte for
//! byte (`oracle_tests.rs`). Adding an opcode: one variant, one row and one arm here, one
//! method of [`Filesystem`](super::Filesystem).

use std::io;
use std::mem::size_of;

pub use fuse_backend_rs::abi::fuse_abi::Opcode;
use fuse_backend_rs::abi::fuse_abi::{
    AccessIn, BatchForgetIn, CreateIn, EntryOut, FallocateIn, FlushIn, ForgetIn, ForgetOne,
    FsyncIn, GetattrIn, GetxattrIn, InHeader, Kstatfs, LinkIn, LseekIn, LseekOut, MkdirIn, MknodIn,
    OpenIn, OpenOut, OutHeader, ReadIn, ReleaseIn, Rename2In, RenameIn, SetattrIn, SetattrValid,
    FATTR_FH, GETATTR_FH,
};
use fuse_backend_rs::abi::fuse_abi::{RELEASE_FLOCK_UNLOCK, RELEASE_FLUSH};
use fuse_backend_rs::api::filesystem::{GetxattrReply, ListxattrReply};
use vm_memory::ByteValued;

use vm_memory::bitmap::BitmapSlice;

use super::body::Body;
use super::buf::Cursor;
use super::filesystem::{Request, ServedFs};
use super::reply::{attr, count, done, entry, reply_io_error, reply_ok, RequestError};
use super::server::Server;
use crate::sys::abi::fuse::{StatxIn, SyncfsIn};

impl<F: ServedFs> Server<F> {
    /// Serves `op` for the request `hdr` whose body (arguments and names, extensions
    /// removed) is `body`; the reply goes to `w`. `req` is the caller, already remapped.
    pub(super) fn route<B: BitmapSlice>(
        &self,
        op: Op,
        req: &Request<'_, F::View>,
        hdr: &InHeader,
        body: &[u8],
        w: &mut Cursor<'_, '_, B>,
    ) -> Result<usize, RequestError> {
        let fs = &*self.fs;
        let (node, unique) = (hdr.nodeid, hdr.unique);
        let mut b = Body(body);
        match op {
            Op::Lookup => entry(w, unique, fs.lookup(req, node, b.name()?)),
            Op::Forget => {
                let arg: ForgetIn = b.obj()?;
                fs.forget(req, node, arg.nlookup);
                Ok(0)
            }
            Op::BatchForget => {
                let arg: BatchForgetIn = b.obj()?;
                let count = arg.count as usize;
                if count > b.0.len() / size_of::<ForgetOne>() {
                    return Err(RequestError::Decode(io::Error::from_raw_os_error(
                        libc::EOVERFLOW,
                    )));
                }
                let mut list = Vec::with_capacity(count);
                for _ in 0..count {
                    let one: ForgetOne = b.obj()?;
                    list.push((one.nodeid, one.nlookup));
                }
                fs.batch_forget(req, list);
                Ok(0)
            }
            Op::Getattr => {
                let arg: GetattrIn = b.obj()?;
                let fh = (arg.flags & GETATTR_FH != 0).then_some(arg.fh);
                attr(w, unique, fs.getattr(req, node, fh))
            }
            Op::Setattr => {
                let arg: SetattrIn = b.obj()?;
                let fh = (arg.valid & FATTR_FH != 0).then_some(arg.fh);
                let valid = SetattrValid::from_bits_truncate(arg.valid);
                attr(w, unique, fs.setattr(req, node, arg.into(), fh, valid))
            }
            Op::Unlink => done(w, unique, fs.unlink(req, node, b.name()?)),
            Op::Rmdir => done(w, unique, fs.rmdir(req, node, b.name()?)),
            Op::Mkdir => {
                let arg: MkdirIn = b.obj()?;
                entry(
                    w,
                    unique,
                    fs.mkdir(req, node, b.name()?, arg.mode, arg.umask),
                )
            }
            Op::Create => {
                let arg: CreateIn = b.obj()?;
                match fs.create(req, node, b.name()?, arg) {
                    Ok((e, fh, opts, passthrough)) => {
                        const E: usize = size_of::<EntryOut>();
                        let mut out = [0u8; E + size_of::<OpenOut>()];
                        out[..E].copy_from_slice(EntryOut::from(e).as_slice());
                        let open = open_out(fh, opts, passthrough);
                        out[E..].copy_from_slice(open.as_slice());
                        reply_ok(w, unique, &out)
                    }
                    Err(e) => reply_io_error(w, unique, &e),
                }
            }
            Op::Open | Op::Opendir => {
                let arg: OpenIn = b.obj()?;
                let res = if op == Op::Open {
                    fs.open(req, node, arg.flags, arg.fuse_flags)
                } else {
                    fs.opendir(req, node, arg.flags)
                        .map(|(fh, opts)| (fh, opts, None))
                };
                match res {
                    Ok((fh, opts, passthrough)) => {
                        let out = open_out(fh, opts, passthrough);
                        reply_ok(w, unique, out.as_slice())
                    }
                    Err(e) => reply_io_error(w, unique, &e),
                }
            }
            Op::Flush => {
                let arg: FlushIn = b.obj()?;
                done(w, unique, fs.flush(req, node, arg.fh, arg.lock_owner))
            }
            Op::Release => {
                let arg: ReleaseIn = b.obj()?;
                let flush = arg.release_flags & RELEASE_FLUSH != 0;
                let flock = arg.release_flags & RELEASE_FLOCK_UNLOCK != 0;
                let owner = (flush || flock).then_some(arg.lock_owner);
                done(
                    w,
                    unique,
                    fs.release(req, node, arg.flags, arg.fh, flush, flock, owner),
                )
            }
            Op::Releasedir => {
                let arg: ReleaseIn = b.obj()?;
                done(w, unique, fs.releasedir(req, node, arg.flags, arg.fh))
            }
            Op::Readdir | Op::Readdirplus => {
                let arg: ReadIn = b.obj()?;
                self.listing(op == Op::Readdirplus, req, hdr, &arg, w)
            }
            Op::Statx => {
                let arg: StatxIn = b.obj()?;
                let fh = (arg.getattr_flags & GETATTR_FH != 0).then_some(arg.fh);
                match fs.statx(req, node, fh) {
                    Ok((st, valid, extra)) => {
                        let out = super::own::statx_out(&st, valid, &extra);
                        reply_ok(w, unique, out.as_slice())
                    }
                    Err(e) => reply_io_error(w, unique, &e),
                }
            }
            Op::Getxattr => {
                let arg: GetxattrIn = b.obj()?;
                match fs.getxattr(req, node, b.name()?, arg.size) {
                    Ok(GetxattrReply::Value(v)) => reply_ok(w, unique, &v),
                    Ok(GetxattrReply::Count(size)) => count(w, unique, size),
                    Err(e) => reply_io_error(w, unique, &e),
                }
            }
            Op::Listxattr => {
                let arg: GetxattrIn = b.obj()?;
                match fs.listxattr(req, node, arg.size) {
                    Ok(ListxattrReply::Names(v)) => reply_ok(w, unique, &v),
                    Ok(ListxattrReply::Count(size)) => count(w, unique, size),
                    Err(e) => reply_io_error(w, unique, &e),
                }
            }
            Op::Fsync | Op::Fsyncdir => {
                let arg: FsyncIn = b.obj()?;
                let datasync = arg.fsync_flags & 1 != 0;
                let res = if op == Op::Fsync {
                    fs.fsync(req, node, datasync, arg.fh)
                } else {
                    fs.fsyncdir(req, node, datasync, arg.fh)
                };
                done(w, unique, res)
            }
            Op::Fallocate => {
                let a: FallocateIn = b.obj()?;
                done(
                    w,
                    unique,
                    fs.fallocate(req, node, a.fh, a.mode, a.offset, a.length),
                )
            }
            Op::Lseek => {
                let a: LseekIn = b.obj()?;
                match fs.lseek(req, node, a.fh, a.offset, a.whence) {
                    Ok(offset) => reply_ok(w, unique, LseekOut { offset }.as_slice()),
                    Err(e) => reply_io_error(w, unique, &e),
                }
            }
            Op::Access => {
                let a: AccessIn = b.obj()?;
                done(w, unique, fs.access(req, node, a.mask))
            }
            Op::Statfs => match fs.statfs(req, node) {
                Ok(st) => reply_ok(w, unique, Kstatfs::from(st).as_slice()),
                Err(e) => reply_io_error(w, unique, &e),
            },
            Op::Readlink => match fs.readlink(req, node) {
                Ok(target) => reply_ok(w, unique, &target),
                Err(e) => reply_io_error(w, unique, &e),
            },
            Op::Symlink => {
                let (name, target) = b.two_names()?;
                entry(w, unique, fs.symlink(req, target, node, name))
            }
            Op::Mknod => {
                let a: MknodIn = b.obj()?;
                let name = b.name()?;
                entry(
                    w,
                    unique,
                    fs.mknod(req, node, name, a.mode, a.rdev, a.umask),
                )
            }
            Op::Link => {
                let a: LinkIn = b.obj()?;
                entry(w, unique, fs.link(req, a.oldnodeid, node, b.name()?))
            }
            Op::Rename | Op::Rename2 => {
                let (newdir, flags) = if hdr.opcode == Opcode::Rename as u32 {
                    let a: RenameIn = b.obj()?;
                    (a.newdir, 0)
                } else {
                    let a: Rename2In = b.obj()?;
                    const KNOWN: u32 =
                        libc::RENAME_EXCHANGE | libc::RENAME_NOREPLACE | libc::RENAME_WHITEOUT;
                    (a.newdir, a.flags & KNOWN)
                };
                let (old, new) = b.two_names()?;
                done(w, unique, fs.rename(req, node, old, newdir, new, flags))
            }
            Op::Removexattr => done(w, unique, fs.removexattr(req, node, b.name()?)),
            Op::Destroy => {
                fs.destroy();
                reply_ok(w, unique, &[])
            }
            Op::Getlk => self.getlk(req, hdr, b, w),
            Op::Setlk => self.setlk(req, hdr, b, w),
            Op::Interrupt => self.interrupt(b),
            Op::Syncfs => {
                let _: SyncfsIn = b.obj()?;
                done(w, unique, fs.syncfs(req, node))
            }
            Op::CopyFileRange => self.copy_file_range(req, hdr, b, w),
            Op::Ioctl => self.ioctl(req, hdr, b, w),
            Op::Setxattr => self.setxattr(req, hdr, b, w),
            Op::Tmpfile => self.tmpfile(req, hdr, b, w),
            // Served before a body is copied (`server.rs`): never routed here.
            Op::Init | Op::Read | Op::Write | Op::Unsupported => {
                super::reply::reply_errno(w, unique, libc::ENOSYS)
            }
        }
    }
}

/// The reply to OPEN or CREATE: with a backing id, FOPEN_PASSTHROUGH too (the kernel then
/// reads and writes that file itself).
fn open_out(
    fh: Option<u64>,
    opts: fuse_backend_rs::abi::fuse_abi::OpenOptions,
    backing: Option<u32>,
) -> OpenOut {
    let pass = backing.map_or(0, |_| crate::sys::abi::fuse::FOPEN_PASSTHROUGH);
    OpenOut {
        fh: fh.unwrap_or(0),
        open_flags: opts.bits() | pass,
        passthrough: backing.unwrap_or_default(),
    }
}

// The table of opcodes.

/// Every opcode the router answers, as it matches on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// FUSE_LOOKUP.
    Lookup,
    /// FUSE_FORGET (no reply).
    Forget,
    /// FUSE_BATCH_FORGET (no reply).
    BatchForget,
    /// FUSE_GETATTR.
    Getattr,
    /// FUSE_SETATTR.
    Setattr,
    /// FUSE_READLINK.
    Readlink,
    /// FUSE_SYMLINK.
    Symlink,
    /// FUSE_MKNOD.
    Mknod,
    /// FUSE_MKDIR.
    Mkdir,
    /// FUSE_UNLINK.
    Unlink,
    /// FUSE_RMDIR.
    Rmdir,
    /// FUSE_RENAME.
    Rename,
    /// FUSE_RENAME2.
    Rename2,
    /// FUSE_LINK.
    Link,
    /// FUSE_OPEN.
    Open,
    /// FUSE_READ: its data goes straight into the transport's buffers.
    Read,
    /// FUSE_WRITE: its data comes straight from the transport's buffers.
    Write,
    /// FUSE_STATFS.
    Statfs,
    /// FUSE_RELEASE.
    Release,
    /// FUSE_FSYNC.
    Fsync,
    /// FUSE_SETXATTR, whose argument grows with FUSE_SETXATTR_EXT.
    Setxattr,
    /// FUSE_GETXATTR.
    Getxattr,
    /// FUSE_LISTXATTR.
    Listxattr,
    /// FUSE_REMOVEXATTR.
    Removexattr,
    /// FUSE_FLUSH.
    Flush,
    /// FUSE_INIT.
    Init,
    /// FUSE_OPENDIR.
    Opendir,
    /// FUSE_READDIR.
    Readdir,
    /// FUSE_READDIRPLUS.
    Readdirplus,
    /// FUSE_RELEASEDIR.
    Releasedir,
    /// FUSE_FSYNCDIR.
    Fsyncdir,
    /// FUSE_GETLK.
    Getlk,
    /// FUSE_SETLK and FUSE_SETLKW (which may block: see [`Cost::Blocking`]).
    Setlk,
    /// FUSE_ACCESS.
    Access,
    /// FUSE_CREATE.
    Create,
    /// FUSE_INTERRUPT (no reply): wakes a blocked SETLKW.
    Interrupt,
    /// FUSE_DESTROY.
    Destroy,
    /// FUSE_IOCTL (inode flags and fsxattr only).
    Ioctl,
    /// FUSE_FALLOCATE.
    Fallocate,
    /// FUSE_LSEEK.
    Lseek,
    /// FUSE_COPY_FILE_RANGE.
    CopyFileRange,
    /// FUSE_SYNCFS (7.34).
    Syncfs,
    /// FUSE_TMPFILE (7.37).
    Tmpfile,
    /// FUSE_STATX (7.39).
    Statx,
    /// Nobody: answered ENOSYS (the guest then stops sending it or falls back).
    Unsupported,
}

/// How much work a request is, to decide where it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cost {
    /// Served on the queue thread: a hand-off to a worker would cost more than the request.
    Cheap,
    /// Several syscalls or a possible block (namespace changes, fsync, listings): a worker.
    Costly,
    /// READ/WRITE: a worker from this many payload bytes on.
    FromSize(u32),
    /// May wait long for another party (SETLKW, until the daemon ends the wait): a thread of
    /// its own, so that no worker is held.
    Blocking,
}

/// The facts about one opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpInfo {
    /// Whether the guest waits for a reply (FORGET, BATCH_FORGET and INTERRUPT get none).
    pub replies: bool,
    /// The smallest reply buffer that can carry the node reference or handle this opcode
    /// creates (0: it creates none). A smaller buffer is refused before the filesystem acts.
    pub min_reply: usize,
    /// Where it runs.
    pub cost: Cost,
    /// Who answers it.
    pub op: Op,
}

/// READs at least this large are worth a worker thread (reads of one file run in parallel).
const HEAVY_READ: u32 = 64 * 1024;
/// WRITEs at least this large are worth one: buffered writes to one file serialize on its
/// inode lock in the host kernel, so smaller ones only add a hand-off and lock contention.
const HEAVY_WRITE: u32 = 1024 * 1024;

const HDR: usize = size_of::<OutHeader>();
const ENTRY: usize = HDR + size_of::<EntryOut>();
const OPEN: usize = HDR + size_of::<OpenOut>();

/// Opcodes newer than fuse-backend-rs 0.14's `Opcode` enum.
pub const SYNCFS: u32 = 50;
pub const TMPFILE: u32 = 51;
pub const STATX: u32 = 52;

use Cost::{Blocking, Cheap, Costly, FromSize};

const fn row(replies: bool, min_reply: usize, cost: Cost, op: Op) -> OpInfo {
    OpInfo {
        replies,
        min_reply,
        cost,
        op,
    }
}

/// Anything not in [`ROWS`]: unknown or unsupported, answered ENOSYS at once.
const UNKNOWN: OpInfo = row(true, 0, Cheap, Op::Unsupported);

/// Every opcode the daemon answers other than with ENOSYS.
const ROWS: &[(u32, OpInfo)] = &[
    (Opcode::Lookup as u32, row(true, ENTRY, Cheap, Op::Lookup)),
    (Opcode::Forget as u32, row(false, 0, Cheap, Op::Forget)),
    (Opcode::Getattr as u32, row(true, 0, Cheap, Op::Getattr)),
    // Creates, removals and attribute changes on the queue thread: measured in the guest
    // (scripts/bench-guest.sh), a worker hand-off made creates 9% slower than virtiofsd.
    (Opcode::Setattr as u32, row(true, 0, Cheap, Op::Setattr)),
    (Opcode::Readlink as u32, row(true, 0, Cheap, Op::Readlink)),
    (Opcode::Symlink as u32, row(true, ENTRY, Cheap, Op::Symlink)),
    (Opcode::Mknod as u32, row(true, ENTRY, Cheap, Op::Mknod)),
    (Opcode::Mkdir as u32, row(true, ENTRY, Cheap, Op::Mkdir)),
    (Opcode::Unlink as u32, row(true, 0, Cheap, Op::Unlink)),
    (Opcode::Rmdir as u32, row(true, 0, Cheap, Op::Rmdir)),
    (Opcode::Rename as u32, row(true, 0, Costly, Op::Rename)),
    (Opcode::Link as u32, row(true, ENTRY, Cheap, Op::Link)),
    (Opcode::Open as u32, row(true, OPEN, Cheap, Op::Open)),
    (
        Opcode::Read as u32,
        row(true, 0, FromSize(HEAVY_READ), Op::Read),
    ),
    (
        Opcode::Write as u32,
        row(true, 0, FromSize(HEAVY_WRITE), Op::Write),
    ),
    (Opcode::Statfs as u32, row(true, 0, Cheap, Op::Statfs)),
    (Opcode::Release as u32, row(true, 0, Cheap, Op::Release)),
    (Opcode::Fsync as u32, row(true, 0, Costly, Op::Fsync)),
    (Opcode::Setxattr as u32, row(true, 0, Costly, Op::Setxattr)),
    (Opcode::Getxattr as u32, row(true, 0, Cheap, Op::Getxattr)),
    (Opcode::Listxattr as u32, row(true, 0, Cheap, Op::Listxattr)),
    (
        Opcode::Removexattr as u32,
        row(true, 0, Costly, Op::Removexattr),
    ),
    (Opcode::Flush as u32, row(true, 0, Cheap, Op::Flush)),
    (Opcode::Init as u32, row(true, 0, Cheap, Op::Init)),
    (Opcode::Getlk as u32, row(true, 0, Costly, Op::Getlk)),
    (Opcode::Setlk as u32, row(true, 0, Costly, Op::Setlk)),
    (Opcode::Setlkw as u32, row(true, 0, Blocking, Op::Setlk)),
    (Opcode::Opendir as u32, row(true, OPEN, Cheap, Op::Opendir)),
    (Opcode::Readdir as u32, row(true, 0, Costly, Op::Readdir)),
    (
        Opcode::Releasedir as u32,
        row(true, 0, Cheap, Op::Releasedir),
    ),
    (Opcode::Fsyncdir as u32, row(true, 0, Costly, Op::Fsyncdir)),
    (Opcode::Access as u32, row(true, 0, Cheap, Op::Access)),
    (
        Opcode::Create as u32,
        row(true, ENTRY + size_of::<OpenOut>(), Cheap, Op::Create),
    ),
    // Marks the waiter and wakes the lock waits: no system call but a futex wake.
    (
        Opcode::Interrupt as u32,
        row(false, 0, Cheap, Op::Interrupt),
    ),
    (Opcode::Destroy as u32, row(true, 0, Cheap, Op::Destroy)),
    (
        Opcode::BatchForget as u32,
        row(false, 0, Cheap, Op::BatchForget),
    ),
    (
        Opcode::Fallocate as u32,
        row(true, 0, Costly, Op::Fallocate),
    ),
    (
        Opcode::Readdirplus as u32,
        row(true, 0, Costly, Op::Readdirplus),
    ),
    (Opcode::Rename2 as u32, row(true, 0, Costly, Op::Rename2)),
    (Opcode::Lseek as u32, row(true, 0, Cheap, Op::Lseek)),
    // The kernel's answer to a retrieve notification, which this daemon never sends.
    (
        Opcode::NotifyReply as u32,
        row(false, 0, Cheap, Op::Unsupported),
    ),
    (
        Opcode::CopyFileRange as u32,
        row(true, 0, Costly, Op::CopyFileRange),
    ),
    (Opcode::Ioctl as u32, row(true, 0, Costly, Op::Ioctl)),
    (SYNCFS, row(true, 0, Costly, Op::Syncfs)),
    (
        TMPFILE,
        row(true, ENTRY + size_of::<OpenOut>(), Costly, Op::Tmpfile),
    ),
    (STATX, row(true, 0, Cheap, Op::Statx)),
];

/// Table size: one past the largest opcode in [`ROWS`].
const SLOTS: usize = 64;

const fn build() -> [OpInfo; SLOTS] {
    let mut t = [UNKNOWN; SLOTS];
    let mut i = 0;
    while i < ROWS.len() {
        t[ROWS[i].0 as usize] = ROWS[i].1;
        i += 1;
    }
    t
}

static TABLE: [OpInfo; SLOTS] = build();

/// The facts about `opcode` (any value the guest sends; unknown ones are answered ENOSYS).
pub fn info(opcode: u32) -> OpInfo {
    TABLE.get(opcode as usize).copied().unwrap_or(UNKNOWN)
}

impl OpInfo {
    /// Whether a request of this opcode, whose READ/WRITE payload size is `size`, goes to a
    /// worker.
    pub fn heavy(&self, size: Option<u32>) -> bool {
        match self.cost {
            Cheap => false,
            Costly | Blocking => true,
            FromSize(at) => size.is_some_and(|s| s >= at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_answers_every_opcode() {
        assert_eq!(info(Opcode::Init as u32).op, Op::Init);
        assert_eq!(info(Opcode::Setlkw as u32).cost, Blocking);
        assert_eq!(info(Opcode::Lookup as u32).min_reply, ENTRY);
        assert_eq!(
            info(Opcode::Create as u32).min_reply,
            ENTRY + size_of::<OpenOut>()
        );
        assert!(!info(Opcode::Forget as u32).replies);
        assert!(!info(Opcode::BatchForget as u32).replies);
        assert!(!info(Opcode::Interrupt as u32).replies);
        assert!(!info(Opcode::NotifyReply as u32).replies);
        // Gaps, newer opcodes and garbage are unsupported but answered.
        for op in [0, 7, 19, Opcode::Bmap as u32, 53, 63, 64, 4096, u32::MAX] {
            assert_eq!(info(op), UNKNOWN, "opcode {op}");
        }
        assert_eq!(info(TMPFILE).op, Op::Tmpfile);
        assert_eq!(info(STATX).op, Op::Statx);
        assert_eq!(info(SYNCFS).op, Op::Syncfs);
        assert!(info(Opcode::Read as u32).heavy(Some(HEAVY_READ)));
        assert!(!info(Opcode::Read as u32).heavy(Some(4096)));
        assert!(!info(Opcode::Write as u32).heavy(None));
        assert!(info(Opcode::Rename as u32).heavy(None));
        assert!(!info(Opcode::Getattr as u32).heavy(None));
    }
}
