//! The router: one `match` from opcode to handler for every request served from its private
//! copy (all but READ and WRITE, `io.rs`), each request's arguments decoded from that copy and
//! its reply written straight into the reply's buffers (no per-request buffers). The replies
//! are the ones fuse-backend-rs's `Server` gives, byte for byte (`oracle_tests.rs`); the
//! filesystem is called through the project's own [`Filesystem`](super::Filesystem) trait,
//! with the request value built once by the server.

use std::io;
use std::mem::size_of;

use fuse_backend_rs::abi::fuse_abi::{
    AccessIn, AttrOut, BatchForgetIn, CreateIn, Dirent, EntryOut, FallocateIn, FlushIn, ForgetIn,
    ForgetOne, FsyncIn, GetattrIn, GetxattrIn, GetxattrOut, InHeader, Kstatfs, LinkIn, LseekIn,
    LseekOut, MkdirIn, MknodIn, OpenIn, OpenOut, OutHeader, ReadIn, ReleaseIn, Rename2In, RenameIn,
    SetattrIn, SetattrValid, FATTR_FH, GETATTR_FH,
};
use fuse_backend_rs::abi::fuse_abi::{RELEASE_FLOCK_UNLOCK, RELEASE_FLUSH};
use fuse_backend_rs::api::filesystem::{DirEntry, Entry, GetxattrReply, ListxattrReply};
use vm_memory::ByteValued;

use vm_memory::bitmap::BitmapSlice;

use super::body::Body;
use super::buf::Cursor;
use super::filesystem::{Request, ServedFs};
use super::opcode::{Op, Opcode};
use super::reply::{reply_io_error, reply_ok, RequestError};
use super::server::Server;
use crate::sys::abi::fuse::{StatxIn, SyncfsIn};

/// The reply to a call that returns nothing.
fn done<B: BitmapSlice>(
    w: &mut Cursor<'_, '_, B>,
    unique: u64,
    res: io::Result<()>,
) -> Result<usize, RequestError> {
    match res {
        Ok(()) => reply_ok(w, unique, &[]),
        Err(e) => reply_io_error(w, unique, &e),
    }
}

/// The reply to a size query (GETXATTR, LISTXATTR with size 0).
fn count<B: BitmapSlice>(
    w: &mut Cursor<'_, '_, B>,
    unique: u64,
    size: u32,
) -> Result<usize, RequestError> {
    let out = GetxattrOut {
        size,
        ..Default::default()
    };
    reply_ok(w, unique, out.as_slice())
}

/// The reply to a call that returns a node (LOOKUP, MKDIR).
fn entry<B: BitmapSlice>(
    w: &mut Cursor<'_, '_, B>,
    unique: u64,
    res: io::Result<Entry>,
) -> Result<usize, RequestError> {
    match res {
        Ok(e) => reply_ok(w, unique, EntryOut::from(e).as_slice()),
        Err(e) => reply_io_error(w, unique, &e),
    }
}

/// The reply to a call that returns attributes (GETATTR, SETATTR).
fn attr<B: BitmapSlice>(
    w: &mut Cursor<'_, '_, B>,
    unique: u64,
    res: io::Result<(fuse_backend_rs::abi::fuse_abi::stat64, std::time::Duration)>,
) -> Result<usize, RequestError> {
    match res {
        Ok((st, valid)) => {
            let out = AttrOut {
                attr_valid: valid.as_secs(),
                attr_valid_nsec: valid.subsec_nanos(),
                dummy: 0,
                attr: st.into(),
            };
            reply_ok(w, unique, out.as_slice())
        }
        Err(e) => reply_io_error(w, unique, &e),
    }
}

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

    /// READDIR or READDIRPLUS: entries written behind the reply header as the filesystem
    /// produces them, up to the guest's `size`, then the header.
    fn listing<B: BitmapSlice>(
        &self,
        plus: bool,
        req: &Request<'_, F::View>,
        hdr: &InHeader,
        arg: &ReadIn,
        w: &mut Cursor<'_, '_, B>,
    ) -> Result<usize, RequestError> {
        if w.available() < arg.size as usize {
            return super::reply::reply_errno(w, hdr.unique, libc::ENOMEM);
        }
        let mut data = w.clone();
        data.skip(size_of::<OutHeader>());
        let mut written = 0usize;
        let max = arg.size as usize;
        let res = if plus {
            self.fs.readdirplus(
                req,
                hdr.nodeid,
                arg.fh,
                arg.size,
                arg.offset,
                &mut |d, e| dirent(&mut data, &mut written, max, &d, Some(e)),
            )
        } else {
            self.fs
                .readdir(req, hdr.nodeid, arg.fh, arg.size, arg.offset, &mut |d| {
                    dirent(&mut data, &mut written, max, &d, None)
                })
        };
        match res {
            Err(e) => reply_io_error(w, hdr.unique, &e),
            Ok(()) => {
                let out = OutHeader {
                    len: (size_of::<OutHeader>() + written) as u32,
                    error: 0,
                    unique: hdr.unique,
                };
                w.write_all(out.as_slice()).map_err(RequestError::Encode)?;
                Ok(out.len as usize)
            }
        }
    }
}

/// Room for one READDIRPLUS entry with a name of up to 255 bytes, in one copy.
const ENTRY_ROOM: usize = size_of::<EntryOut>() + size_of::<Dirent>() + 256 + 8;

/// Appends one directory entry (with its node, for READDIRPLUS) to `data`, as the `Server`
/// does: padded to 8 bytes, and skipped (`Ok(0)`) when it would not fit in `max`.
fn dirent<B: BitmapSlice>(
    data: &mut Cursor<'_, '_, B>,
    written: &mut usize,
    max: usize,
    d: &DirEntry,
    e: Option<Entry>,
) -> io::Result<usize> {
    let name = d.name;
    let plain = size_of::<Dirent>() + name.len();
    let padded = (plain + 7) & !7;
    let total = padded
        + if e.is_some() {
            size_of::<EntryOut>()
        } else {
            0
        };
    if max.saturating_sub(*written) < total {
        return Ok(0);
    }
    let dirent = Dirent {
        ino: d.ino,
        off: d.offset,
        namelen: u32::try_from(name.len())
            .map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?,
        type_: d.type_,
    };
    let mut buf = [0u8; ENTRY_ROOM];
    if total <= ENTRY_ROOM {
        // One copy into guest memory.
        let mut at = 0;
        if let Some(e) = e {
            let out = EntryOut::from(e);
            buf[..size_of::<EntryOut>()].copy_from_slice(out.as_slice());
            at = size_of::<EntryOut>();
        }
        buf[at..at + size_of::<Dirent>()].copy_from_slice(dirent.as_slice());
        at += size_of::<Dirent>();
        buf[at..at + name.len()].copy_from_slice(name);
        data.write_all(&buf[..total])?;
    } else {
        if let Some(e) = e {
            data.write_all(EntryOut::from(e).as_slice())?;
        }
        data.write_all(dirent.as_slice())?;
        data.write_all(name)?;
        data.write_all(&buf[..padded - plain])?;
    }
    *written += total;
    Ok(total)
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
