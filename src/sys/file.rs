//! Borrowing a descriptor as a `std::fs::File` for APIs that want `&mut File` (the zero-copy
//! reader/writer traits), without taking ownership or closing it.

use std::fs::File;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd};

/// Runs `f` with a `File` view of `fd`. The descriptor stays owned by its owner and is not closed.
pub fn with_file<R>(fd: BorrowedFd<'_>, f: impl FnOnce(&mut File) -> R) -> R {
    // SAFETY: `fd` is a valid open descriptor for the borrow's lifetime, which outlives this call;
    // ManuallyDrop guarantees the temporary File never closes it.
    let mut file = ManuallyDrop::new(unsafe { File::from_raw_fd(fd.as_raw_fd()) });
    f(&mut file)
}

/// A `FileVolatileSlice` over an ordinary byte buffer, for moving file data through the
/// zero-copy traits without guest memory (tests and tools).
pub fn volatile_slice(buf: &mut [u8]) -> fuse_backend_rs::file_buf::FileVolatileSlice<'_> {
    // SAFETY: `buf` is valid, exclusively borrowed memory for the slice's whole lifetime.
    unsafe { fuse_backend_rs::file_buf::FileVolatileSlice::from_mut_slice(buf) }
}

/// Makes descriptor `dst` refer to `src`'s open file (dup3), atomically for every thread using
/// `dst`; `dst` keeps its number and its owner. Used to move an open file to another branch.
pub fn replace_fd(src: BorrowedFd<'_>, dst: BorrowedFd<'_>) -> std::io::Result<()> {
    // SAFETY: both are valid open descriptors for the duration of the call; dup3 only changes
    // which open file `dst`'s number refers to, and `dst` stays owned by its OwnedFd.
    let r = unsafe { libc::dup3(src.as_raw_fd(), dst.as_raw_fd(), libc::O_CLOEXEC) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}
