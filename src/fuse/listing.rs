//! READDIR and READDIRPLUS replies: entries written behind the reply header as the
//! filesystem produces them, each padded to 8 bytes as the kernel reads them, until the
//! guest's size is reached; the header last, with the length written.

use std::io;
use std::mem::size_of;

use fuse_backend_rs::abi::fuse_abi::{Dirent, EntryOut, InHeader, OutHeader, ReadIn};
use fuse_backend_rs::api::filesystem::{DirEntry, Entry};
use vm_memory::bitmap::BitmapSlice;
use vm_memory::ByteValued;

use super::buf::Cursor;
use super::filesystem::{Request, ServedFs};
use super::reply::{reply_errno, reply_io_error, RequestError};
use super::server::Server;

impl<F: ServedFs> Server<F> {
    /// READDIR or READDIRPLUS: entries written behind the reply header as the filesystem
    /// produces them, up to the guest's `size`, then the header.
    pub(super) fn listing<B: BitmapSlice>(
        &self,
        plus: bool,
        req: &Request<'_, F::View>,
        hdr: &InHeader,
        arg: &ReadIn,
        w: &mut Cursor<'_, '_, B>,
    ) -> Result<usize, RequestError> {
        if w.available() < arg.size as usize {
            return reply_errno(w, hdr.unique, libc::ENOMEM);
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
