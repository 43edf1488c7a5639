//! UNLINK and RMDIR: remove every writable copy the action policy selects. A name that exists
//! only on RO branches gets EROFS; copies on RO branches are left alone (as in mergerfs).

use std::ffi::CStr;
use std::io;

use rustix::fs::AtFlags;

use crate::fs::options::Func;
use crate::fs::resolve::check_name;
use crate::fs::UnionFs;
use crate::union::ErrnoFold;

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
