//! `--socket-path` and the files the daemon makes beside it (`S`, the locked `S.pid`,
//! `S.upgrade`, `S.ctl`): checked before any is made, and removed again when a start fails.
//! Never removes a file that is not a socket, nor a socket that another process serves.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use super::socket_dir::{beside, directory_of, directory_takes, kind, Directory, SUN_PATH_MAX};
use super::{upgrade, ControlSocket, Error as VhostError};

/// The longest suffix the daemon appends to `--socket-path` for a socket of its own.
const LONGEST_SUFFIX: &str = ".upgrade";

/// Why the daemon will not use `--socket-path`: bad input, nothing made (exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The path, with the daemon's longest suffix, does not fit in `sun_path`.
    #[error(
        "--socket-path {}: {len} bytes long, over the limit of {max} (a unix socket path has \
         at most {SUN_PATH_MAX} bytes, and the daemon also binds it with {LONGEST_SUFFIX} \
         appended)",
        path.display()
    )]
    TooLong {
        /// `--socket-path`.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
        /// The longest it may be.
        max: usize,
    },
    /// The socket's directory cannot hold it.
    #[error("--socket-path {}: {why}", path.display())]
    Directory {
        /// `--socket-path`.
        path: PathBuf,
        /// What is wrong with its directory.
        why: Directory,
    },
    /// What is at one of the daemon's paths cannot be looked at.
    #[error("--socket-path {}: cannot look at {}: {source}", path.display(), file.display())]
    Inspect {
        /// `--socket-path`.
        path: PathBuf,
        /// The file looked at.
        file: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A file of another type is at the socket path.
    #[error("--socket-path {}: {kind} is there, not a socket: not removing it", path.display())]
    NotASocket {
        /// `--socket-path`.
        path: PathBuf,
        /// What is there ("a regular file", "a directory"…).
        kind: &'static str,
    },
    /// A file of another type is where the daemon's control socket or upgrade channel goes.
    #[error("--socket-path {}: {} is {kind}, not a socket: not removing it", path.display(), file.display())]
    NotASocketBeside {
        /// `--socket-path`.
        path: PathBuf,
        /// `S.ctl` or `S.upgrade`.
        file: PathBuf,
        /// What is there.
        kind: &'static str,
    },
    /// Something other than a regular file is where the pid file goes.
    #[error("--socket-path {}: {} is {kind}, not a pid file: not using it", path.display(), file.display())]
    NotAPidFile {
        /// `--socket-path`.
        path: PathBuf,
        /// `S.pid`.
        file: PathBuf,
        /// What is there.
        kind: &'static str,
    },
    /// Another daemon holds the lock on `S.pid`: it serves on this socket.
    #[error(
        "--socket-path {}: another daemon (pid {pid}) serves on it: it holds the lock on {}",
        path.display(),
        file.display()
    )]
    InUse {
        /// `--socket-path`.
        path: PathBuf,
        /// `S.pid`.
        file: PathBuf,
        /// What the pid file says ("?" if unreadable).
        pid: String,
    },
    /// A process that holds no pid file accepts connections on the socket.
    #[error("--socket-path {}: a process accepts connections on it: not replacing it", path.display())]
    Served {
        /// `--socket-path`.
        path: PathBuf,
    },
    /// Whether a process serves on the socket could not be told.
    #[error("--socket-path {}: cannot tell whether a process serves on it: {source}", path.display())]
    Probe {
        /// `--socket-path`.
        path: PathBuf,
        /// Why (e.g. EACCES: no write permission on the socket).
        source: io::Error,
    },
}

/// Checks everything about `--socket-path` that can be checked without making a file: its
/// length, its directory, what is already at `S`, `S.pid`, `S.upgrade` and (when the control
/// socket `ctl` is the default one) `S.ctl`, and that no process serves on `S` (no daemon
/// holds `S.pid`, nothing accepts on `S`).
pub fn check(path: &Path, ctl: &Path) -> Result<(), Error> {
    check_files(path, ctl)?;
    let pid_path = beside(path, ".pid");
    // A pid file not ours to read (another user's daemon): whether its socket answers tells.
    if crate::sys::files::pid_file_is_locked(&pid_path).unwrap_or(false) {
        return Err(in_use(path, pid_path));
    }
    probe(path)
}

