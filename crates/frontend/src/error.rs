//! The one error type of the frontend driver; it never panics on a misbehaving backend.

use std::io;
use std::time::Duration;

/// Everything that can go wrong while driving a vhost-user-fs backend.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Connecting to the backend's unix socket failed.
    #[error("connect to vhost-user socket {path}: {source}")]
    Connect {
        /// Socket path.
        path: std::path::PathBuf,
        /// Underlying vhost error.
        source: vhost::Error,
    },
    /// A vhost-user control message failed.
    #[error("vhost-user {what}: {source}")]
    Vhost {
        /// Which message.
        what: &'static str,
        /// Underlying vhost error.
        source: vhost::Error,
    },
    /// The backend lacks a virtio feature the driver cannot do without.
    #[error("backend does not offer required feature {0}")]
    MissingFeature(&'static str),
    /// Creating or mapping the guest memory failed.
    #[error("guest memory: {0}")]
    Memory(String),
    /// An eventfd, epoll or memfd system call failed.
    #[error("{what}: {source}")]
    Io {
        /// Which operation.
        what: &'static str,
        /// Underlying OS error.
        source: io::Error,
    },
    /// No reply arrived within the timeout (the backend dropped the request or hung).
    #[error("no completion within {0:?}")]
    Timeout(Duration),
    /// The ring or the data area has no room for this chain.
    #[error("no room: {0}")]
    NoRoom(&'static str),
    /// The queue index does not name a configured queue.
    #[error("queue {0} is not configured")]
    NoSuchQueue(usize),
    /// The backend answered with a FUSE error.
    #[error("FUSE errno {0}")]
    Errno(i32),
    /// The reply was shorter or otherwise not what the request calls for.
    #[error("malformed reply: {0}")]
    BadReply(String),
    /// Spawning or watching the backend process failed.
    #[error("backend process: {0}")]
    Process(String),
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The FUSE errno if this is a FUSE error reply.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Errno(e) => Some(*e),
            _ => None,
        }
    }

    pub(crate) fn io(what: &'static str) -> impl FnOnce(io::Error) -> Error {
        move |source| Error::Io { what, source }
    }

    pub(crate) fn vhost(what: &'static str) -> impl FnOnce(vhost::Error) -> Error {
        move |source| Error::Vhost { what, source }
    }
}
