//! What a lookup found on one branch, and union paths: the plain data and pure functions the
//! resolver (`resolve.rs`), the branch probe (`probe.rs`), copy-on-write (`cow.rs`) and moves
//! (`movefile.rs`) share. No policy, no system call.

use crate::fs::BranchId;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use fuse_backend_rs::abi::fuse_abi::stat64;

use super::branches::Root;
use super::errno;

/// The copies a policy chose (usually one, kept inline).
pub(crate) type Founds = smallvec::SmallVec<[Found; 1]>;

/// What a lookup found on one branch.
pub(crate) struct Found {
    /// The branch index.
    pub branch: BranchId,
    /// `O_PATH` descriptor of the entry (never followed if it is a symlink); shared with the
    /// node it was found for, which keeps it while the guest holds the node.
    pub fd: Arc<OwnedFd>,
    /// Its host attributes.
    pub st: stat64,
}

/// A directory's `O_PATH` descriptor on one branch: the branch root's own (no system call
/// to have it) or one opened for a directory beneath it.
pub(crate) enum DirFd {
    /// The branch root.
    Root(Arc<Root>),
    /// A directory beneath the root.
    Opened(OwnedFd),
}

impl AsFd for DirFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            DirFd::Root(r) => r.as_fd(),
            DirFd::Opened(fd) => fd.as_fd(),
        }
    }
}

/// `r` as "found or not", keeping real failures as errors.
pub(crate) fn present<T>(r: io::Result<T>) -> io::Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if is_absent(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether an error resolving a path means only "there is no such entry on this branch".
fn is_absent(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::EXDEV | libc::ENAMETOOLONG)
    )
}

/// Rejects names the guest must never send: empty, `.`, `..`, containing `/`, or too long.
pub(crate) fn check_name(name: &CStr) -> io::Result<()> {
    let b = name.to_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') {
        return Err(errno(libc::EINVAL));
    }
    if b.len() > 255 {
        return Err(errno(libc::ENAMETOOLONG));
    }
    Ok(())
}

/// The union path of `name` in directory `dir` (`.` is the root).
pub(crate) fn join(dir: &[u8], name: &[u8]) -> CString {
    // Room for the separator and the NUL `CString::new` adds: no reallocation.
    let mut v = Vec::with_capacity(dir.len() + 2 + name.len());
    if dir != b"." {
        v.extend_from_slice(dir);
        v.push(b'/');
    }
    v.extend_from_slice(name);
    CString::new(v).expect("names never contain NUL")
}

/// Splits `a/b/c` into (`a/b`, `c`); a top-level name has parent `.`.
pub(crate) fn split_parent(rel: &CStr) -> (CString, CString) {
    let b = rel.to_bytes();
    match b.iter().rposition(|&c| c == b'/') {
        Some(i) => (
            CString::new(&b[..i]).expect("no NUL"),
            CString::new(&b[i + 1..]).expect("no NUL"),
        ),
        None => (c".".to_owned(), rel.to_owned()),
    }
}
