//! Borrowing a descriptor as a `std::fs::File` for APIs that want `&mut File` (the zero-copy
//! reader/writer traits), without taking ownership or closing it.

use std::fs::File;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd};

/// Runs `f` with a `File` view of `fd`. The descriptor stays owned by its owner and is not closed.
pub fn with_file<R>(fd: BorrowedFd<'_>, f: impl FnOnce(&mut File) -> R) -> R {
    // SAFETY: `fd` is a valid open descriptor for the borrow's lifetime, which outlives this call;
    // ManuallyDrop guarantees the temporary File never closes it.
    let mut file = ManuallyDrop::new(unsafe { File::from_raw_fd(fd.as_raw_fd()) });
    f(&mut file)
}

/// A `FileVolatileSlice` over an ordinary byte buffer, for moving file data through the
/// zero-copy traits without guest memory (tests and tools).
pub fn volatile_slice(buf: &mut [u8]) -> fuse_backend_rs::file_buf::FileVolatileSlice<'_> {
    // SAFETY: `buf` is valid, exclusively borrowed memory for the slice's whole lifetime.
    unsafe { fuse_backend_rs::file_buf::FileVolatileSlice::from_mut_slice(buf) }
}

/// Makes descriptor `dst` refer to `src`'s open file (dup3), atomically for every thread using
/// `dst`; `dst` keeps its number and its owner. Used to move an open file to another branch.
pub fn replace_fd(src: BorrowedFd<'_>, dst: BorrowedFd<'_>) -> std::io::Result<()> {
    // SAFETY: both are valid open descriptors for the duration of the call; dup3 only changes
    // which open file `dst`'s number refers to, and `dst` stays owned by its OwnedFd.
    let r = unsafe { libc::dup3(src.as_raw_fd(), dst.as_raw_fd(), libc::O_CLOEXEC) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// One `copy_file_range(2)` of up to `len` bytes from `fin` at `off_in` to `fout` at
/// `off_out` (the descriptors' own offsets are left alone); the bytes copied.
pub fn copy_range(
    fin: BorrowedFd<'_>,
    off_in: u64,
    fout: BorrowedFd<'_>,
    off_out: u64,
    len: usize,
) -> std::io::Result<usize> {
    let (mut i, mut o) = (off_in, off_out);
    Ok(rustix::fs::copy_file_range(
        fin,
        Some(&mut i),
        fout,
        Some(&mut o),
        len,
    )?)
}

/// `syncfs(2)` on the filesystem holding `fd`.
pub fn syncfs(fd: BorrowedFd<'_>) -> std::io::Result<()> {
    Ok(rustix::fs::syncfs(fd)?)
}

/// `statx(2)` of what `fd` (any descriptor, `O_PATH` included) refers to, asking for the basic
/// fields and the birth time.
pub fn statx_fd(fd: BorrowedFd<'_>) -> std::io::Result<libc::statx> {
    // SAFETY: statx is plain data; all-zero is a valid value for the kernel to overwrite.
    let mut sx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: an empty, NUL-terminated path with AT_EMPTY_PATH names `fd` itself; `sx` is a
    // valid, writable statx.
    let r = unsafe {
        libc::statx(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_BASIC_STATS | libc::STATX_BTIME,
            &mut sx,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(sx)
}

/// The `stat` that fstat(2) gives for the object `sx` describes (statx with at least
/// `STATX_BASIC_STATS`).
pub fn stat_of(sx: &libc::statx) -> libc::stat64 {
    // SAFETY: stat64 is plain data; all-zero is a valid value, every field is set below.
    let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
    st.st_dev = libc::makedev(sx.stx_dev_major, sx.stx_dev_minor);
    st.st_ino = sx.stx_ino;
    st.st_nlink = sx.stx_nlink.into();
    st.st_mode = sx.stx_mode.into();
    st.st_uid = sx.stx_uid;
    st.st_gid = sx.stx_gid;
    st.st_rdev = libc::makedev(sx.stx_rdev_major, sx.stx_rdev_minor);
    st.st_size = sx.stx_size as i64;
    st.st_blksize = sx.stx_blksize.into();
    st.st_blocks = sx.stx_blocks as i64;
    st.st_atime = sx.stx_atime.tv_sec;
    st.st_atime_nsec = sx.stx_atime.tv_nsec.into();
    st.st_mtime = sx.stx_mtime.tv_sec;
    st.st_mtime_nsec = sx.stx_mtime.tv_nsec.into();
    st.st_ctime = sx.stx_ctime.tv_sec;
    st.st_ctime_nsec = sx.stx_ctime.tv_nsec.into();
    st
}

/// The inode flag and fsxattr ioctls the daemon passes through (`linux/fs.h`).
pub mod ioc {
    /// `FS_IOC_GETFLAGS` (`long` argument; the kernel reads and writes an int).
    pub const GETFLAGS: u32 = 0x8008_6601;
    /// `FS_IOC_SETFLAGS`.
    pub const SETFLAGS: u32 = 0x4008_6602;
    /// `FS_IOC32_GETFLAGS`.
    pub const GETFLAGS32: u32 = 0x8004_6601;
    /// `FS_IOC32_SETFLAGS`.
    pub const SETFLAGS32: u32 = 0x4004_6602;
    /// `FS_IOC_FSGETXATTR` (`struct fsxattr`, 28 bytes).
    pub const FSGETXATTR: u32 = 0x801c_581f;
    /// `FS_IOC_FSSETXATTR`.
    pub const FSSETXATTR: u32 = 0x401c_5820;
}

/// Runs one of the [`ioc`] ioctls on `fd` with `arg` as its in/out argument (at least as
/// large as the ioctl's size); any other command is ENOTTY.
pub fn inode_ioctl(fd: BorrowedFd<'_>, cmd: u32, arg: &mut [u8]) -> std::io::Result<()> {
    let need = match cmd {
        ioc::GETFLAGS | ioc::SETFLAGS | ioc::GETFLAGS32 | ioc::SETFLAGS32 => 4,
        ioc::FSGETXATTR | ioc::FSSETXATTR => 28,
        _ => return Err(std::io::Error::from_raw_os_error(libc::ENOTTY)),
    };
    if arg.len() < need {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: `cmd` is one of the ioctls above, whose argument is a pointer to at most `need`
    // bytes, and `arg` is a writable buffer of at least that many.
    let r = unsafe {
        libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            cmd as libc::Ioctl,
            arg.as_mut_ptr(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// statx turned into a stat is what fstat gives, for a file, a directory, a symlink (its
    /// O_PATH descriptor) and a device.
    #[test]
    fn stat_of_statx_is_fstat() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), b"hello").unwrap();
        std::os::unix::fs::symlink("f", d.path().join("l")).unwrap();
        let paths = [
            d.path().join("f"),
            d.path().to_path_buf(),
            d.path().join("l"),
            "/dev/null".into(),
        ];
        for p in paths {
            let fd = rustix::fs::open(
                &p,
                rustix::fs::OFlags::PATH | rustix::fs::OFlags::NOFOLLOW,
                rustix::fs::Mode::empty(),
            )
            .unwrap();
            let st = rustix::fs::fstat(&fd).unwrap();
            let of = stat_of(&statx_fd(fd.as_fd()).unwrap());
            let fields = |s: &libc::stat64| {
                (
                    (
                        s.st_dev, s.st_ino, s.st_nlink, s.st_mode, s.st_uid, s.st_gid, s.st_rdev,
                    ),
                    (s.st_size, s.st_blksize, s.st_blocks),
                    (s.st_atime, s.st_atime_nsec, s.st_mtime, s.st_mtime_nsec),
                    (s.st_ctime, s.st_ctime_nsec),
                )
            };
            assert_eq!(fields(&of), fields(&st), "{}", p.display());
        }
    }
}
