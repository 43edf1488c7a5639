//! The directory a daemon's socket goes in, shared by `--socket-path` (`socket_path.rs`) and
//! `--ctl-socket` (`ctl_socket.rs`): names beside a socket, whether a socket can be made there,
//! and what a file found in the way is. Makes nothing.

use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// The longest path a unix socket can be bound to: `sun_path` holds 108 bytes with its NUL.
pub const SUN_PATH_MAX: usize = 107;

/// `socket` with `suffix` appended (`S.pid`, `S.ctl`…).
pub fn beside(socket: &Path, suffix: &str) -> PathBuf {
    let mut p = socket.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}
/// Why a socket cannot be made in its directory (said after the option and path it is for).
#[derive(Debug, thiserror::Error)]
pub enum Directory {
    /// There is none.
    #[error("directory {} does not exist", .0.display())]
    Missing(PathBuf),
    /// It is not a directory (or a component of its path is not).
    #[error("{} is not a directory", .0.display())]
    NotOne(PathBuf),
    /// It cannot be inspected, or this process may not create a file in it.
    #[error("cannot create files in directory {}: {source}", dir.display())]
    Refuses {
        /// The directory.
        dir: PathBuf,
        /// Why (EACCES, EROFS…).
        source: io::Error,
    },
}

/// Whether a socket can be made beside `socket`, in its directory: it exists, is a
/// directory, and this process may create a file in it.
pub fn directory_takes(socket: &Path) -> Result<(), Directory> {
    let dir = directory_of(socket);
    match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(Directory::NotOne(dir)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(Directory::Missing(dir)),
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => return Err(Directory::NotOne(dir)),
        Err(source) => return Err(Directory::Refuses { dir, source }),
    }
    crate::sys::files::may_create_in(&dir).map_err(|source| Directory::Refuses { dir, source })
}

/// The socket's directory (`.` for a bare name).
pub fn directory_of(socket: &Path) -> PathBuf {
    match socket.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        Some(_) => PathBuf::from("."),
        None => socket.to_path_buf(),
    }
}

/// What a file of type `t` is, for a message.
pub fn kind(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symlink"
    } else if t.is_file() {
        "a regular file"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "a file of an unknown type"
    }
}
