//! The host's control interface to a running union, by mergerfs's runtime names: every
//! `user.mergerfs.<option>` read and (where it may change while the guest runs) set, branch
//! edits, and the per-file queries (`basepath`, `relpath`, `fullpath`, `allpaths`). Reached
//! only from the host (the `ctl` socket and SIGHUP), never from a guest request.

use std::os::fd::OwnedFd;

use super::UnionFs;

/// A control request that failed: the errno mergerfs gives for it (ENOATTR unknown key,
/// EROFS read-only key, EINVAL bad value, ENOENT no such path…) and one line for the user.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CtlError {
    /// The errno.
    pub errno: i32,
    /// What went wrong, for the user.
    pub message: String,
}

impl CtlError {
    /// An error `errno` with `message`.
    pub fn new(errno: i32, message: impl Into<String>) -> Self {
        CtlError {
            errno,
            message: message.into(),
        }
    }
}

impl UnionFs {
    /// Every key, mergerfs's names without the `user.mergerfs.` prefix, sorted.
    pub fn ctl_keys(&self) -> Vec<String> {
        Vec::new()
    }

    /// The value of `key` (with or without the `user.mergerfs.` prefix).
    pub fn ctl_get(&self, key: &str) -> Result<String, CtlError> {
        Err(CtlError::new(libc::ENODATA, format!("unknown option '{key}'")))
    }

    /// Sets `key` to `value`. `dirs` are the directories a branch edit adds, opened by the
    /// client in the order their paths appear in `value` (so a sandboxed daemon needs not see
    /// them); with none, the daemon opens the paths itself. Returns what changed, for the log.
    pub fn ctl_set(&self, key: &str, value: &str, dirs: Vec<OwnedFd>) -> Result<String, CtlError> {
        let _ = dirs;
        Err(CtlError::new(
            libc::ENODATA,
            format!("unknown option '{key}' (value '{value}')"),
        ))
    }

    /// A per-file query on `path` (a union path, relative or with a leading `/`): `basepath`,
    /// `relpath`, `fullpath` (one value each) or `allpaths` (one per branch holding it).
    pub fn ctl_query(&self, path: &str, what: &str) -> Result<Vec<Vec<u8>>, CtlError> {
        Err(CtlError::new(
            libc::ENOENT,
            format!("{path}: no such file ({what})"),
        ))
    }
}
