//! OPEN, RELEASE, FLUSH and FSYNC for regular files. Only regular files can be opened: the guest
//! never gets a descriptor to a host device node, FIFO or socket (opening a FIFO would also
//! block a worker). Writable opens of a copy on an RO branch get EROFS.

use crate::sys::abi::fuse::FMODE_EXEC;
use std::io;
use std::os::fd::AsFd;

use fuse_backend_rs::abi::fuse_abi::OpenOptions;
use fuse_backend_rs::api::filesystem::Context;
use rustix::fs::OFlags;

use crate::fs::call::Call;
use crate::fs::caller::Groups;
use crate::fs::errno;
use crate::fs::handle::{FileHandle, Handle};
use crate::fs::movefile::copy_to_temp;
use crate::fs::ops::xattr::clear_renamed_capability;
use crate::fs::options::{CacheFiles, Func};
use crate::fs::passthrough;
use crate::fs::resolve::{split_parent, Found};
use crate::sys::{beneath, caps};

/// `open_flags` bit: a truncating open by a guest caller without CAP_FSETID.
const FOPEN_IN_KILL_SUIDGID: u32 = fuse_backend_rs::abi::fuse_abi::FOPEN_IN_KILL_SUIDGID;
use std::ffi::CStr;

/// The subset of guest open flags passed to the host; everything else (O_CREAT, O_PATH,
/// O_DIRECTORY, O_NOCTTY, O_TMPFILE, O_ASYNC…, and O_NOATIME unless `preserve_noatime`) is
/// dropped.
pub fn guest_open_flags(flags: u32, preserve_noatime: bool) -> OFlags {
    let mut keep = libc::O_ACCMODE
        | libc::O_APPEND
        | libc::O_TRUNC
        | libc::O_DIRECT
        | libc::O_DSYNC
        | libc::O_SYNC;
    if preserve_noatime {
        keep |= libc::O_NOATIME;
    }
    OFlags::from_bits_retain(flags & keep as u32)
}

/// The host open flags for a guest open: [`guest_open_flags`], and with the writeback cache
/// negotiated (as virtiofsd) read access added to a write-only open, because the guest's
/// page cache reads through any handle (a partial page is read before it is written), and
/// O_APPEND dropped, because the guest then computes every write's offset itself (a host
/// O_APPEND would move each one to the host's end of file).
pub fn host_open_flags(fs: &Call<'_>, flags: u32) -> OFlags {
    let mut f = guest_open_flags(flags, fs.view().opts.preserve_noatime);
    if fs.writeback_active() {
        if f & OFlags::RWMODE == OFlags::WRONLY {
            f = (f & !OFlags::RWMODE) | OFlags::RDWR;
        }
        f.remove(OFlags::APPEND);
    }
    f
}

fn wants_write(flags: OFlags) -> bool {
    flags.intersects(OFlags::WRONLY | OFlags::RDWR | OFlags::TRUNC)
}

/// The FOPEN flags for an open of `inode` whose host attributes are `st`: page-cache policy
/// from `direct-io` and `cache.files` (`auto-full` keeps the cache while mtime and size are
/// unchanged since the previous open).
pub(crate) fn open_options(fs: &Call<'_>, inode: u64, st: &libc::stat64) -> OpenOptions {
    let o = &fs.view().opts;
    if o.direct_io {
        return OpenOptions::DIRECT_IO;
    }
    match o.cache_files {
        CacheFiles::Libfuse | CacheFiles::Partial => OpenOptions::empty(),
        CacheFiles::Off => OpenOptions::DIRECT_IO,
        CacheFiles::Full => OpenOptions::KEEP_CACHE,
        CacheFiles::AutoFull => {
            let stamp = (st.st_mtime, st.st_mtime_nsec, st.st_size);
            if fs.inodes.swap_stamp(inode, stamp) == Some(stamp) {
                OpenOptions::KEEP_CACHE
            } else {
                OpenOptions::empty()
            }
        }
    }
}

