//! Path resolution that cannot escape a branch root: every guest-derived path is opened with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`, so neither `..` nor
//! a host symlink (in any component) is ever followed. Opened `O_PATH` descriptors are turned
//! into real ones only through `/proc/self/fd`, after their file type has been checked.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use rustix::fs::{Mode, OFlags, ResolveFlags};

/// The resolve flags used for every guest-derived path.
pub const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// Opens `rel` (relative, `.` for the root itself) beneath `root` as an `O_PATH` descriptor
/// without following a symlink anywhere, including the last component.
pub fn open_path(root: BorrowedFd<'_>, rel: &CStr) -> io::Result<OwnedFd> {
    open_beneath(root, rel, OFlags::PATH | OFlags::NOFOLLOW, Mode::empty())
}

/// Opens `rel` beneath `root` as an `O_PATH` descriptor with explicit resolve flags; the last
/// component is followed only when `follow_last` is set. With `RESOLVE_IN_ROOT` a symlink is
/// resolved as if `root` were `/`, so it still cannot lead outside.
pub fn open_path_with(
    root: BorrowedFd<'_>,
    rel: &CStr,
    resolve: ResolveFlags,
    follow_last: bool,
) -> io::Result<OwnedFd> {
    let last = match follow_last {
        true => OFlags::empty(),
        false => OFlags::NOFOLLOW,
    };
    open_o_path(root, rel, last, resolve)
}

/// Opens directory `rel` beneath `root` as an `O_PATH` descriptor (ENOTDIR for anything
/// else, a symlink included: its last component is never followed).
pub fn open_dir_path_with(
    root: BorrowedFd<'_>,
    rel: &CStr,
    resolve: ResolveFlags,
) -> io::Result<OwnedFd> {
    open_o_path(root, rel, OFlags::DIRECTORY | OFlags::NOFOLLOW, resolve)
}

/// `openat2` of `rel` beneath `root` with `O_PATH | O_CLOEXEC` and `extra`.
fn open_o_path(
    root: BorrowedFd<'_>,
    rel: &CStr,
    extra: OFlags,
    resolve: ResolveFlags,
) -> io::Result<OwnedFd> {
    let flags = OFlags::PATH | OFlags::CLOEXEC | extra;
    Ok(rustix::fs::openat2(
        root,
        rel,
        flags,
        Mode::empty(),
        resolve,
    )?)
}

/// Resolve flags that follow symlinks but keep every step inside the root.
pub const RESOLVE_IN_ROOT: ResolveFlags = ResolveFlags::IN_ROOT.union(ResolveFlags::NO_MAGICLINKS);

/// Opens `rel` beneath `root` with `flags` (O_NOFOLLOW and O_CLOEXEC are always added) and
/// `mode` for O_CREAT.
pub fn open_beneath(
    root: BorrowedFd<'_>,
    rel: &CStr,
    flags: OFlags,
    mode: Mode,
) -> io::Result<OwnedFd> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::openat2(root, rel, flags, mode, RESOLVE)?)
}

/// Where this process's descriptors are seen as magic links: `/proc/self/fd/`, or `/` once
/// `--sandbox chroot` has made the process's own descriptor directory its root.
static FD_DIR: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// Records that the root directory is now this process's `/proc/PID/fd` (chroot sandbox).
pub fn fd_dir_is_root() {
    let _ = FD_DIR.set("/");
}

/// The `/proc/self/fd/N` name of `fd`, through which path-only syscalls (chmod, xattrs,
/// utimensat) reach exactly the inode `fd` refers to.
pub fn proc_path(fd: BorrowedFd<'_>) -> ProcPath {
    let dir = FD_DIR.get().copied().unwrap_or("/proc/self/fd/");
    let mut p = ProcPath {
        buf: [0; PROC_PATH_ROOM],
        len: 0,
    };
    p.push(dir.as_bytes());
    // The decimal digits of a descriptor number (never negative for a BorrowedFd).
    let mut n = fd.as_raw_fd().unsigned_abs();
    let mut digits = [0u8; 10];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    p.push(&digits[i..]);
    p
}

