//! One file per FUSE operation family. Each function takes the `UnionFs` and the request's
//! already-decoded arguments, and returns an errno-only `io::Error` on failure.

pub mod attr;
pub mod copy;
pub mod create;
pub mod io;
pub mod ioctl;
pub mod link;
pub mod lock;
pub mod lookup;
pub mod open;
pub mod readdir;
pub mod remove;
pub mod rename;
pub mod statfs;
pub mod sync;
pub mod xattr;
