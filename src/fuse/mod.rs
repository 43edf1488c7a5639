//! The FUSE protocol, apart from any transport: the opcode table, one decoder and one router
//! for every opcode, reply encoding, INIT negotiation, the lock waits a FUSE_INTERRUPT ends,
//! and the device state's format. A transport (virtio in `vhost/`, a test's byte buffers,
//! later /dev/fuse) hands [`Server::serve`] a request's header and a cursor over the rest of
//! its bytes, a cursor over the reply's buffers, and a [`Transport`] that says how many pages
//! a request may carry and how READ data is filled. Nothing here knows rings, descriptor
//! chains, guest memory or vhost-user.

mod body;
pub mod buf;
mod filesystem;
mod handshake;
mod init;
mod io;
mod listing;
#[cfg(test)]
mod oracle_fs;
#[cfg(test)]
mod oracle_tests;
mod own;
mod reply;
mod router;
pub mod secctx;
mod server;
pub mod state;
mod transport;
mod waiters;

pub use buf::Cursor;
pub use filesystem::{Cancel, Filesystem, Req, Request, ServedFs, StatxExtra};
pub use init::{
    effective_max_pages, Negotiated, DEFAULT_MAX_WRITE, MAX_PAGES_LIMIT, MAX_WRITE_LIMIT,
};
pub use io::{OwnedRead, ReadJob};
pub use reply::RequestError;
pub use router::{info, Cost, OpInfo};
pub use secctx::SecContext;
pub use server::Server;
pub use transport::{Plain, Transport};
