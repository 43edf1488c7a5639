//! The frequent metadata requests (`ServedBy::Direct` in the opcode table), decoded from the
//! thread's private copy of the request body and answered straight into the chain's reply
//! buffers: no fuse-backend-rs `Reader`/`Writer` (each a walk over the chain and a heap
//! allocation), no per-request buffers. The replies are the ones fuse-backend-rs's `Server`
//! gives, byte for byte; the filesystem is called through the same `FileSystem` methods.
//! STATX, which the `Server` does not know, is answered here too (the guest sends it for
//! every `stat` of a file whose attributes a write made stale).

use std::ffi::CStr;
use std::io;
use std::mem::size_of;

use fuse_backend_rs::abi::fuse_abi::{
    AccessIn, AttrOut, BatchForgetIn, CreateIn, Dirent, EntryOut, FallocateIn, FlushIn, ForgetIn,
    ForgetOne, FsyncIn, GetattrIn, GetxattrIn, GetxattrOut, InHeader, Kstatfs, LseekIn, LseekOut,
    MkdirIn, OpenIn, OpenOut, OutHeader, ReadIn, ReleaseIn, SetattrIn, SetattrValid, FATTR_FH,
    GETATTR_FH,
};
use fuse_backend_rs::abi::fuse_abi::{RELEASE_FLOCK_UNLOCK, RELEASE_FLUSH};
use fuse_backend_rs::api::filesystem::{
    Context, DirEntry, Entry, FileSystem, GetxattrReply, ListxattrReply,
};
use vm_memory::ByteValued;

use super::backend::Logged;
use super::chain::Cursor;
use super::dispatch::{Dispatcher, ServedFs};
use super::reply::{reply_io_error, reply_ok, RequestError};
use crate::sys::abi::fuse::StatxIn;

/// The metadata opcodes served here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Meta {
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
    /// FUSE_UNLINK.
    Unlink,
    /// FUSE_RMDIR.
    Rmdir,
    /// FUSE_MKDIR.
    Mkdir,
    /// FUSE_CREATE.
    Create,
    /// FUSE_OPEN.
    Open,
    /// FUSE_FLUSH.
    Flush,
    /// FUSE_RELEASE.
    Release,
    /// FUSE_OPENDIR.
    Opendir,
    /// FUSE_READDIR.
    Readdir,
    /// FUSE_READDIRPLUS.
    Readdirplus,
    /// FUSE_RELEASEDIR.
    Releasedir,
    /// FUSE_STATX (7.39), which the `Server` does not know.
    Statx,
    /// FUSE_GETXATTR (a guest asks for `security.capability` before a write).
    Getxattr,
    /// FUSE_LISTXATTR.
    Listxattr,
    /// FUSE_FSYNC.
    Fsync,
    /// FUSE_FSYNCDIR.
    Fsyncdir,
    /// FUSE_FALLOCATE.
    Fallocate,
    /// FUSE_LSEEK.
    Lseek,
    /// FUSE_ACCESS.
    Access,
    /// FUSE_STATFS.
    Statfs,
}

/// A request body being decoded: plain-data arguments, then names.
struct Body<'b>(&'b [u8]);

impl<'b> Body<'b> {
    /// The next `T`, or EINVAL (a truncated request) when the body is too short.
    fn obj<T: ByteValued + Default>(&mut self) -> Result<T, RequestError> {
        let n = size_of::<T>();
        if self.0.len() < n {
            return Err(RequestError::Decode(io::ErrorKind::UnexpectedEof.into()));
        }
        let (head, rest) = self.0.split_at(n);
        let mut v = T::default();
        v.as_mut_slice().copy_from_slice(head);
        self.0 = rest;
        Ok(v)
    }

    /// The rest as one name: up to its first NUL, which must be there (as the `Server`'s
    /// `bytes_to_cstr`), else EINVAL.
    fn name(&self) -> Result<&'b CStr, RequestError> {
        CStr::from_bytes_until_nul(self.0)
            .map_err(|_| RequestError::Decode(io::Error::from_raw_os_error(libc::EINVAL)))
    }
}

type W<'p, 'a> = Cursor<'p, 'a, Logged>;

/// The reply to a call that returns nothing.
fn done(w: &mut W<'_, '_>, unique: u64, res: io::Result<()>) -> Result<usize, RequestError> {
    match res {
        Ok(()) => reply_ok(w, unique, &[]),
        Err(e) => reply_io_error(w, unique, &e),
    }
}

