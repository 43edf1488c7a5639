//! IOCTL, restricted to what `chattr`/`lsattr` and `xfs_io` need: the inode flags
//! (`FS_IOC_[GS]ETFLAGS`) and `struct fsxattr` (`FS_IOC_FS[GS]ETXATTR`) of an open regular
//! file, passed to the host file. Anything else is ENOTTY, as from a filesystem that has no
//! such ioctl. Setting immutable or append-only needs CAP_LINUX_IMMUTABLE, which the daemon
//! does not keep by default (`--modcaps=+linux_immutable`).

use std::io;
use std::os::fd::AsFd;

use crate::fs::call::Call;
use crate::sys::file::{inode_ioctl, ioc};

/// Runs `cmd` on open file `fh` of `inode` with `input`; the `out_size` bytes to return.
pub fn ioctl(
    fs: &Call<'_>,
    inode: u64,
    fh: u64,
    cmd: u32,
    input: &[u8],
    out_size: u32,
) -> io::Result<Vec<u8>> {
    let h = fs
        .handles
        .file(fh, inode)
        .map_err(|_| io::Error::from_raw_os_error(libc::ENOTTY))?;
    let fd = h.as_file()?.fd.as_fd();
    let mut arg = [0u8; 32];
    let n = input.len().min(arg.len());
    arg[..n].copy_from_slice(&input[..n]);
    match cmd {
        ioc::GETFLAGS | ioc::GETFLAGS32 | ioc::FSGETXATTR => {
            inode_ioctl(fd, cmd, &mut arg)?;
        }
        ioc::SETFLAGS | ioc::SETFLAGS32 | ioc::FSSETXATTR => {
            let branch = h.as_file()?.branch();
            if fs.view().branches.is_ro(branch) {
                return Err(io::Error::from_raw_os_error(libc::EROFS));
            }
            inode_ioctl(fd, cmd, &mut arg)?;
        }
        _ => return Err(io::Error::from_raw_os_error(libc::ENOTTY)),
    }
    Ok(arg[..(out_size as usize).min(arg.len())].to_vec())
}