/// Room for `/proc/self/fd/` and ten digits, NUL-terminated.
const PROC_PATH_ROOM: usize = 32;

/// A descriptor's magic-link name ([`proc_path`]), built on the stack: no allocation on the
/// paths (chmod, utimens, xattrs, re-opens) that use one per request. Passed by reference
/// where rustix takes a path.
pub struct ProcPath {
    buf: [u8; PROC_PATH_ROOM],
    /// Bytes before the NUL.
    len: usize,
}

impl ProcPath {
    fn push(&mut self, bytes: &[u8]) {
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }

    /// The name as a C string.
    pub fn as_c_str(&self) -> &CStr {
        CStr::from_bytes_with_nul(&self.buf[..=self.len]).expect("one NUL, at the end")
    }
}

impl std::fmt::Display for ProcPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.buf[..self.len]))
    }
}

impl rustix::path::Arg for &ProcPath {
    fn as_str(&self) -> rustix::io::Result<&str> {
        std::str::from_utf8(&self.buf[..self.len]).map_err(|_| rustix::io::Errno::INVAL)
    }

    fn to_string_lossy(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.buf[..self.len])
    }

    fn as_cow_c_str(&self) -> rustix::io::Result<std::borrow::Cow<'_, CStr>> {
        Ok(std::borrow::Cow::Borrowed(self.as_c_str()))
    }

    fn into_c_str<'b>(self) -> rustix::io::Result<std::borrow::Cow<'b, CStr>>
    where
        Self: 'b,
    {
        Ok(std::borrow::Cow::Borrowed(self.as_c_str()))
    }

    fn into_with_c_str<T, F>(self, f: F) -> rustix::io::Result<T>
    where
        Self: Sized,
        F: FnOnce(&CStr) -> rustix::io::Result<T>,
    {
        f(self.as_c_str())
    }
}

/// Re-opens an `O_PATH` descriptor with real access `flags`. The caller must have checked the
/// file type (never a device or FIFO) on `fd` first: the magic link reaches that same inode.
pub fn reopen(fd: BorrowedFd<'_>, flags: OFlags) -> io::Result<OwnedFd> {
    let flags = (flags | OFlags::CLOEXEC) & !(OFlags::NOFOLLOW | OFlags::CREATE | OFlags::EXCL);
    Ok(rustix::fs::open(&proc_path(fd), flags, Mode::empty())?)
}

/// An unnamed regular file (`O_TMPFILE`) in directory `dir`, opened with `flags`.
pub fn open_tmpfile(dir: BorrowedFd<'_>, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
    let flags = flags | OFlags::TMPFILE | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(dir, c".", flags, mode)?)
}

/// An `O_PATH` descriptor of what open descriptor `fd` refers to (for a node to keep).
pub fn reopen_path(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        &proc_path(fd),
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// `fstat` on any descriptor, `O_PATH` included.
pub fn stat_fd(fd: BorrowedFd<'_>) -> io::Result<libc::stat64> {
    Ok(rustix::fs::fstat(fd)?)
}

/// Whether `fd` (a directory) is the root of a mount (statx's STATX_ATTR_MOUNT_ROOT): a
/// mount point inside a branch, or a bind mount.
pub fn is_mount_root(fd: BorrowedFd<'_>) -> io::Result<bool> {
    use rustix::fs::{AtFlags, StatxAttributes, StatxFlags};
    let stx = rustix::fs::statx(fd, c"", AtFlags::EMPTY_PATH, StatxFlags::TYPE)?;
    let attrs = stx.stx_attributes;
    let known = stx.stx_attributes_mask;
    Ok(known.contains(StatxAttributes::MOUNT_ROOT) && attrs.contains(StatxAttributes::MOUNT_ROOT))
}

/// `fstatat` of `name` in directory `dir`, never following a symlink.
pub fn stat_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<libc::stat64> {
    Ok(rustix::fs::statat(
        dir,
        name,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )?)
}

/// One directory entry as read from a host directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostDirent {
    /// The entry name (never `.` or `..`).
    pub name: Vec<u8>,
    /// The host inode number.
    pub ino: u64,
    /// The `DT_*` type.
    pub dtype: u32,
}

