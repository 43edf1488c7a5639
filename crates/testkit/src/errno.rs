//! Errnos as the tests compare them: taken from `io::Error`s (every error the daemon's code
//! and the host's calls return carries one) and named as mergerfs's docs name them.

use std::io;

/// The errno of a result that must have failed; panics on `Ok` or an error without one.
pub fn errno_of<T>(r: io::Result<T>) -> i32 {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => errno(&e),
    }
}

/// `r` with its error replaced by the errno, for comparing outcomes (`Ok` or which errno).
pub fn result<T>(r: io::Result<T>) -> Result<T, i32> {
    r.map_err(|e| errno(&e))
}

/// The errno of `e`; panics if it has none (a test's own error, not the system's).
pub fn errno(e: &io::Error) -> i32 {
    e.raw_os_error()
        .unwrap_or_else(|| panic!("error without an errno: {e}"))
}

/// The errno the last failed libc call of this thread left.
pub fn last() -> i32 {
    errno(&io::Error::last_os_error())
}

/// The symbolic name of an errno (`ENOENT`), so traces read as mergerfs's docs do; `errno N`
/// for one not listed.
pub fn name(e: i32) -> String {
    let known = [
        (libc::ENOENT, "ENOENT"),
        (libc::EROFS, "EROFS"),
        (libc::ENOSPC, "ENOSPC"),
        (libc::EXDEV, "EXDEV"),
        (libc::EEXIST, "EEXIST"),
        (libc::ENOTEMPTY, "ENOTEMPTY"),
        (libc::ENOTDIR, "ENOTDIR"),
        (libc::EISDIR, "EISDIR"),
        (libc::EACCES, "EACCES"),
        (libc::EPERM, "EPERM"),
        (libc::EINVAL, "EINVAL"),
        (libc::EIO, "EIO"),
        (libc::ENODATA, "ENODATA"),
        (libc::ENOTSUP, "ENOTSUP"),
        (libc::EBUSY, "EBUSY"),
        (libc::ECONNABORTED, "ECONNABORTED"),
        (libc::ENOTCONN, "ENOTCONN"),
    ];
    known
        .iter()
        .find(|(n, _)| *n == e)
        .map(|(_, s)| s.to_string())
        .unwrap_or_else(|| format!("errno {e}"))
}
