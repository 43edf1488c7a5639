//! COPY_FILE_RANGE: a server-side copy between two open files, which may sit on different
//! branches (and so different filesystems). `copy_file_range(2)` first (the host kernel
//! reflinks or copies in place where the filesystem can); where it cannot cross the two
//! filesystems, a bounded read/write loop in the daemon.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use crate::fs::call::Call;
use crate::fs::errno;
use crate::fs::ops::xattr::clear_renamed_capability_through;
use crate::sys::beneath;
use crate::sys::caps;

/// The most one request copies (the guest asks again for the rest, as for a short write).
const MAX_COPY: u64 = 1 << 30;
/// The daemon's buffer for the fallback loop.
const CHUNK: usize = 1 << 20;

/// Copies up to `len` bytes from `fh_in` at `off_in` to `fh_out` at `off_out`; the bytes
/// copied.
#[allow(clippy::too_many_arguments)]
pub fn copy_file_range(
    fs: &Call<'_>,
    inode_in: u64,
    fh_in: u64,
    off_in: u64,
    inode_out: u64,
    fh_out: u64,
    off_out: u64,
    len: u64,
    flags: u64,
) -> io::Result<usize> {
    if flags != 0 {
        return Err(errno(libc::EINVAL));
    }
    let (hin, hout) = (
        fs.handles.file(fh_in, inode_in)?,
        fs.handles.file(fh_out, inode_out)?,
    );
    let (fin, fout) = (hin.as_file()?.fd.as_fd(), hout.as_file()?.fd.as_fd());
    if i64::try_from(off_in).is_err() || i64::try_from(off_out).is_err() {
        return Err(errno(libc::EINVAL));
    }
    let (sin, sout) = (beneath::stat_fd(fin)?, beneath::stat_fd(fout)?);
    let len = len.min(MAX_COPY);
    // Overlapping ranges of one file: EINVAL, as the kernel answers (and the guest's own
    // kernel checks before it asks). Copying forward would otherwise read its own output.
    if (sin.st_dev, sin.st_ino) == (sout.st_dev, sout.st_ino)
        && off_in < off_out.saturating_add(len)
        && off_out < off_in.saturating_add(len)
    {
        return Err(errno(libc::EINVAL));
    }
    // Nothing past the source's end as it is now, whatever a concurrent writer appends.
    let len = len.min(
        u64::try_from(sin.st_size)
            .unwrap_or(0)
            .saturating_sub(off_in),
    ) as usize;
    if len == 0 {
        return Ok(0);
    }
    // As for WRITE with KILLPRIV_V2: a copy into a file with set-user/group-ID bits clears
    // them, as the host kernel does for a writer without CAP_FSETID.
    let view = fs.view();
    let _killpriv =
        (view.opts.killpriv_v2 && caps::mode_has_privs(sout.st_mode)).then(caps::without_fsetid);
    clear_renamed_capability_through(view, hout.as_file()?)?;
    match crate::sys::file::copy_range(fin, off_in, fout, off_out, len) {
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EXDEV | libc::EINVAL | libc::EOPNOTSUPP | libc::ENOSYS)
            ) =>
        {
            copy_by_hand(fin, off_in, fout, off_out, len)
        }
        r => r,
    }
}

/// The fallback: pread/pwrite through a bounded buffer.
fn copy_by_hand(
    fin: BorrowedFd<'_>,
    off_in: u64,
    fout: BorrowedFd<'_>,
    off_out: u64,
    len: usize,
) -> io::Result<usize> {
    let mut buf = vec![0u8; CHUNK.min(len)];
    let mut done = 0usize;
    while done < len {
        let want = (len - done).min(buf.len());
        let n = rustix::io::pread(fin, &mut buf[..want], off_in + done as u64)?;
        if n == 0 {
            break;
        }
        let mut w = 0;
        while w < n {
            let m = rustix::io::pwrite(fout, &buf[w..n], off_out + (done + w) as u64)?;
            if m == 0 {
                return Err(errno(libc::EIO));
            }
            w += m;
        }
        done += n;
    }
    Ok(done)
}
