//! The kernel's FUSE device and FUSE mounts: opening /dev/fuse, cloning a session's device
//! descriptor for another reader thread, mounting and unmounting, the socket pair through
//! which fusermount3 hands over the descriptor of a mount it made, registering branch files
//! for FUSE passthrough. Safe wrappers only; nothing here reads a request or knows the union.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;

pub use rustix::mount::MountFlags;
use rustix::mount::UnmountFlags;

/// The FUSE device.
pub const DEVICE: &str = "/dev/fuse";

/// `FUSE_DEV_IOC_CLONE`, `_IOR(229, 0, uint32_t)`: attaches a fresh open of /dev/fuse to the
/// session of the descriptor whose number it is given.
const FUSE_DEV_IOC_CLONE: libc::c_ulong = (2 << 30) | (4 << 16) | (229 << 8);

/// `struct fuse_backing_map` (<linux/fuse.h>, 7.40): a branch file to register for FUSE
/// passthrough.
#[repr(C)]
struct BackingMap {
    fd: i32,
    flags: u32,
    padding: u64,
}

/// `FUSE_DEV_IOC_BACKING_OPEN`, `_IOW(229, 1, struct fuse_backing_map)`.
const FUSE_DEV_IOC_BACKING_OPEN: libc::c_ulong =
    (1 << 30) | ((std::mem::size_of::<BackingMap>() as libc::c_ulong) << 16) | (229 << 8) | 1;

/// `FUSE_DEV_IOC_BACKING_CLOSE`, `_IOW(229, 2, uint32_t)`.
const FUSE_DEV_IOC_BACKING_CLOSE: libc::c_ulong = (1 << 30) | (4 << 16) | (229 << 8) | 2;

