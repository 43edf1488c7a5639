//! RENAME and RENAME2 (NOREPLACE, EXCHANGE). The entry is renamed on every writable branch that
//! holds it; a branch lacking the destination directory answers EXDEV (the guest's `mv` then
//! copies), as mergerfs does with a path-preserving create policy. A plain rename then removes
//! stale copies of the destination on the other writable branches so they cannot shadow it.

use std::ffi::CStr;
use std::io;

use rustix::fs::{AtFlags, RenameFlags};

use crate::fs::options::Func;
use crate::fs::resolve::check_name;
use crate::fs::{errno, UnionFs};
use crate::union::{BranchMode, ErrnoFold};

/// Renames `olddir/oldname` to `newdir/newname` with renameat2 `flags`.
pub fn rename(
    fs: &UnionFs,
    olddir: u64,
    oldname: &CStr,
    newdir: u64,
    newname: &CStr,
    flags: u32,
) -> io::Result<()> {
    check_name(oldname)?;
    check_name(newname)?;
    let flags = RenameFlags::from_bits(flags).ok_or_else(|| errno(libc::EINVAL))?;
    if flags.contains(RenameFlags::WHITEOUT)
        || flags.contains(RenameFlags::NOREPLACE | RenameFlags::EXCHANGE)
    {
        return Err(errno(libc::EINVAL));
    }
    let old_rel = fs.inodes.child_path(olddir, oldname)?;
    let new_rel = fs.inodes.child_path(newdir, newname)?;
    let old_parent = fs.inodes.path(olddir)?;
    let new_parent = fs.inodes.path(newdir)?;
    if flags.contains(RenameFlags::NOREPLACE) && fs.exists_anywhere(&new_rel) {
        return Err(errno(libc::EEXIST));
    }
    let mut fold = ErrnoFold::new();
    let mut done = Vec::new();
    for f in fs.action(Func::Rename, &old_rel)? {
        let r = (|| {
            let od = fs.dir_on(f.branch, &old_parent)?;
            let nd = fs.dir_on(f.branch, &new_parent).map_err(|e| {
                if e.raw_os_error() == Some(libc::ENOENT) {
                    errno(libc::EXDEV)
                } else {
                    e
                }
            })?;
            Ok::<_, io::Error>(rustix::fs::renameat_with(
                &od, oldname, &nd, newname, flags,
            )?)
        })();
        fold.add(&r);
        if r.is_ok() {
            done.push(f.branch);
        }
    }
    fold.result()?;
    if flags.contains(RenameFlags::EXCHANGE) {
        fs.inodes.exchange(olddir, oldname, newdir, newname);
        return Ok(());
    }
    for b in 0..fs.roots.len() {
        if fs.modes[b] == BranchMode::RO || done.contains(&b) {
            continue;
        }
        if let Ok(nd) = fs.dir_on(b, &new_parent) {
            if let Err(e) = rustix::fs::unlinkat(&nd, newname, AtFlags::empty()) {
                if e == rustix::io::Errno::ISDIR {
                    let _ = rustix::fs::unlinkat(&nd, newname, AtFlags::REMOVEDIR);
                }
            }
        }
    }
    fs.inodes.rename(olddir, oldname, newdir, newname);
    Ok(())
}
