//! `--ctl-socket PATH`: the control socket at a path of the user's choosing (with `--fd`, where
//! there is no `<socket>.ctl`, or instead of it). Checked before anything is made, bound
//! before the sandbox, removed on exit. Never removes a file that is not a socket, nor a
//! socket that a process serves.

use std::io;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use super::socket_dir::{beside, directory_takes, kind, Directory, SUN_PATH_MAX};

/// Why the daemon will not use `--ctl-socket`: bad input, nothing made (exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The path does not fit in `sun_path`.
    #[error(
        "--ctl-socket {}: {len} bytes long, over the limit of {SUN_PATH_MAX} for a unix socket path",
        path.display()
    )]
    TooLong {
        /// `--ctl-socket`.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
    },
    /// The socket's directory cannot hold it.
    #[error("--ctl-socket {}: {why}", path.display())]
    Directory {
        /// `--ctl-socket`.
        path: PathBuf,
        /// What is wrong with its directory.
        why: Directory,
    },
    /// What is at the path cannot be looked at.
    #[error("--ctl-socket {}: cannot look at it: {source}", path.display())]
    Inspect {
        /// `--ctl-socket`.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A file of another type is at the path.
    #[error("--ctl-socket {}: {kind} is there, not a socket: not removing it", path.display())]
    NotASocket {
        /// `--ctl-socket`.
        path: PathBuf,
        /// What is there ("a regular file", "a directory"…).
        kind: &'static str,
    },
    /// A process accepts connections on the socket (another daemon's control socket).
    #[error("--ctl-socket {}: a process accepts connections on it: not replacing it", path.display())]
    Served {
        /// `--ctl-socket`.
        path: PathBuf,
    },
    /// Whether a process serves on the socket could not be told.
    #[error("--ctl-socket {}: cannot tell whether a process serves on it: {source}", path.display())]
    Probe {
        /// `--ctl-socket`.
        path: PathBuf,
        /// Why (e.g. EACCES: no write permission on the socket).
        source: io::Error,
    },
    /// The path is one of the daemon's own (the vhost-user socket or a file beside it).
    #[error("--ctl-socket {}: the daemon's own {what} is there", path.display())]
    Clash {
        /// `--ctl-socket`.
        path: PathBuf,
        /// Which of the daemon's files.
        what: &'static str,
    },
}

/// Checks `path` without making anything: its length, its directory, that nothing but a
/// socket is there and that no process serves on it.
pub fn check(path: &Path) -> Result<(), Error> {
    let len = path.as_os_str().len();
    if len > SUN_PATH_MAX {
        return Err(Error::TooLong {
            path: path.into(),
            len,
        });
    }
    directory_takes(path).map_err(|why| Error::Directory {
        path: path.into(),
        why,
    })?;
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(Error::Inspect {
            path: path.into(),
            source,
        }),
        Ok(m) if !m.file_type().is_socket() => Err(Error::NotASocket {
            path: path.into(),
            kind: kind(m.file_type()),
        }),
        Ok(_) => match crate::sys::files::socket_is_served(path) {
            Ok(false) => Ok(()),
            Ok(true) => Err(Error::Served { path: path.into() }),
            Err(source) => Err(Error::Probe {
                path: path.into(),
                source,
            }),
        },
    }
}

/// Fails if `ctl` is the vhost-user socket `socket` or one of the files the daemon makes
/// beside it (other than `<socket>.ctl`, which is where the control socket goes anyway).
pub fn check_apart(ctl: &Path, socket: &Path) -> Result<(), Error> {
    let clash = |what| {
        Err(Error::Clash {
            path: ctl.into(),
            what,
        })
    };
    if ctl == socket {
        return clash("vhost-user socket");
    }
    if ctl == beside(socket, ".pid") {
        return clash("pid file");
    }
    if ctl == super::upgrade::channel_path(socket) {
        return clash("upgrade channel");
    }
    Ok(())
}

/// Checks `path` ([`check`]) and listens on it (mode 0600, or 0660 given to `group`),
/// replacing a stale socket. On failure nothing is left at `path`.
pub fn bind(path: &Path, group: Option<u32>) -> Result<UnixListener, super::Error> {
    check(path)?;
    let listener =
        crate::sys::files::bind_unix(path, Some(0o600)).map_err(|source| super::Error::Listen {
            path: path.into(),
            source,
        })?;
    if let Some(gid) = group {
        if let Err(source) = crate::sys::files::give_socket_to_group(path, gid) {
            let _ = std::fs::remove_file(path);
            return Err(super::Error::SocketGroup {
                path: path.into(),
                source,
            });
        }
    }
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_stale_socket_is_replaced() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c");
        let first = bind(&p, None).unwrap();
        let e = bind(&p, None).unwrap_err();
        assert!(
            e.to_string().contains("a process accepts connections"),
            "{e}"
        );
        drop(first);
        let _second = bind(&p, None).unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, "x").unwrap();
        let e = check(&f).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "--ctl-socket {}: a regular file is there, not a socket: not removing it",
                f.display()
            )
        );
        assert_eq!(std::fs::read(&f).unwrap(), b"x");
        let e = check(&d.path().join("no/c")).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Directory {
                    why: Directory::Missing(_),
                    ..
                }
            ),
            "{e}"
        );
        let long = d.path().join("c".repeat(SUN_PATH_MAX));
        assert!(matches!(check(&long), Err(Error::TooLong { .. })));
    }
}