/// The reply to a size query (GETXATTR, LISTXATTR with size 0).
fn count(w: &mut W<'_, '_>, unique: u64, size: u32) -> Result<usize, RequestError> {
    let out = GetxattrOut {
        size,
        ..Default::default()
    };
    reply_ok(w, unique, out.as_slice())
}

/// The reply to a call that returns a node (LOOKUP, MKDIR).
fn entry(w: &mut W<'_, '_>, unique: u64, res: io::Result<Entry>) -> Result<usize, RequestError> {
    match res {
        Ok(e) => reply_ok(w, unique, EntryOut::from(e).as_slice()),
        Err(e) => reply_io_error(w, unique, &e),
    }
}

/// The reply to a call that returns attributes (GETATTR, SETATTR).
fn attr(
    w: &mut W<'_, '_>,
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

impl<F: ServedFs> Dispatcher<F> {
    /// Serves `op` for the request `hdr` whose body (arguments and names, extensions
    /// removed) is `body`; the reply goes to `w`. `ctx` is the caller, already remapped.
    pub(super) fn serve_meta(
        &self,
        op: Meta,
        ctx: &Context,
        hdr: &InHeader,
        body: &[u8],
        w: &mut W<'_, '_>,
    ) -> Result<usize, RequestError> {
        let fs = &*self.fs;
        let (node, unique) = (hdr.nodeid, hdr.unique);
        let mut b = Body(body);
        match op {
            Meta::Lookup => entry(w, unique, fs.lookup(ctx, node, b.name()?)),
            Meta::Forget => {
                let arg: ForgetIn = b.obj()?;
                fs.forget(ctx, node, arg.nlookup);
                Ok(0)
            }
            Meta::BatchForget => {
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
                fs.batch_forget(ctx, list);
                Ok(0)
            }
            Meta::Getattr => {
                let arg: GetattrIn = b.obj()?;
                let fh = (arg.flags & GETATTR_FH != 0).then_some(arg.fh);
                attr(w, unique, fs.getattr(ctx, node, fh))
            }
            Meta::Setattr => {
                let arg: SetattrIn = b.obj()?;
                let fh = (arg.valid & FATTR_FH != 0).then_some(arg.fh);
                let valid = SetattrValid::from_bits_truncate(arg.valid);
                attr(w, unique, fs.setattr(ctx, node, arg.into(), fh, valid))
            }
            Meta::Unlink => done(w, unique, fs.unlink(ctx, node, b.name()?)),
            Meta::Rmdir => done(w, unique, fs.rmdir(ctx, node, b.name()?)),
            Meta::Mkdir => {
                let arg: MkdirIn = b.obj()?;
                entry(
                    w,
                    unique,
                    fs.mkdir(ctx, node, b.name()?, arg.mode, arg.umask),
                )
            }
            Meta::Create => {
                let arg: CreateIn = b.obj()?;
                match fs.create(ctx, node, b.name()?, arg) {
                    Ok((e, fh, opts, passthrough)) => {
                        const E: usize = size_of::<EntryOut>();
                        let mut out = [0u8; E + size_of::<OpenOut>()];
                        out[..E].copy_from_slice(EntryOut::from(e).as_slice());
                        let open = OpenOut {
                            fh: fh.unwrap_or(0),
                            open_flags: opts.bits(),
                            passthrough: passthrough.unwrap_or_default(),
                        };
                        out[E..].copy_from_slice(open.as_slice());
                        reply_ok(w, unique, &out)
                    }
                    Err(e) => reply_io_error(w, unique, &e),
                }
            }
            Meta::Open | Meta::Opendir => {
                let arg: OpenIn = b.obj()?;
                let res = if op == Meta::Open {
                    fs.open(ctx, node, arg.flags, arg.fuse_flags)
                } else {
                    fs.opendir(ctx, node, arg.flags)
                        .map(|(fh, opts)| (fh, opts, None))
                };
                match res {
                    Ok((fh, opts, passthrough)) => {
                        let out = OpenOut {
                            fh: fh.unwrap_or(0),
                            open_flags: opts.bits(),
                            passthrough: passthrough.unwrap_or_default(),
                        };
                        reply_ok(w, unique, out.as_slice())
                    }
                    Err(e) => reply_io_error(w, unique, &e),
                }
            }
            Meta::Flush => {
                let arg: FlushIn = b.obj()?;
                done(w, unique, fs.flush(ctx, node, arg.fh, arg.lock_owner))
            }
            Meta::Release => {
                let arg: ReleaseIn = b.obj()?;
                let flush = arg.release_flags & RELEASE_FLUSH != 0;
                let flock = arg.release_flags & RELEASE_FLOCK_UNLOCK != 0;
                let owner = (flush || flock).then_some(arg.lock_owner);
                done(
                    w,
                    unique,
                    fs.release(ctx, node, arg.flags, arg.fh, flush, flock, owner),
                )
            }
            Meta::Releasedir => {
                let arg: ReleaseIn = b.obj()?;
                done(w, unique, fs.releasedir(ctx, node, arg.flags, arg.fh))
            }
            Meta::Readdir | Meta::Readdirplus => {
                let arg: ReadIn = b.obj()?;
                self.listing(op == Meta::Readdirplus, ctx, hdr, &arg, w)
            }
            Meta::Statx => {
                let arg: StatxIn = b.obj()?;
                let fh = (arg.getattr_flags & GETATTR_FH != 0).then_some(arg.fh);
                match fs.statx(ctx, node, fh) {
                    Ok((st, valid, extra)) => {
                        let out = super::own::statx_out(&st, valid, &extra);
                        reply_ok(w, unique, out.as_slice())
                    }
                    Err(e) => reply_io_error(w, unique, &e),
                }
            }
            Meta::Getxattr => {
                let arg: GetxattrIn = b.obj()?;
                match fs.getxattr(ctx, node, b.name()?, arg.size) {
                    Ok(GetxattrReply::Value(v)) => reply_ok(w, unique, &v),
                    Ok(GetxattrReply::Count(size)) => count(w, unique, size),
                    Err(e) => reply_io_error(w, unique, &e),
                }
            }
            Meta::Listxattr => {
                let arg: GetxattrIn = b.obj()?;
                match fs.listxattr(ctx, node, arg.size) {
                    Ok(ListxattrReply::Names(v)) => reply_ok(w, unique, &v),
                    Ok(ListxattrReply::Count(size)) => count(w, unique, size),
                    Err(e) => reply_io_error(w, unique, &e),
                }
            }
            Meta::Fsync | Meta::Fsyncdir => {
                let arg: FsyncIn = b.obj()?;
                let datasync = arg.fsync_flags & 1 != 0;
                let res = if op == Meta::Fsync {
                    fs.fsync(ctx, node, datasync, arg.fh)
                } else {
                    fs.fsyncdir(ctx, node, datasync, arg.fh)
                };
                done(w, unique, res)
            }
            Meta::Fallocate => {
                let a: FallocateIn = b.obj()?;
                done(
                    w,
                    unique,
                    fs.fallocate(ctx, node, a.fh, a.mode, a.offset, a.length),
                )
            }
            Meta::Lseek => {
                let a: LseekIn = b.obj()?;
                match fs.lseek(ctx, node, a.fh, a.offset, a.whence) {
                    Ok(offset) => reply_ok(w, unique, LseekOut { offset }.as_slice()),
                    Err(e) => reply_io_error(w, unique, &e),
                }
            }
            Meta::Access => {
                let a: AccessIn = b.obj()?;
                done(w, unique, fs.access(ctx, node, a.mask))
            }
            Meta::Statfs => match fs.statfs(ctx, node) {
                Ok(st) => reply_ok(w, unique, Kstatfs::from(st).as_slice()),
                Err(e) => reply_io_error(w, unique, &e),
            },
        }
    }

    /// READDIR or READDIRPLUS: entries written behind the reply header as the filesystem
    /// produces them, up to the guest's `size`, then the header.
    fn listing(
        &self,
        plus: bool,
        ctx: &Context,
        hdr: &InHeader,
        arg: &ReadIn,
        w: &mut W<'_, '_>,
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
                ctx,
                hdr.nodeid,
                arg.fh,
                arg.size,
                arg.offset,
                &mut |d, e| dirent(&mut data, &mut written, max, &d, Some(e)),
            )
        } else {
            self.fs
                .readdir(ctx, hdr.nodeid, arg.fh, arg.size, arg.offset, &mut |d| {
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
fn dirent(
    data: &mut W<'_, '_>,
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