/// The error for a socket whose pid file `pid_path` another daemon holds.
fn in_use(path: &Path, pid_path: PathBuf) -> Error {
    Error::InUse {
        path: path.into(),
        pid: std::fs::read_to_string(&pid_path)
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "?".into()),
        file: pid_path,
    }
}

/// Fails if `S` is a socket a process accepts connections on (that process sees a client
/// that hung up at once). Only asked when no daemon of this kind holds `S.pid`, so never
/// disturbs one.
fn probe(path: &Path) -> Result<(), Error> {
    let is_socket = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket());
    if !is_socket {
        return Ok(());
    }
    match crate::sys::files::socket_is_served(path) {
        Ok(false) => Ok(()),
        Ok(true) => Err(Error::Served { path: path.into() }),
        Err(source) => Err(Error::Probe {
            path: path.into(),
            source,
        }),
    }
}

/// [`check`] without looking for a process that serves on `S`: what `--upgrade` checks
/// (the daemon it takes over from serves there).
pub fn check_files(path: &Path, ctl: &Path) -> Result<(), Error> {
    let len = path.as_os_str().len();
    let max = SUN_PATH_MAX - LONGEST_SUFFIX.len();
    if len > max {
        return Err(Error::TooLong {
            path: path.into(),
            len,
            max,
        });
    }
    directory_takes(path).map_err(|why| Error::Directory {
        path: path.into(),
        why,
    })?;
    let at = |file: &Path| match std::fs::symlink_metadata(file) {
        Ok(m) => Ok(Some(m.file_type())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Inspect {
            path: path.into(),
            file: file.into(),
            source,
        }),
    };
    if let Some(t) = at(path)?.filter(|t| !t.is_socket()) {
        return Err(Error::NotASocket {
            path: path.into(),
            kind: kind(t),
        });
    }
    let beside_ctl = Some(beside(path, ".ctl")).filter(|d| d == ctl);
    for file in beside_ctl.into_iter().chain([upgrade::channel_path(path)]) {
        if let Some(t) = at(&file)?.filter(|t| !t.is_socket()) {
            let kind = kind(t);
            return Err(Error::NotASocketBeside {
                path: path.into(),
                file,
                kind,
            });
        }
    }
    let file = beside(path, ".pid");
    if let Some(t) = at(&file)?.filter(|t| !t.is_file()) {
        let kind = kind(t);
        return Err(Error::NotAPidFile {
            path: path.into(),
            file,
            kind,
        });
    }
    Ok(())
}

/// What a start on `--socket-path` made: the listening sockets and the locked pid file.
pub(super) struct Bound {
    /// The front-end's listening socket `S`.
    pub listener: UnixListener,
    /// `S.pid`, locked.
    pub pid_file: File,
    /// `S.upgrade`.
    pub upgrades: UnixListener,
    /// `S.ctl`.
    pub ctl: ControlSocket,
}

/// The files a start has made so far, removed again unless the start gets to the end. Made
/// after the pid file is locked, so dropped before it: the pid file is removed while still
/// locked, never after another daemon has taken it.
struct Made {
    paths: Vec<PathBuf>,
}

