//! FUSE_READ and FUSE_WRITE. Data moves straight between the transport's buffers (guest memory
//! for virtio) and the filesystem through cursors (`buf.rs`); READ's data is filled by the
//! transport's [`Transport::fill_read`](super::Transport::fill_read) from a [`ReadJob`] (which
//! virtio may cut into pieces for several threads). This file never buffers payloads and never
//! touches files itself.

use std::io;
use std::mem::size_of;
use std::sync::Arc;

use fuse_backend_rs::abi::fuse_abi::{
    InHeader, OutHeader, ReadIn, WriteIn, WriteOut, READ_LOCKOWNER, WRITE_CACHE, WRITE_LOCKOWNER,
};
use fuse_backend_rs::api::filesystem::{Context, ZeroCopyWriter};
use log::debug;
use vm_memory::bitmap::BitmapSlice;
use vm_memory::ByteValued;

use super::buf::Cursor;
use super::filesystem::{Request, ServedFs};
use super::reply::{reply_errno, reply_io_error, reply_ok, RequestError};

/// Serves FUSE_READ: the reply header goes into the first 16 writable bytes and `fill`
/// copies the data directly behind it (given READ's arguments, the lock owner when
/// READ_LOCKOWNER is set, and a cursor over exactly `size` bytes; it returns how many it
/// read). Returns the used length.
pub fn read<S>(
    hdr: &InHeader,
    mut r: Cursor<'_, '_, S>,
    mut w: Cursor<'_, '_, S>,
    max_read: u32,
    fill: impl FnOnce(&ReadIn, Option<u64>, &mut Cursor<'_, '_, S>) -> io::Result<usize>,
) -> Result<usize, RequestError>
where
    S: BitmapSlice,
{
    let arg: ReadIn = r.read_obj().map_err(RequestError::Decode)?;
    debug!(
        "unique={} READ nodeid={} fh={} offset={} size={}",
        hdr.unique, hdr.nodeid, arg.fh, arg.offset, arg.size
    );
    if arg.size > max_read {
        return reply_errno(&mut w, hdr.unique, libc::EINVAL);
    }
    let needed = size_of::<OutHeader>() + arg.size as usize;
    if w.available() < needed {
        return reply_errno(&mut w, hdr.unique, libc::EINVAL);
    }
    let owner = (arg.read_flags & READ_LOCKOWNER != 0).then_some(arg.lock_owner);
    let mut data = w.clone();
    data.skip(size_of::<OutHeader>());
    data.limit(arg.size as usize);
    match fill(&arg, owner, &mut data) {
        // A filesystem claiming more than it was asked for must not make us report bytes it
        // never wrote.
        Ok(count) if count <= arg.size as usize => {
            let out = OutHeader {
                len: (size_of::<OutHeader>() + count) as u32,
                error: 0,
                unique: hdr.unique,
            };
            w.write_all(out.as_slice()).map_err(RequestError::Encode)?;
            Ok(out.len as usize)
        }
        Ok(_) => reply_errno(&mut w, hdr.unique, libc::EIO),
        Err(e) => reply_io_error(&mut w, hdr.unique, &e),
    }
}

/// Serves FUSE_WRITE: the payload after `WriteIn` is handed to the filesystem without copying.
/// Returns the used length.
pub fn write<F, S>(
    fs: &F,
    req: &Request<'_, F::View>,
    hdr: &InHeader,
    mut r: Cursor<'_, '_, S>,
    mut w: Cursor<'_, '_, S>,
    max_write: u32,
) -> Result<usize, RequestError>
where
    F: ServedFs,
    S: BitmapSlice,
{
    let arg: WriteIn = r.read_obj().map_err(RequestError::Decode)?;
    debug!(
        "unique={} WRITE nodeid={} fh={} offset={} size={}",
        hdr.unique, hdr.nodeid, arg.fh, arg.offset, arg.size
    );
    if arg.size > max_write || r.available() < arg.size as usize {
        return reply_errno(&mut w, hdr.unique, libc::EINVAL);
    }
    // Bound the payload to `size` so a filesystem can never read trailing guest bytes.
    r.limit(arg.size as usize);
    let owner = (arg.fuse_flags & WRITE_LOCKOWNER != 0).then_some(arg.lock_owner);
    let delayed = arg.fuse_flags & WRITE_CACHE != 0;
    match fs.write(
        req,
        hdr.nodeid,
        arg.fh,
        &mut r,
        arg.size,
        arg.offset,
        owner,
        delayed,
        arg.flags,
        arg.fuse_flags,
    ) {
        Ok(count) => {
            let out = WriteOut {
                size: count.min(arg.size as usize) as u32,
                padding: 0,
            };
            reply_ok(&mut w, hdr.unique, out.as_slice())
        }
        Err(e) => reply_io_error(&mut w, hdr.unique, &e),
    }
}

