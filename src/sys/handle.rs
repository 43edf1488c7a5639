//! File handles (`name_to_handle_at`, `open_by_handle_at`): a filesystem's own name for an
//! inode, which the daemon can keep instead of a descriptor and reopen later. Making one needs
//! no privilege; opening one needs CAP_DAC_READ_SEARCH in the initial user namespace. A handle
//! is only meaningful on the filesystem that made it, so it comes with its mount id.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use rustix::fs::OFlags;

/// The largest handle any filesystem makes (`MAX_HANDLE_SZ`).
const MAX_HANDLE_SZ: usize = 128;

/// `struct file_handle` with room for the largest handle.
#[repr(C)]
struct RawHandle {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; MAX_HANDLE_SZ],
}

/// A file handle, as compact as the filesystem made it (8 to 40 bytes on common ones).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileHandle {
    kind: i32,
    bytes: Box<[u8]>,
}

impl FileHandle {
    /// Its size in bytes (for memory accounting).
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether it is empty (never, for a handle a filesystem made).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Its `handle_type`.
    pub fn kind(&self) -> i32 {
        self.kind
    }

    /// Its `f_handle` bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// A handle from its parts (as a session image carries them); None when no filesystem
    /// could have made it (empty, or longer than `MAX_HANDLE_SZ`).
    pub fn from_parts(kind: i32, bytes: &[u8]) -> Option<Self> {
        (!bytes.is_empty() && bytes.len() <= MAX_HANDLE_SZ).then(|| FileHandle {
            kind,
            bytes: bytes.into(),
        })
    }
}

/// The handle of the object `fd` refers to (any descriptor, `O_PATH` included) and the id of
/// the mount it is on. EOPNOTSUPP where the filesystem makes none.
pub fn name_to_handle(fd: BorrowedFd<'_>) -> io::Result<(FileHandle, i32)> {
    let mut raw = RawHandle {
        handle_bytes: MAX_HANDLE_SZ as u32,
        handle_type: 0,
        f_handle: [0; MAX_HANDLE_SZ],
    };
    let mut mount_id: libc::c_int = 0;
    // SAFETY: `raw` is a file_handle with `handle_bytes` bytes of room after its header, and
    // `mount_id` a live int; the empty path with AT_EMPTY_PATH names `fd` itself.
    let r = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            fd.as_raw_fd(),
            c"".as_ptr(),
            &mut raw as *mut RawHandle,
            &mut mount_id as *mut libc::c_int,
            libc::AT_EMPTY_PATH,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = (raw.handle_bytes as usize).min(MAX_HANDLE_SZ);
    Ok((
        FileHandle {
            kind: raw.handle_type,
            bytes: raw.f_handle[..n].into(),
        },
        mount_id,
    ))
}

/// Opens the object `h` names on the filesystem of `mount_fd` with `flags` (`O_PATH` for a
/// node). ESTALE when the object is gone; EPERM without CAP_DAC_READ_SEARCH.
pub fn open_by_handle(
    mount_fd: BorrowedFd<'_>,
    h: &FileHandle,
    flags: OFlags,
) -> io::Result<OwnedFd> {
    let mut raw = RawHandle {
        handle_bytes: h.bytes.len() as u32,
        handle_type: h.kind,
        f_handle: [0; MAX_HANDLE_SZ],
    };
    raw.f_handle[..h.bytes.len()].copy_from_slice(&h.bytes);
    let flags = (flags | OFlags::CLOEXEC).bits() as libc::c_int;
    // SAFETY: `raw` is a valid file_handle whose `handle_bytes` bytes follow its header.
    let r = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            mount_fd.as_raw_fd(),
            &mut raw as *mut RawHandle,
            flags,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(r as libc::c_int) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_handle_reopens_its_file_and_goes_stale_with_it() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, b"x").unwrap();
        let root = std::fs::File::open(d.path()).unwrap();
        let f = std::fs::File::open(&p).unwrap();
        let (h, mnt) = match name_to_handle(f.as_fd()) {
            Ok(v) => v,
            // A filesystem without handles (the test's temporary directory may be one).
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => return,
            Err(e) => panic!("{e}"),
        };
        assert!(!h.is_empty());
        let (_, root_mnt) = name_to_handle(root.as_fd()).unwrap();
        assert_eq!(mnt, root_mnt);
        let reopened = open_by_handle(root.as_fd(), &h, OFlags::PATH).unwrap();
        let (a, b) = (
            rustix::fs::fstat(&reopened).unwrap(),
            rustix::fs::fstat(&f).unwrap(),
        );
        assert_eq!((a.st_dev, a.st_ino), (b.st_dev, b.st_ino));
        drop(f);
        drop(reopened);
        std::fs::remove_file(&p).unwrap();
        match open_by_handle(root.as_fd(), &h, OFlags::PATH) {
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "{e}"),
            // Another test's fork may still hold its copy of `f`'s descriptor (until its
            // exec closes it), keeping the inode alive: the handle then opens that very
            // file, unlinked, and never another one.
            Ok(fd) => {
                let st = rustix::fs::fstat(&fd).unwrap();
                assert_eq!((st.st_dev, st.st_ino, st.st_nlink), (b.st_dev, b.st_ino, 0));
            }
        }
    }
}
