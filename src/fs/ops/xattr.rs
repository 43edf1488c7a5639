//! SETXATTR, GETXATTR, LISTXATTR and REMOVEXATTR, passed through to the host inode via its
//! `/proc/self/fd` name. Reads use the search policy, changes the action policy. Symlinks carry
//! no user xattrs on Linux and are answered ENOTSUP. With `--no-xattr` every call is ENOSYS so
//! the guest stops asking.

use std::ffi::CStr;
use std::io;
use std::os::fd::AsFd;

use fuse_backend_rs::api::filesystem::{GetxattrReply, ListxattrReply};
use rustix::fs::XattrFlags;

use crate::fs::resolve::Found;
use crate::fs::{errno, UnionFs};
use crate::sys::beneath;
use crate::union::ErrnoFold;

fn enabled(fs: &UnionFs) -> io::Result<()> {
    if fs.cfg.xattr {
        Ok(())
    } else {
        Err(errno(libc::ENOSYS))
    }
}

fn target(f: &Found) -> io::Result<String> {
    if f.st.st_mode & libc::S_IFMT == libc::S_IFLNK {
        return Err(errno(libc::ENOTSUP));
    }
    Ok(beneath::proc_path(f.fd.as_fd()))
}

fn found(fs: &UnionFs, inode: u64) -> io::Result<Found> {
    enabled(fs)?;
    fs.search(&fs.inodes.path(inode)?)
}

/// Value of `name` (or its size when `size` is 0).
pub fn getxattr(fs: &UnionFs, inode: u64, name: &CStr, size: u32) -> io::Result<GetxattrReply> {
    // Keep `f` (and so its descriptor) alive while its /proc path is used.
    let f = found(fs, inode)?;
    let p = target(&f)?;
    if size == 0 {
        return Ok(GetxattrReply::Count(
            rustix::fs::getxattr_query(&p, name)? as u32
        ));
    }
    let mut buf = vec![0u8; size as usize];
    let n = rustix::fs::getxattr(&p, name, &mut buf[..])?;
    buf.truncate(n);
    Ok(GetxattrReply::Value(buf))
}

/// NUL-separated names (or their total size when `size` is 0).
pub fn listxattr(fs: &UnionFs, inode: u64, size: u32) -> io::Result<ListxattrReply> {
    // Keep `f` (and so its descriptor) alive while its /proc path is used.
    let f = found(fs, inode)?;
    let p = target(&f)?;
    if size == 0 {
        return Ok(ListxattrReply::Count(
            rustix::fs::listxattr_query(&p)? as u32
        ));
    }
    let mut buf = vec![0u8; size as usize];
    let n = rustix::fs::listxattr(&p, &mut buf[..])?;
    buf.truncate(n);
    Ok(ListxattrReply::Names(buf))
}

fn each_copy(fs: &UnionFs, inode: u64, op: impl Fn(&str) -> io::Result<()>) -> io::Result<()> {
    enabled(fs)?;
    let rel = fs.inodes.path(inode)?;
    let mut fold = ErrnoFold::new();
    for f in fs.action(&rel)? {
        fold.add(&target(&f).and_then(|p| op(&p)));
    }
    fold.result()
}

/// Sets `name` on every writable copy.
pub fn setxattr(fs: &UnionFs, inode: u64, name: &CStr, value: &[u8], flags: u32) -> io::Result<()> {
    let flags = XattrFlags::from_bits(flags).ok_or_else(|| errno(libc::EINVAL))?;
    each_copy(fs, inode, |p| {
        Ok(rustix::fs::setxattr(p, name, value, flags)?)
    })
}

/// Removes `name` from every writable copy.
pub fn removexattr(fs: &UnionFs, inode: u64, name: &CStr) -> io::Result<()> {
    each_copy(fs, inode, |p| Ok(rustix::fs::removexattr(p, name)?))
}