/// One READ as the filesystem fills it: its request (the caller, the view it pinned), the
/// node and READ's arguments. Borrowed from the serving thread; [`ReadJob::to_owned`] gives
/// another thread what it needs to fill part of the same READ, with the same view.
pub struct ReadJob<'s, F: ServedFs> {
    pub(super) fs: &'s Arc<F>,
    pub(super) req: Request<'s, F::View>,
    pub(super) nodeid: u64,
    pub(super) arg: ReadIn,
    pub(super) owner: Option<u64>,
}

impl<F: ServedFs> ReadJob<'_, F> {
    /// Bytes asked for.
    pub fn size(&self) -> usize {
        self.arg.size as usize
    }

    /// Fills `data` with `len` bytes from `at` bytes into the READ.
    pub fn fill(&self, data: &mut dyn ZeroCopyWriter, at: usize, len: usize) -> io::Result<usize> {
        fill(
            &**self.fs,
            &self.req,
            self.nodeid,
            &self.arg,
            self.owner,
            data,
            at,
            len,
        )
    }

    /// The READ for another thread: the same caller, arguments and view.
    pub fn to_owned(&self) -> OwnedRead<F> {
        OwnedRead::new(
            self.fs.clone(),
            self.req.unique,
            self.req.ctx,
            self.req.view.clone(),
            self.nodeid,
            self.arg,
            self.owner,
        )
    }
}

/// A READ another thread fills part of (see [`ReadJob::to_owned`]).
pub struct OwnedRead<F: ServedFs> {
    fs: Arc<F>,
    unique: u64,
    ctx: Context,
    view: F::View,
    nodeid: u64,
    arg: ReadIn,
    owner: Option<u64>,
}

impl<F: ServedFs> OwnedRead<F> {
    /// READ `arg` (request `unique`, by `ctx`, lock owner `owner`) of node `nodeid`, served
    /// from `view`.
    pub fn new(
        fs: Arc<F>,
        unique: u64,
        ctx: Context,
        view: F::View,
        nodeid: u64,
        arg: ReadIn,
        owner: Option<u64>,
    ) -> Self {
        OwnedRead {
            fs,
            unique,
            ctx,
            view,
            nodeid,
            arg,
            owner,
        }
    }

    /// Bytes asked for.
    pub fn size(&self) -> usize {
        self.arg.size as usize
    }

    /// Fills `data` with `len` bytes from `at` bytes into the READ, from the view the READ's
    /// request pinned (not the current one: a branch edit while the READ runs cannot serve
    /// its pieces from different branch sets).
    pub fn fill(&self, data: &mut dyn ZeroCopyWriter, at: usize, len: usize) -> io::Result<usize> {
        let req = Request {
            unique: self.unique,
            ctx: self.ctx,
            secctx: None,
            view: &self.view,
        };
        fill(
            &*self.fs,
            &req,
            self.nodeid,
            &self.arg,
            self.owner,
            data,
            at,
            len,
        )
    }
}

#[allow(clippy::too_many_arguments)]
fn fill<F: ServedFs>(
    fs: &F,
    req: &Request<'_, F::View>,
    nodeid: u64,
    arg: &ReadIn,
    owner: Option<u64>,
    data: &mut dyn ZeroCopyWriter,
    at: usize,
    len: usize,
) -> io::Result<usize> {
    fs.read(
        req,
        nodeid,
        arg.fh,
        data,
        len as u32,
        arg.offset + at as u64,
        owner,
        arg.flags,
    )
}