/// Lists a directory given an `O_PATH` descriptor to it, skipping `.` and `..`.
pub fn list_dir(dir: BorrowedFd<'_>) -> io::Result<Vec<HostDirent>> {
    let mut out = Vec::new();
    for_each_dirent(dir, |name, ino, dtype| {
        out.push(HostDirent {
            name: name.to_vec(),
            ino,
            dtype,
        });
        Ok(())
    })?;
    Ok(out)
}

/// Calls `f` with the name, host inode number and `DT_*` type of each entry of the directory
/// that `dir` (an `O_PATH` descriptor) leads to, skipping `.` and `..`; stops at `f`'s first
/// error. The names are borrowed from one getdents64 buffer: nothing is allocated per entry.
pub fn for_each_dirent(
    dir: BorrowedFd<'_>,
    mut f: impl FnMut(&[u8], u64, u32) -> io::Result<()>,
) -> io::Result<()> {
    // "." beneath an O_PATH directory descriptor is that directory: no procfs walk needed.
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, c".", flags, Mode::empty())?;
    let mut buf = vec![std::mem::MaybeUninit::<u8>::uninit(); 32 * 1024];
    let mut entries = rustix::fs::RawDir::new(fd.as_fd(), &mut buf);
    while let Some(ent) = entries.next() {
        let ent = ent?;
        let name = ent.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        f(name, ent.ino(), dtype_of(ent.file_type()))?;
    }
    Ok(())
}

fn dtype_of(t: rustix::fs::FileType) -> u32 {
    use rustix::fs::FileType as T;
    u32::from(match t {
        T::RegularFile => libc::DT_REG,
        T::Directory => libc::DT_DIR,
        T::Symlink => libc::DT_LNK,
        T::Fifo => libc::DT_FIFO,
        T::Socket => libc::DT_SOCK,
        T::CharacterDevice => libc::DT_CHR,
        T::BlockDevice => libc::DT_BLK,
        _ => libc::DT_UNKNOWN,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn refuses_to_climb_or_follow_symlinks() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/f"), b"x").unwrap();
        symlink("/etc", d.path().join("esc")).unwrap();
        symlink("sub", d.path().join("inner")).unwrap();
        let root =
            rustix::fs::open(d.path(), OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        assert!(open_path(root.as_fd(), c"sub/f").is_ok());
        for bad in [
            c"../x",
            c"sub/../../x",
            c"/etc/passwd",
            c"esc/passwd",
            c"inner/f",
        ] {
            let e = open_path(root.as_fd(), bad).unwrap_err();
            assert!(
                matches!(e.raw_os_error(), Some(libc::EXDEV | libc::ELOOP)),
                "{bad:?}: {e}"
            );
        }
        // The symlink itself can be opened as O_PATH (to readlink it), never followed.
        let l = open_path(root.as_fd(), c"esc").unwrap();
        assert_eq!(
            stat_fd(l.as_fd()).unwrap().st_mode & libc::S_IFMT,
            libc::S_IFLNK
        );
        let names: Vec<_> = list_dir(root.as_fd())
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names.len(), 3);
    }
}

#[cfg(test)]
mod proc_path_tests {
    use super::*;
    use std::os::fd::AsFd;

    /// The stack-built name is the formatted one, and reaches the descriptor's file.
    #[test]
    fn proc_path_names_the_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(dir.path().join("f")).unwrap();
        // Enough descriptors to get past one digit.
        let many: Vec<_> = (0..12).map(|_| file.try_clone().unwrap()).collect();
        for f in many.iter().chain([&file]) {
            let p = proc_path(f.as_fd());
            assert_eq!(
                p.to_string(),
                format!("/proc/self/fd/{}", f.as_fd().as_raw_fd())
            );
            let via = rustix::fs::stat(&p).unwrap();
            let direct = rustix::fs::fstat(f).unwrap();
            assert_eq!((via.st_dev, via.st_ino), (direct.st_dev, direct.st_ino));
        }
    }
}
