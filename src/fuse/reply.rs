//! Writing FUSE replies into a reply's buffers, and the per-request error type that decides
//! which errno a guest gets when its message could not be served. Knows nothing of files.

use std::io::{self, IoSlice, Write};
use std::mem::size_of;

use fuse_backend_rs::abi::fuse_abi::{AttrOut, EntryOut, GetxattrOut, OutHeader};
use fuse_backend_rs::api::filesystem::Entry;
use vm_memory::ByteValued;

/// Why one request failed without a reply having been written.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The request body could not be decoded (truncated or malformed).
    #[error("cannot decode request: {0}")]
    Decode(io::Error),
    /// The reply could not be written into the guest's buffers.
    #[error("cannot encode reply: {0}")]
    Encode(io::Error),
    /// The filesystem panicked while serving the request.
    #[error("filesystem panicked")]
    Panic,
}

impl RequestError {
    /// The errno the guest is told: EINVAL for its own malformed input, EIO for our failures.
    pub fn errno(&self) -> i32 {
        match self {
            RequestError::Decode(_) => libc::EINVAL,
            RequestError::Encode(_) | RequestError::Panic => libc::EIO,
        }
    }
}

/// Writes a successful reply: header plus `body`. Returns the used length. A reply that
/// does not fit the guest's buffers is an error (the guest then gets an errno, or nothing
/// where not even that fits), never a truncated success.
pub fn reply_ok<W: Write + ?Sized>(
    w: &mut W,
    unique: u64,
    body: &[u8],
) -> Result<usize, RequestError> {
    let len = size_of::<OutHeader>() + body.len();
    let out = OutHeader {
        len: len as u32,
        error: 0,
        unique,
    };
    const SMALL: usize = 256;
    let n = if len <= SMALL {
        // The usual reply (an entry, attributes, a handle): one copy into guest memory.
        let mut buf = [0u8; SMALL];
        buf[..size_of::<OutHeader>()].copy_from_slice(out.as_slice());
        buf[size_of::<OutHeader>()..len].copy_from_slice(body);
        w.write(&buf[..len]).map_err(RequestError::Encode)?
    } else {
        w.write_vectored(&[IoSlice::new(out.as_slice()), IoSlice::new(body)])
            .map_err(RequestError::Encode)?
    };
    if n < len {
        return Err(RequestError::Encode(io::ErrorKind::WriteZero.into()));
    }
    Ok(n)
}

/// Writes an error reply carrying `-errno`. Returns the used length.
pub fn reply_errno<W: Write + ?Sized>(
    w: &mut W,
    unique: u64,
    errno: i32,
) -> Result<usize, RequestError> {
    let out = OutHeader {
        len: size_of::<OutHeader>() as u32,
        error: -errno,
        unique,
    };
    w.write_all(out.as_slice()).map_err(RequestError::Encode)?;
    Ok(out.len as usize)
}

/// Writes an error reply for a filesystem error; one without an errno gets the `Server`'s
/// mapping of its kind (EIO for the rest).
pub fn reply_io_error<W: Write + ?Sized>(
    w: &mut W,
    unique: u64,
    err: &io::Error,
) -> Result<usize, RequestError> {
    let errno = err
        .raw_os_error()
        .unwrap_or_else(|| fuse_backend_rs::encode_io_error_kind(err.kind()));
    reply_errno(w, unique, errno)
}

/// The reply to a call that returns nothing.
pub(super) fn done<W: Write + ?Sized>(
    w: &mut W,
    unique: u64,
    res: io::Result<()>,
) -> Result<usize, RequestError> {
    match res {
        Ok(()) => reply_ok(w, unique, &[]),
        Err(e) => reply_io_error(w, unique, &e),
    }
}

/// The reply to a size query (GETXATTR, LISTXATTR with size 0).
pub(super) fn count<W: Write + ?Sized>(
    w: &mut W,
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
pub(super) fn entry<W: Write + ?Sized>(
    w: &mut W,
    unique: u64,
    res: io::Result<Entry>,
) -> Result<usize, RequestError> {
    match res {
        Ok(e) => reply_ok(w, unique, EntryOut::from(e).as_slice()),
        Err(e) => reply_io_error(w, unique, &e),
    }
}

/// The reply to a call that returns attributes (GETATTR, SETATTR).
pub(super) fn attr<W: Write + ?Sized>(
    w: &mut W,
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
