//! Constructing libc structs that have private padding fields and so cannot be built with a
//! struct literal.

/// An all-zero `stat64` (attributes of a negative lookup entry).
pub fn zeroed_stat() -> libc::stat64 {
    // SAFETY: stat64 is plain integers and padding; all-zero bytes are a valid value.
    unsafe { std::mem::zeroed() }
}

/// An all-zero `statvfs64`.
pub fn zeroed_statvfs() -> libc::statvfs64 {
    // SAFETY: statvfs64 is plain integers and padding; all-zero bytes are a valid value.
    unsafe { std::mem::zeroed() }
}
