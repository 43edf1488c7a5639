//! A request's body, decoded from its private copy: plain-data arguments in order, then names.
//! A body too short for what its opcode carries is the guest's error (EINVAL).

use std::ffi::CStr;
use std::io;
use std::mem::size_of;

use vm_memory::ByteValued;

use super::reply::RequestError;

/// A request body being decoded: plain-data arguments, then names.
pub(super) struct Body<'b>(pub(super) &'b [u8]);

impl<'b> Body<'b> {
    /// The next `T`, or EINVAL (a truncated request) when the body is too short.
    pub(super) fn obj<T: ByteValued + Default>(&mut self) -> Result<T, RequestError> {
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

    /// The rest as two names, each ended by a NUL (as the `Server`'s `extract_two_cstrs`):
    /// SYMLINK's name and target, RENAME's old and new name.
    pub(super) fn two_names(&self) -> Result<(&'b CStr, &'b CStr), RequestError> {
        let einval = || RequestError::Decode(io::Error::from_raw_os_error(libc::EINVAL));
        let first = CStr::from_bytes_until_nul(self.0).map_err(|_| einval())?;
        let rest = &self.0[first.to_bytes().len() + 1..];
        if rest.is_empty() {
            return Err(einval());
        }
        Ok((first, Body(rest).name()?))
    }

    /// The rest, as it is.
    pub(super) fn rest(&self) -> &'b [u8] {
        self.0
    }

    /// The rest as one name: up to its first NUL, which must be there (as the `Server`'s
    /// `bytes_to_cstr`), else EINVAL.
    pub(super) fn name(&self) -> Result<&'b CStr, RequestError> {
        CStr::from_bytes_until_nul(self.0)
            .map_err(|_| RequestError::Decode(io::Error::from_raw_os_error(libc::EINVAL)))
    }
}
