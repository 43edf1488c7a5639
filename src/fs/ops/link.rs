//! LINK: a hard link is made on each writable branch holding the source whose copy of the new
//! parent directory exists; EXDEV if there is none (links cannot cross branches).

use std::ffi::CStr;
use std::io;
use std::os::fd::AsFd;

use fuse_backend_rs::api::filesystem::{Context, Entry};
use rustix::fs::AtFlags;

use crate::fs::options::Func;
use crate::fs::resolve::{check_name, split_parent};
use crate::fs::{errno, UnionFs};
use crate::sys::{beneath, creds};
use crate::union::ErrnoFold;

/// Links `inode` as `newparent/newname`.
pub fn link(
    fs: &UnionFs,
    ctx: &Context,
    inode: u64,
    newparent: u64,
    newname: &CStr,
) -> io::Result<Entry> {
    check_name(newname)?;
    let old_rel = fs.inodes.path(inode)?;
    if old_rel.as_bytes() == b"." {
        return Err(errno(libc::EPERM));
    }
    let new_rel = fs.inodes.child_path(newparent, newname)?;
    if fs.exists_anywhere(&new_rel) {
        return Err(errno(libc::EEXIST));
    }
    let (old_parent, old_name) = split_parent(&old_rel);
    let new_parent = fs.inodes.path(newparent)?;
    let mut fold = ErrnoFold::new();
    let mut first = None;
    for f in fs.action(Func::Link, &old_rel)? {
        let r = (|| {
            let od = fs.dir_on(f.branch, &old_parent)?;
            let nd = fs
                .dir_on(f.branch, &new_parent)
                .map_err(|_| errno(libc::EXDEV))?;
            let _creds = creds::switch_to(ctx.uid, ctx.gid);
            Ok::<_, io::Error>(rustix::fs::linkat(
                &od,
                &old_name,
                &nd,
                newname,
                AtFlags::empty(),
            )?)
        })();
        fold.add(&r);
        if r.is_ok() && first.is_none() {
            first = Some(f.branch);
        }
    }
    fold.result()?;
    let branch = first.expect("a success was folded");
    let fd = beneath::open_path(fs.root(branch), &new_rel)?;
    let st = beneath::stat_fd(fd.as_fd())?;
    fs.make_entry(newparent, newname, &new_rel, st)
}
