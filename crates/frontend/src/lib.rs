//! vufs-frontend: the VMM side of vhost-user-fs as a test-support library. It plays QEMU plus a
//! guest virtio-fs driver so backends can be tested and benchmarked without a VM. Never linked
//! into the daemon.
//!
//! ```no_run
//! use vufs_frontend::{ops, ConnectOptions, Device};
//! let mut dev = Device::connect("/tmp/vfs.sock".as_ref(), &ConnectOptions::default()).unwrap();
//! let init = dev.init(ops::DEFAULT_INIT_FLAGS).unwrap();
//! let e = dev.lookup(ops::ROOT_ID, b"hello.txt").unwrap();
//! let fh = dev.open(e.nodeid, libc::O_RDONLY as u32).unwrap().fh;
//! let bytes = dev.read(e.nodeid, fh, 0, init.max_write).unwrap();
//! ```

mod alloc;
pub mod client;
pub mod device;
pub mod error;
pub mod memory;
pub mod ops;
pub mod process;
pub mod request;
pub mod state;
pub mod transport;
pub mod vring;

pub use device::{ConnectOptions, Device, Negotiated, HIPRIO_QUEUE, REQUEST_QUEUE};
pub use error::{Error, Result};
pub use fuse_backend_rs::abi::fuse_abi;
pub use request::{FuseReply, FuseRequest, RawCompletion, RawSegment};
pub use transport::Ticket;
