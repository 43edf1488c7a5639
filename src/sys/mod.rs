//! Safe wrappers around the system calls the daemon needs; the only module with `unsafe`.
//! Nothing here knows about FUSE, virtio or the union: just file descriptors and credentials.

pub mod abi;
pub mod beneath;
pub mod caps;
pub mod creds;
pub mod fd;
pub mod file;
pub mod files;
pub mod fusedev;
pub mod handle;
pub mod limits;
pub mod lock;
pub mod mem;
pub mod sandbox;
pub mod seccomp;
pub mod spawn;
pub mod thread;
pub mod uds;