/// Opens `inode` on the branch the search policy finds it on.
pub fn open(
    fs: &Call<'_>,
    ctx: &Context,
    inode: u64,
    flags: u32,
    open_flags: u32,
) -> io::Result<(Option<u64>, OpenOptions, Option<u32>)> {
    let wanted = guest_open_flags(flags, fs.view().opts.preserve_noatime);
    let exec = flags & FMODE_EXEC != 0;
    let flags = host_open_flags(fs, flags);
    // The kernel refuses to open a file a program runs from for writing (ETXTBSY) before it
    // asks, but a read-only open with O_TRUNC it sends first: with FUSE_ATOMIC_O_TRUNC this
    // open is the truncation, which would cut the running program's text under it (and, as
    // it dies of that, let the kernel's own check pass). Refused here, as natively.
    if flags & OFlags::RWMODE == OFlags::RDONLY
        && flags.contains(OFlags::TRUNC)
        && fs.handles.executing(inode)
    {
        return Err(errno(libc::ETXTBSY));
    }
    let mut f = fs.search_node(Func::Open, inode)?;
    match f.st.st_mode & libc::S_IFMT {
        libc::S_IFREG => {}
        libc::S_IFDIR => return Err(errno(libc::EISDIR)),
        libc::S_IFLNK => return Err(errno(libc::ELOOP)),
        _ => return Err(errno(libc::EACCES)),
    }
    if wants_write(flags) && fs.view().branches.is_ro(f.branch) {
        if !fs.view().opts.cow {
            return Err(errno(libc::EROFS));
        }
        // Copy-on-write: the file is copied up and opened there (the node follows it).
        f = fs.copy_up(&fs.inodes.path(inode)?, &f)?;
    }
    if fs.view().opts.link_cow && wants_write(flags) && f.st.st_nlink > 1 {
        break_link(fs, &f, &fs.inodes.path(inode)?)?;
        fs.inodes.unbind(inode);
        f = fs.search_node(Func::Open, inode)?;
    }
    let fd = {
        // KILLPRIV_V2: a truncating open by an unprivileged guest caller clears
        // set-user/group-ID bits, as the host kernel does without CAP_FSETID.
        let _killpriv = (open_flags & FOPEN_IN_KILL_SUIDGID != 0
            && flags.contains(OFlags::TRUNC)
            && fs.view().opts.killpriv_v2
            && caps::mode_has_privs(f.st.st_mode))
        .then(caps::without_fsetid);
        // As the caller: the host checks its permission, and truncates as it would.
        let opened = fs.as_caller(ctx, &[f.fd.as_fd()], &[], Groups::OnRefusal, || {
            beneath::reopen(f.fd.as_fd(), flags)
        });
        match opened {
            // Writeback asked for read access the caller lacks (a write-only file): the
            // handle it asked for, write-only (the guest then reads nothing through it).
            Err(e) if e.raw_os_error() == Some(libc::EACCES) && flags != wanted => {
                let flags = wanted & !OFlags::APPEND;
                fs.as_caller(ctx, &[f.fd.as_fd()], &[], Groups::OnRefusal, || {
                    beneath::reopen(f.fd.as_fd(), flags)
                })?
            }
            other => other?,
        }
    };
    if flags.contains(OFlags::TRUNC) {
        clear_renamed_capability(fs.view(), fd.as_fd())?;
    }
    // A file only static branches hold keeps its page cache (`fs/static_cache.rs`).
    let opts = fs
        .node_standing(f.branch, inode)
        .file_open(open_options(fs, inode, &f.st));
    // Not yet copied up: its first write moves it, so the kernel must not hold this copy.
    let ro_cow = fs.view().opts.cow && fs.view().branches.is_ro(f.branch);
    let fh = fs.new_handle(Handle::File(
        FileHandle::new(fd, inode, f.branch, flags & !OFlags::TRUNC).for_exec(exec),
    ))?;
    let (opts, backing) = pass_through(fs, fh, inode, wanted, ro_cow, opts)?;
    Ok((Some(fh), opts, backing))
}

/// FUSE passthrough for handle `fh` of `inode`, just opened with guest flags `wanted`
/// (`passthrough.io`, host mounts only): the open flags to reply with and the backing id,
/// if the kernel is to read and write the file itself. Its page cache then holds nothing
/// of the file's (no FOPEN_KEEP_CACHE, which the kernel refuses beside passthrough).
pub(crate) fn pass_through(
    fs: &Call<'_>,
    fh: u64,
    inode: u64,
    wanted: OFlags,
    ro_cow: bool,
    opts: OpenOptions,
) -> io::Result<(OpenOptions, Option<u32>)> {
    if fs.passthrough.bits() == 0 {
        return Ok((opts, None));
    }
    let want = passthrough::wanted(&fs.view().opts, wanted.bits() as i32, ro_cow);
    let h = fs.handles.file(fh, inode)?;
    let backing = fs
        .passthrough
        .opened(fh, inode, h.as_file()?.fd.as_fd(), want);
    if backing.is_some() {
        return Ok((opts - OpenOptions::KEEP_CACHE, backing));
    }
    Ok((opts, None))
}

/// `link_cow`: replaces the hard-linked file at `rel` with its own full copy, so a write
/// through this name leaves the other links untouched.
fn break_link(fs: &Call<'_>, f: &Found, rel: &CStr) -> io::Result<()> {
    let (parent, name) = split_parent(rel);
    let dir = fs.dir_on(f.branch, &parent)?;
    let tmp = copy_to_temp(&f.fd, &f.st, &dir, "link_cow")?;
    if let Err(e) = rustix::fs::renameat(&dir, &tmp, &dir, &name) {
        let _ = rustix::fs::unlinkat(&dir, &tmp, rustix::fs::AtFlags::empty());
        return Err(e.into());
    }
    Ok(())
}

/// Closes handle `fh` of `inode`; with `dropcacheonclose` the host page cache of the file is
/// dropped first.
pub fn release(fs: &Call<'_>, inode: u64, fh: u64) -> io::Result<()> {
    // Before the handle's number can be reused.
    fs.passthrough.released(fh);
    if fs.handles.remove_lost(fh, inode) {
        return Ok(());
    }
    fs.handles.file(fh, inode)?;
    let h = fs.handles.remove(fh)?;
    if fs.view().opts.dropcacheonclose {
        let fd = h.as_file()?.fd.as_fd();
        // Advisory: a failure here must not fail the close.
        let _ = rustix::fs::fadvise(fd, 0, None, rustix::fs::Advice::DontNeed);
    }
    Ok(())
}

/// Nothing is buffered in the daemon, so a flush only checks the handle.
pub fn flush(fs: &Call<'_>, inode: u64, fh: u64) -> io::Result<()> {
    fs.handles.file(fh, inode).map(drop)
}

/// fsync/fdatasync of the open file.
pub fn fsync(fs: &Call<'_>, inode: u64, datasync: bool, fh: u64) -> io::Result<()> {
    let h = fs.handles.file(fh, inode)?;
    let fd = h.as_file()?.fd.as_fd();
    if datasync {
        rustix::fs::fdatasync(fd)?;
    } else {
        rustix::fs::fsync(fd)?;
    }
    Ok(())
}