impl Drop for Made {
    fn drop(&mut self) {
        for p in self.paths.iter().rev() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Checks `path` ([`check`]), locks `S.pid`, replaces a stale socket (no daemon holds the
/// pid file, no process accepts on it) and binds `S`, `S.upgrade` and the control socket
/// `ctl` (`S.ctl`, or `--ctl-socket`), each socket given to `group` if there is one. On
/// failure, what was made is removed.
pub(super) fn bind(path: &Path, ctl_path: &Path, group: Option<u32>) -> Result<Bound, VhostError> {
    check_files(path, ctl_path)?;
    let own_ctl = *ctl_path == beside(path, ".ctl");
    let pid_path = beside(path, ".pid");
    let existed = std::fs::symlink_metadata(&pid_path).is_ok();
    let pid_file = crate::sys::files::write_pid_file(&pid_path).map_err(|source| {
        match source.raw_os_error() {
            Some(libc::EWOULDBLOCK) => in_use(path, pid_path.clone()).into(),
            Some(libc::ELOOP) => Error::NotAPidFile {
                path: path.into(),
                file: pid_path.clone(),
                kind: "a symlink",
            }
            .into(),
            Some(libc::EACCES | libc::EPERM | libc::EROFS) => Error::Directory {
                path: path.into(),
                why: Directory::Refuses {
                    dir: directory_of(path),
                    source,
                },
            }
            .into(),
            _ => VhostError::PidFile {
                path: pid_path.clone(),
                source,
            },
        }
    })?;
    let mut made = Made {
        paths: if existed { Vec::new() } else { vec![pid_path] },
    };
    // The pid file is ours: no daemon of this kind serves on `S`; another program might.
    probe(path)?;
    let listen = |p: &Path, mode| {
        crate::sys::files::bind_unix(p, mode).map_err(|source| VhostError::Listen {
            path: p.into(),
            source,
        })
    };
    let give = |p: &Path| match group {
        Some(gid) => crate::sys::files::give_socket_to_group(p, gid).map_err(|source| {
            VhostError::SocketGroup {
                path: p.into(),
                source,
            }
        }),
        None => Ok(()),
    };
    let listener = listen(path, None)?;
    made.paths.push(path.into());
    give(path)?;
    let channel = upgrade::channel_path(path);
    let upgrades = listen(&channel, Some(0o600))?;
    made.paths.push(channel);
    let ctl = if own_ctl {
        let ctl = listen(ctl_path, Some(0o600))?;
        made.paths.push(ctl_path.into());
        give(ctl_path)?;
        ctl
    } else {
        // Not covered by the pid file's lock: checked for a process serving on it.
        let ctl = super::ctl_socket::bind(ctl_path, group)?;
        made.paths.push(ctl_path.into());
        ctl
    };
    made.paths.clear();
    Ok(Bound {
        listener,
        pid_file,
        upgrades,
        ctl: ControlSocket {
            listener: ctl,
            group,
        },
    })
}

/// Removes the socket, its pid file, upgrade channel and control socket `<socket>.ctl` (on
/// exit; the sandbox's parent does it for its child). A `--ctl-socket` elsewhere is removed
/// by [`super::remove_ctl_socket`].
pub fn remove_socket_files(path: &Path) {
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(upgrade::channel_path(path));
    let _ = std::fs::remove_file(beside(path, ".ctl"));
    let _ = std::fs::remove_file(beside(path, ".pid"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_start_that_fails_after_the_pid_file_removes_it() {
        let d = tempfile::tempdir().unwrap();
        let s = d.path().join("s");
        let _other = UnixListener::bind(&s).unwrap();
        let e = bind(&s, &beside(&s, ".ctl"), None).err().unwrap();
        assert!(
            matches!(e, VhostError::SocketPath(Error::Served { .. })),
            "{e}"
        );
        assert_eq!(names(d.path()), ["s"]);
    }

    #[test]
    fn a_second_start_on_a_bound_socket_is_refused_and_changes_nothing() {
        let d = tempfile::tempdir().unwrap();
        let s = d.path().join("s");
        let first = bind(&s, &beside(&s, ".ctl"), None).unwrap();
        let all = ["s", "s.ctl", "s.pid", "s.upgrade"];
        assert_eq!(names(d.path()), all);
        let e = bind(&s, &beside(&s, ".ctl"), None).err().unwrap();
        let want = format!("another daemon (pid {})", std::process::id());
        assert!(e.to_string().contains(&want), "{e}");
        assert_eq!(names(d.path()), all);
        drop(first);
        // Its daemon gone, the socket and pid file are stale: replaced.
        let _second = bind(&s, &beside(&s, ".ctl"), None).unwrap();
        assert_eq!(names(d.path()), all);
    }

    #[test]
    fn the_longest_path_leaves_room_for_the_upgrade_channel() {
        let d = tempfile::tempdir().unwrap();
        let room = SUN_PATH_MAX - LONGEST_SUFFIX.len() - d.path().as_os_str().len() - 1;
        let longest = d.path().join("s".repeat(room));
        let _b = bind(&longest, &beside(&longest, ".ctl"), None).unwrap();
        let over = d.path().join("t".repeat(room + 1));
        let e = check(&over, &beside(&over, ".ctl")).unwrap_err();
        assert!(
            matches!(e, Error::TooLong { len, max: 99, .. } if len == 100),
            "{e}"
        );
    }
}
