//! UNLINK and RMDIR: remove every writable copy the action policy selects. A name that exists
//! only on RO branches gets EROFS; copies on RO branches are left alone (as in mergerfs).

use std::ffi::CStr;
use std::io;

use rustix::fs::AtFlags;

use crate::fs::options::Func;
use crate::fs::resolve::check_name;
use crate::fs::{errno, UnionFs};
use crate::sys::beneath;
use crate::union::ErrnoFold;
use std::os::fd::AsFd;

/// Removes `name` from `parent`: a directory when `dir`, otherwise any non-directory.
pub fn remove(fs: &UnionFs, parent: u64, name: &CStr, dir: bool) -> io::Result<()> {
    check_name(name)?;
    let rel = fs.inodes.child_path(parent, name)?;
    let parent_rel = fs.inodes.path(parent)?;
    let flags = if dir {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    if dir {
        fs.check_union_empty(&rel, 2)?;
    }
    let mut fold = ErrnoFold::new();
    let func = if dir { Func::Rmdir } else { Func::Unlink };
    for f in fs.action(func, &rel)? {
        let r = fs
            .dir_on(f.branch, &parent_rel)
            .and_then(|d| Ok(rustix::fs::unlinkat(&d, name, flags)?));
        fold.add(&r);
    }
    // A copy that went is gone whatever the answer: the guest must look the name up again.
    if fold.result().is_ok() {
        fs.inodes.unlink(parent, name);
    }
    fold.result_all()?;
    Ok(())
}

impl UnionFs {
    /// ENOTEMPTY if directory `rel` has an entry on any branch: the union shows it, so
    /// removing the directory (or renaming over it) must fail as a nonempty directory does,
    /// even where the copy on one branch is empty.
    /// With fewer than `min_copies` copies nothing is listed (the host's own rmdir on a single
    /// copy answers ENOTEMPTY itself).
    pub(crate) fn check_union_empty(&self, rel: &CStr, min_copies: usize) -> io::Result<()> {
        let copies: Vec<_> = (0..self.roots.len())
            .filter_map(|b| self.dir_on(b, rel).ok())
            .collect();
        if copies.len() < min_copies {
            return Ok(());
        }
        for d in copies {
            if !beneath::list_dir(d.as_fd())?.is_empty() {
                return Err(errno(libc::ENOTEMPTY));
            }
        }
        Ok(())
    }

    /// Before renaming directory `src` over `dst`: ENOTEMPTY if `dst` is a directory that is
    /// not empty in the union.
    pub(crate) fn check_union_empty_target(&self, src: &CStr, dst: &CStr) -> io::Result<()> {
        if self.roots.len() < 2 {
            return Ok(());
        }
        let src_is_dir = (0..self.roots.len()).any(|b| self.dir_on(b, src).is_ok());
        if src_is_dir {
            // A target copy on a branch the source is not on would be merged, not replaced.
            self.check_union_empty(dst, 1)?;
        }
        Ok(())
    }
}
