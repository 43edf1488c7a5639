//! FUSE_READ and FUSE_WRITE, served here so requests larger than fuse-backend-rs's 1 MiB cap
//! work. Data moves straight between guest memory and the filesystem through the chain's
//! cursors (`chain.rs`); this file never buffers payloads and never touches files itself.

use std::mem::size_of;

use fuse_backend_rs::abi::fuse_abi::{
    InHeader, OutHeader, ReadIn, WriteIn, WriteOut, READ_LOCKOWNER, WRITE_CACHE, WRITE_LOCKOWNER,
};
use fuse_backend_rs::api::filesystem::{Context, FileSystem};
use log::debug;
use vm_memory::bitmap::BitmapSlice;
use vm_memory::ByteValued;

use super::chain::Cursor;
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
    fill: impl FnOnce(&ReadIn, Option<u64>, &mut Cursor<'_, '_, S>) -> std::io::Result<usize>,
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
    ctx: &Context,
    hdr: &InHeader,
    mut r: Cursor<'_, '_, S>,
    mut w: Cursor<'_, '_, S>,
    max_write: u32,
) -> Result<usize, RequestError>
where
    F: FileSystem<Inode = u64, Handle = u64>,
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
        ctx,
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
