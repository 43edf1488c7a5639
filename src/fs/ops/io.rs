//! READ, WRITE, FALLOCATE and LSEEK on open files. Data moves between the host file and guest
//! memory directly (preadv/pwritev into the descriptor chain's buffers): no bounce buffer.

use std::io;
use std::os::fd::AsFd;

use fuse_backend_rs::api::filesystem::{Context, ZeroCopyReader, ZeroCopyWriter};
use rustix::fs::{FallocateFlags, SeekFrom};

use crate::fs::call::Call;
use crate::fs::errno;
use crate::fs::movefile::is_out_of_space;
use crate::fs::ops::xattr::clear_renamed_capability_through;
use crate::sys::file::with_file;
use crate::sys::{beneath, caps, creds};

/// `write_flags` bit: the guest writer lacks CAP_FSETID (FUSE_WRITE_KILL_SUIDGID).
const WRITE_KILL_PRIV: u32 = fuse_backend_rs::abi::fuse_abi::WRITE_KILL_PRIV;

/// Reads up to `size` bytes at `offset` straight into the reply; short only at end of file (or
/// if the guest's reply buffer is smaller).
pub fn read(
    fs: &Call<'_>,
    inode: u64,
    fh: u64,
    w: &mut dyn ZeroCopyWriter,
    size: u32,
    offset: u64,
) -> io::Result<usize> {
    let h = fs.handles.file(fh, inode)?;
    let fd = h.as_file()?.fd.as_fd();
    let size = size as usize;
    if fs.view().opts.nullrw {
        // The transport's top speed: the reply claims the bytes without filling them.
        return Ok(size.min(w.available_bytes()));
    }
    let mut done = 0usize;
    while done < size {
        // Never ask for more than the reply buffer holds: the transport refuses that outright.
        let want = (size - done).min(w.available_bytes());
        if want == 0 {
            break;
        }
        let n = with_file(fd, |f| w.write_from(f, want, offset + done as u64))?;
        if n == 0 {
            break;
        }
        done += n;
    }
    Ok(done)
}

/// Writes the request's `size` bytes at `offset` straight from guest memory.
#[allow(clippy::too_many_arguments)]
pub fn write(
    fs: &Call<'_>,
    ctx: &Context,
    inode: u64,
    fh: u64,
    r: &mut dyn ZeroCopyReader,
    size: u32,
    offset: u64,
    write_flags: u32,
) -> io::Result<usize> {
    let h = fs.handles.file(fh, inode)?;
    let fd = h.as_file()?.fd.as_fd();
    let size = size as usize;
    let view = fs.view();
    if view.opts.nullrw {
        return Ok(size);
    }
    // An unprivileged writer clears set-user/group-ID bits, as the host kernel does for a
    // writer without CAP_FSETID: one the guest names (KILLPRIV_V2), or a caller that is not
    // root on the host (a guest root squashed by the id map). Checked first: one fstat, no
    // capset for the usual file without those bits, nothing at all for a root caller.
    let unprivileged = (write_flags & WRITE_KILL_PRIV != 0 && view.opts.killpriv_v2)
        || (ctx.uid != 0 && creds::acts_as_caller());
    let _killpriv = (unprivileged
        && beneath::stat_fd(fd).is_ok_and(|st| caps::mode_has_privs(st.st_mode)))
    .then(caps::without_fsetid);
    clear_renamed_capability_through(view, h.as_file()?)?;
    let mut done = 0usize;
    let mut moved = false;
    while done < size {
        let n = match with_file(fd, |f| r.read_to(f, size - done, offset + done as u64)) {
            // A failed read_to consumed nothing, so the rest can be retried on the new branch.
            Err(e) if is_out_of_space(&e) && !moved && view.opts.moveonenospc.is_some() => {
                fs.move_on_enospc(h.as_file()?).map_err(|m| {
                    log::warn!("moveonenospc failed: {m}");
                    e
                })?;
                moved = true;
                continue;
            }
            r => r?,
        };
        if n == 0 {
            break;
        }
        done += n;
    }
    Ok(done)
}

/// fallocate(2) on the open file.
pub fn fallocate(
    fs: &Call<'_>,
    inode: u64,
    fh: u64,
    mode: u32,
    offset: u64,
    len: u64,
) -> io::Result<()> {
    let h = fs.handles.file(fh, inode)?;
    let flags = FallocateFlags::from_bits(mode).ok_or_else(|| errno(libc::EOPNOTSUPP))?;
    clear_renamed_capability_through(fs.view(), h.as_file()?)?;
    Ok(rustix::fs::fallocate(
        h.as_file()?.fd.as_fd(),
        flags,
        offset,
        len,
    )?)
}

/// lseek(2), as the guest uses it for SEEK_DATA and SEEK_HOLE.
pub fn lseek(fs: &Call<'_>, inode: u64, fh: u64, offset: u64, whence: u32) -> io::Result<u64> {
    let h = fs.handles.file(fh, inode)?;
    let pos = match whence as i32 {
        libc::SEEK_SET => SeekFrom::Start(offset),
        libc::SEEK_CUR => SeekFrom::Current(offset as i64),
        libc::SEEK_END => SeekFrom::End(offset as i64),
        libc::SEEK_DATA => SeekFrom::Data(offset),
        libc::SEEK_HOLE => SeekFrom::Hole(offset),
        _ => return Err(errno(libc::EINVAL)),
    };
    Ok(rustix::fs::seek(h.as_file()?.fd.as_fd(), pos)?)
}