/// Registers `file` (an open regular file, not O_PATH) with the FUSE connection of `device`
/// for passthrough, returning its backing id. The kernel keeps its own reference to the file
/// (and the daemon's credentials, which its reads and writes then use) until the id is
/// closed and no open file uses it. Needs CAP_SYS_ADMIN (EPERM) and a connection that
/// negotiated FUSE_PASSTHROUGH; a file on a stacked filesystem deeper than the connection's
/// `max_stack_depth` gets ELOOP.
pub fn backing_open(device: BorrowedFd<'_>, file: BorrowedFd<'_>) -> io::Result<u32> {
    let map = BackingMap {
        fd: file.as_raw_fd(),
        flags: 0,
        padding: 0,
    };
    // SAFETY: the ioctl reads one fuse_backing_map through the pointer, valid for that read;
    // the kernel checks the descriptor in it.
    let r = unsafe {
        libc::ioctl(
            device.as_raw_fd(),
            FUSE_DEV_IOC_BACKING_OPEN,
            &map as *const BackingMap,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as u32)
}

/// Closes backing id `id` of `device`'s connection (open files keep using the file).
pub fn backing_close(device: BorrowedFd<'_>, id: u32) -> io::Result<()> {
    // SAFETY: the ioctl reads one u32 through the pointer, valid for that read.
    let r = unsafe {
        libc::ioctl(
            device.as_raw_fd(),
            FUSE_DEV_IOC_BACKING_CLOSE,
            &id as *const u32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Opens the FUSE device for reading and writing (close-on-exec).
pub fn open_device() -> io::Result<OwnedFd> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(DEVICE)?;
    Ok(f.into())
}

/// A new descriptor of `session`'s FUSE connection: requests are read from either, and a
/// reply goes back through the descriptor its request was read from.
pub fn clone_device(session: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let fd = open_device()?;
    let mut which: u32 = session.as_raw_fd() as u32;
    // SAFETY: the ioctl reads one u32 through the pointer, which is valid for that read;
    // the kernel checks both descriptors.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), FUSE_DEV_IOC_CLONE, &mut which as *mut u32) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Mounts a FUSE filesystem of type `fuse.<subtype>` served through `device` on
/// `mountpoint`, with mount `flags` and the kernel's FUSE `options` (`rootmode=…,user_id=…`;
/// `fd=` is added here) and `fsname` as its source (what mount(8) and /proc/mounts show).
pub fn mount(
    device: BorrowedFd<'_>,
    mountpoint: &Path,
    fsname: &str,
    subtype: &str,
    flags: MountFlags,
    options: &str,
) -> io::Result<()> {
    let data = format!("fd={},{options}", device.as_fd().as_raw_fd());
    let data =
        std::ffi::CString::new(data).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let fstype = format!("fuse.{subtype}");
    rustix::mount::mount(fsname, mountpoint, fstype.as_str(), flags, data.as_c_str())
        .map_err(io::Error::from)
}

/// Unmounts `mountpoint`; `lazy` detaches it now and lets it go once no file is open on it.
pub fn unmount(mountpoint: &Path, lazy: bool) -> io::Result<()> {
    let flags = if lazy {
        UnmountFlags::DETACH
    } else {
        UnmountFlags::empty()
    };
    rustix::mount::unmount(mountpoint, flags).map_err(io::Error::from)
}

/// Whether this process may mount(2) a FUSE filesystem itself: CAP_SYS_ADMIN in its effective
/// set (root, or a user namespace's root in a mount namespace it owns). Otherwise fusermount3
/// mounts for it.
pub fn may_mount() -> bool {
    caps::has_cap(
        None,
        caps::CapSet::Effective,
        caps::Capability::CAP_SYS_ADMIN,
    )
    .unwrap_or(false)
}

/// A connected pair of unix stream sockets for fusermount3 (libfuse's `_FUSE_COMMFD`): this
/// process's end (close-on-exec) and the end a child inherits (not close-on-exec: spawn the
/// child before another thread can start a program, and close it here once it has).
pub fn comm_pair() -> io::Result<(UnixStream, OwnedFd)> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let (ours, theirs) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::io::fcntl_setfd(&theirs, rustix::io::FdFlags::empty())?;
    Ok((UnixStream::from(ours), theirs))
}

/// The descriptor fusermount3 sent on `sock` (one byte carrying it, SCM_RIGHTS, as libfuse's
/// `receive_fd`), or `None` when it closed its end without sending one.
pub fn receive_device(sock: &UnixStream) -> io::Result<Option<OwnedFd>> {
    let mut byte = [0u8; 1];
    let fds = crate::sys::uds::recv_exact_with_fds(sock, &mut byte)?;
    Ok(fds.and_then(|v| v.into_iter().next()))
}

/// Points standard input, output and error at `null` (/dev/null opened before: a daemon gone
/// to the background lets go of the terminal or pipe of whoever started it). dup3, not dup2:
/// the seccomp filter allows only dup3.
pub fn detach_stdio(null: &OwnedFd) -> io::Result<()> {
    for target in 0..3 {
        // SAFETY: dup3 takes two descriptor numbers and flags and touches no memory; `null` is
        // open for the call, and replacing descriptors 0-2 closes nothing this process owns
        // through an OwnedFd (std's handles to them borrow the numbers).
        let r = unsafe { libc::dup3(null.as_raw_fd(), target, 0) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The kernel's ceiling on `max_pages` for FUSE mounts (`fs.fuse.max_pages_limit`, Linux 6.13;
/// 256 before it was a setting).
pub fn max_pages_limit() -> u32 {
    std::fs::read_to_string("/proc/sys/fs/fuse/max_pages_limit")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(256)
}

/// Reads one request from `fd` into `buf`, returning its length.
pub fn read_request(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    rustix::io::read(fd, buf).map_err(io::Error::from)
}

/// Writes one whole reply to `fd` (the device takes a reply in one write or not at all).
pub fn write_reply(fd: BorrowedFd<'_>, reply: &[u8]) -> io::Result<usize> {
    rustix::io::write(fd, reply).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_descriptor_sent_on_the_comm_pair_arrives() {
        use std::io::{Read, Write};
        use std::os::fd::AsFd;
        let (ours, theirs) = super::comm_pair().unwrap();
        let flags = rustix::io::fcntl_getfd(&theirs).unwrap();
        assert!(!flags.contains(rustix::io::FdFlags::CLOEXEC));
        let theirs = std::os::unix::net::UnixStream::from(theirs);
        let (mut r, mut w) = std::io::pipe().unwrap();
        crate::sys::uds::send_with_fds(&theirs, &[0], &[w.as_fd()]).unwrap();
        let got = super::receive_device(&ours).unwrap().expect("a descriptor");
        std::fs::File::from(got).write_all(b"x").unwrap();
        drop(w.flush());
        drop(w);
        let mut b = [0u8; 1];
        r.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"x");
        drop(theirs);
        assert!(super::receive_device(&ours).unwrap().is_none());
    }

    #[test]
    fn the_clone_ioctl_is_ior_229_0_u32() {
        // _IOR(229, 0, uint32_t) as <linux/fuse.h> spells it, for the host's ioctl encoding.
        assert_eq!(super::FUSE_DEV_IOC_CLONE, 0x8004_e500);
    }

    #[test]
    fn the_backing_ioctls_are_iow_229_1_and_2() {
        // _IOW(229, 1, struct fuse_backing_map) and _IOW(229, 2, uint32_t).
        assert_eq!(super::FUSE_DEV_IOC_BACKING_OPEN, 0x4010_e501);
        assert_eq!(super::FUSE_DEV_IOC_BACKING_CLOSE, 0x4004_e502);
    }
}
