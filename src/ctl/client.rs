//! The control socket's client: connects to `<socket>.ctl`, sends requests
//! ([`super::proto`]) and reads the replies. Branch edits are prepared here ([`super::edit`]):
//! the directories they add are opened by the client and sent as descriptors. Prints nothing
//! (that is [`super::cli`]).

use std::io::{self, Read};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::edit::{self, EditError};
use super::proto::{self, ProtoError, Reply, Request};
use crate::sys::uds;

/// The prefix mergerfs's xattr names carry, optional here.
pub const KEY_PREFIX: &str = "user.mergerfs.";

/// Why a control request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The control socket could not be reached.
    #[error("cannot connect to {}: {source}", path.display())]
    Connect {
        /// The control socket.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The connection failed mid-request.
    #[error("control connection: {0}")]
    Io(#[from] io::Error),
    /// A request that cannot be encoded, or a reply that is not the protocol.
    #[error("control protocol: {0}")]
    Protocol(#[from] ProtoError),
    /// The daemon refused or failed the request.
    #[error("{message}")]
    Refused {
        /// The errno it gave.
        errno: i32,
        /// Its message.
        message: String,
    },
    /// A branch edit that cannot be prepared (no such directory…).
    #[error("{0}")]
    Edit(#[from] EditError),
    /// A reply with a different number of values than the request gives.
    #[error("control protocol: {0} values in a reply that has one")]
    Values(usize),
}

/// `KEY` without mergerfs's `user.mergerfs.` prefix.
pub fn strip_prefix(key: &str) -> &str {
    key.strip_prefix(KEY_PREFIX).unwrap_or(key)
}

/// The control socket for `path`: `path` itself if it ends in `.ctl`, else the vhost-user
/// socket's `<path>.ctl`.
pub fn ctl_socket(path: &Path) -> PathBuf {
    if path.extension().is_some_and(|e| e == "ctl") {
        path.to_path_buf()
    } else {
        crate::vhost::ctl_path(path)
    }
}

/// One connection to a daemon's control socket; requests are answered in order.
#[derive(Debug)]
pub struct Client {
    stream: UnixStream,
}

impl Client {
    /// Connects to the control socket `path` (see [`ctl_socket`]).
    pub fn connect(path: &Path) -> Result<Self, ClientError> {
        let stream = UnixStream::connect(path).map_err(|source| ClientError::Connect {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Client { stream })
    }

    /// Gives up on a reply after `timeout` (none: waits for ever).
    pub fn set_timeout(&self, timeout: Option<Duration>) -> Result<(), ClientError> {
        self.stream.set_read_timeout(timeout)?;
        self.stream.set_write_timeout(timeout)?;
        Ok(())
    }

    /// Every key, without the prefix.
    pub fn keys(&mut self) -> Result<Vec<String>, ClientError> {
        let values = self.call(&Request::Keys, &[])?;
        Ok(values
            .into_iter()
            .map(|v| String::from_utf8_lossy(&v).into_owned())
            .collect())
    }

    /// The value of `key` (with or without the prefix).
    pub fn get(&mut self, key: &str) -> Result<String, ClientError> {
        let req = Request::Get {
            key: strip_prefix(key).to_string(),
        };
        let mut values = self.call(&req, &[])?;
        if values.len() != 1 {
            return Err(ClientError::Values(values.len()));
        }
        Ok(String::from_utf8_lossy(&values.remove(0)).into_owned())
    }

    /// Sets `key` (with or without the prefix) to `value`. A branch edit's globs are expanded
    /// and the directories opened and sent along ([`edit::prepare`]); nothing is sent if one
    /// of them is missing.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ClientError> {
        let key = strip_prefix(key);
        let prepared = edit::prepare(key, value)?;
        let req = Request::Set {
            key: key.to_string(),
            value: prepared.value,
        };
        let fds: Vec<_> = prepared.dirs.iter().map(|d| d.as_fd()).collect();
        self.call(&req, &fds)?;
        Ok(())
    }

    /// A per-file query: `what` (`basepath`, `relpath`, `fullpath`, `allpaths`) of union path
    /// `path`, one value each (one per branch for `allpaths`).
    pub fn query(&mut self, path: &str, what: &str) -> Result<Vec<Vec<u8>>, ClientError> {
        let req = Request::Query {
            path: path.to_string(),
            what: what.to_string(),
        };
        self.call(&req, &[])
    }

    /// The control protocol version the daemon speaks ([`proto::PROTOCOL_VERSION`]); 1 for
    /// a daemon from before the `protocol` request, which refuses it as an unknown verb.
    pub fn protocol(&mut self) -> Result<u32, ClientError> {
        match self.call(&Request::Protocol, &[]) {
            Ok(values) => {
                let [v] = values.as_slice() else {
                    return Err(ClientError::Values(values.len()));
                };
                std::str::from_utf8(v)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .ok_or(ClientError::Protocol(ProtoError::NotUtf8(
                        "protocol version",
                    )))
            }
            Err(ClientError::Refused { errno, message })
                if errno == libc::EINVAL && message.contains("unknown verb 'protocol'") =>
            {
                Ok(1)
            }
            Err(e) => Err(e),
        }
    }

    /// Sends one request with `fds` and reads its reply.
    fn call(
        &mut self,
        req: &Request,
        fds: &[std::os::fd::BorrowedFd<'_>],
    ) -> Result<Vec<Vec<u8>>, ClientError> {
        let bytes = proto::frame(&req.encode()?)?;
        uds::send_with_fds(&self.stream, &bytes, fds)?;
        let mut header = [0u8; proto::HEADER_LEN];
        (&self.stream).read_exact(&mut header)?;
        let mut payload = vec![0u8; proto::frame_len(header)?];
        (&self.stream).read_exact(&mut payload)?;
        match Reply::decode(&payload)? {
            Reply::Ok(values) => Ok(values),
            Reply::Err { errno, message } => Err(ClientError::Refused { errno, message }),
        }
    }
}

/// Sets each `(key, value)` in order on the daemon whose control socket is `ctl_path`, over
/// one connection (a configuration re-read). An error reaching the daemon fails the whole
/// batch; otherwise each setting's own outcome is returned, in order, so one refused value
/// does not keep the others from applying.
pub fn apply_settings(
    ctl_path: &Path,
    settings: &[(String, String)],
) -> Result<Vec<Result<(), ClientError>>, ClientError> {
    let mut client = Client::connect(ctl_path)?;
    let mut outcomes = Vec::with_capacity(settings.len());
    for (key, value) in settings {
        match client.set(key, value) {
            Err(e @ (ClientError::Io(_) | ClientError::Protocol(_))) => return Err(e),
            outcome => outcomes.push(outcome),
        }
    }
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_lose_their_xattr_prefix() {
        assert_eq!(
            strip_prefix("user.mergerfs.category.create"),
            "category.create"
        );
        assert_eq!(strip_prefix("category.create"), "category.create");
        assert_eq!(strip_prefix("user.other"), "user.other");
    }

    #[test]
    fn either_socket_names_the_control_socket() {
        assert_eq!(
            ctl_socket(Path::new("/run/vfs.sock")),
            Path::new("/run/vfs.sock.ctl")
        );
        assert_eq!(
            ctl_socket(Path::new("/run/vfs.sock.ctl")),
            Path::new("/run/vfs.sock.ctl")
        );
        assert_eq!(ctl_socket(Path::new("s")), Path::new("s.ctl"));
    }

    /// A daemon from before `protocol` refuses it as a malformed request: version 1.
    #[test]
    fn a_daemon_that_does_not_know_protocol_speaks_version_1() {
        for (answer, want) in [
            (
                format!(
                    "err\0{}\0malformed request: unknown verb 'protocol'",
                    libc::EINVAL
                ),
                1,
            ),
            ("ok\x002".to_string(), 2),
        ] {
            let (a, b) = UnixStream::pair().unwrap();
            let daemon = std::thread::spawn(move || {
                let mut frame = [0u8; 4 + 8];
                (&b).read_exact(&mut frame).unwrap();
                assert_eq!(&frame[4..], b"protocol");
                uds::send_with_fds(&b, &proto::frame(answer.as_bytes()).unwrap(), &[]).unwrap();
            });
            let mut c = Client { stream: a };
            assert_eq!(c.protocol().unwrap(), want);
            daemon.join().unwrap();
        }
    }

    #[test]
    fn a_missing_socket_is_a_connect_error() {
        let e = Client::connect(Path::new("/nonexistent.ctl")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot connect to /nonexistent.ctl"),
            "{e}"
        );
    }
}
