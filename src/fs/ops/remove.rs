//! UNLINK and RMDIR: remove every writable copy the action policy selects. A name that exists
//! only on RO branches gets EROFS; copies on RO branches are left alone (as in mergerfs).

use std::ffi::{CStr, CString};
use std::io;

use rustix::fs::AtFlags;

use crate::fs::call::Call;
use crate::fs::caller::Groups;
use crate::fs::errno;
use crate::fs::options::Func;
use crate::fs::resolve::{check_name, present};
use crate::sys::beneath;
use crate::union::ErrnoFold;
use fuse_backend_rs::api::filesystem::Context;
use std::os::fd::AsFd;

/// Removes `name` from `parent`: a directory when `dir`, otherwise any non-directory.
pub fn remove(fs: &Call<'_>, ctx: &Context, parent: u64, name: &CStr, dir: bool) -> io::Result<()> {
    check_name(name)?;
    // A directory's removal may take facts of its subtree with it: everything goes.
    let _memo = if dir {
        fs.lookup_memo.changing_everywhere()
    } else {
        fs.lookup_memo.changing_in(parent)
    };
    let parent_rel = fs.inodes.path(parent)?;
    let rel = crate::fs::resolve::join(parent_rel.to_bytes(), name.to_bytes());
    let flags = if dir {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    if fs.with_view(|v| v.opts.cow) {
        return cow_remove(fs, ctx, parent, name, &rel, &parent_rel, dir);
    }
    if dir {
        fs.check_union_empty(&rel, 2)?;
    }
    let func = if dir { Func::Rmdir } else { Func::Unlink };
    let (kept, fold) =
        if fs.with_view(|v| v.opts.policies.get(func).every_existing(func.category())) {
            let kept = fs.keep_open(parent, name);
            (kept, remove_each(fs, ctx, &parent_rel, name, func, flags)?)
        } else {
            let copies = fs.action(func, &rel)?;
            let kept = fs.keep_open_found(parent, name, &copies);
            let mut fold = ErrnoFold::new();
            for f in copies {
                let r = fs
                    .dir_on(f.branch, &parent_rel)
                    .and_then(|d| unlink_as_caller(fs, ctx, &d, name, flags));
                fold.add(&r);
            }
            (kept, fold)
        };
    // A copy that went is gone whatever the answer: the guest must look the name up again.
    if fold.result().is_ok() {
        fs.unlinked(parent, name, kept);
    } else {
        fs.kept_open(kept);
    }
    fold.result_all()?;
    Ok(())
}

/// `unlinkat(dir, name, flags)` as the caller.
fn unlink_as_caller(
    fs: &Call<'_>,
    ctx: &Context,
    dir: &impl AsFd,
    name: &CStr,
    flags: AtFlags,
) -> io::Result<()> {
    fs.as_caller(ctx, &[dir.as_fd()], &[], Groups::OnRefusal, || {
        Ok(rustix::fs::unlinkat(dir, name, flags)?)
    })
}

/// Removal under an action policy that takes every usable branch holding the name (`epall`,
/// the default, and `all`), as [`Call::action`] would choose them but in one pass: each
/// branch's parent is opened (the root's own descriptor for a top-level name), the name looked
/// for there with one `fstatat` (none on a single writable branch, whose `unlinkat` answers
/// ENOENT itself) and removed. Nothing found on a usable branch: EROFS if an unusable (RO)
/// branch holds it, otherwise ENOENT or the failure met while looking.
fn remove_each(
    fs: &Call<'_>,
    ctx: &Context,
    parent_rel: &CStr,
    name: &CStr,
    func: Func,
    flags: AtFlags,
) -> io::Result<ErrnoFold> {
    let view = fs.view();
    let alone = view.branches.len() == 1;
    let mut fold = ErrnoFold::new();
    let mut tried = false;
    let mut refused = false;
    let mut failure = None;
    for (pos, info) in view.branches.infos().iter().enumerate() {
        let d = match present(fs.dir_on(view.branches.id_at(pos), parent_rel)) {
            Ok(Some(d)) => d,
            Ok(None) => continue,
            Err(e) => {
                failure.get_or_insert(e);
                continue;
            }
        };
        let usable = func.category().allows(info.mode);
        if !alone || !usable {
            match present(beneath::stat_at(d.as_fd(), name)) {
                Ok(Some(_)) if usable => {}
                Ok(Some(_)) => {
                    refused = true;
                    continue;
                }
                Ok(None) => continue,
                Err(e) => {
                    failure.get_or_insert(e);
                    continue;
                }
            }
        }
        let r = unlink_as_caller(fs, ctx, &d, name, flags);
        if alone && matches!(&r, Err(e) if e.raw_os_error() == Some(libc::ENOENT)) {
            continue;
        }
        tried = true;
        fold.add(&r);
    }
    if !tried {
        return Err(match failure {
            _ if refused => errno(libc::EROFS),
            Some(e) => e,
            None => errno(libc::ENOENT),
        });
    }
    Ok(fold)
}

/// Copy-on-write removal: the copies on RW branches go (a directory's whiteouts first), and a
/// whiteout hides what an RO branch still has.
fn cow_remove(
    fs: &Call<'_>,
    ctx: &Context,
    parent: u64,
    name: &CStr,
    rel: &CStr,
    parent_rel: &CStr,
    dir: bool,
) -> io::Result<()> {
    let copies: Vec<_> = fs
        .view()
        .branches
        .indices()
        .filter_map(|b| fs.find_on(b, rel))
        .collect();
    let Some(first) = copies.first() else {
        return Err(errno(libc::ENOENT));
    };
    let is_dir = first.st.st_mode & libc::S_IFMT == libc::S_IFDIR;
    match (dir, is_dir) {
        (true, false) => return Err(errno(libc::ENOTDIR)),
        (false, true) => return Err(errno(libc::EISDIR)),
        _ => {}
    }
    // What goes on RW branches goes as the caller; the whiteout is the daemon's own, so the
    // caller's permission to remove the entry from the directory it sees is checked first.
    fs.may_remove_from(ctx, parent_rel, || Ok(first.st.st_uid))?;
    if dir {
        fs.check_union_empty(rel, 1)?;
        fs.clear_whiteouts(rel)?;
    }
    let flags = if dir {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    for f in copies
        .iter()
        .filter(|f| !fs.view().branches.is_ro(f.branch))
    {
        unlink_as_caller(fs, ctx, &fs.dir_on(f.branch, parent_rel)?, name, flags)?;
    }
    let kept = fs.keep_open(parent, name);
    fs.whiteout_if_lower(rel)?;
    fs.inodes.unlink(parent, name);
    fs.kept_open(kept);
    Ok(())
}

impl Call<'_> {
    /// ENOTEMPTY if directory `rel` has an entry on any branch: the union shows it, so
    /// removing the directory (or renaming over it) must fail as a nonempty directory does,
    /// even where the copy on one branch is empty.
    /// With fewer than `min_copies` copies nothing is listed (the host's own rmdir on a single
    /// copy answers ENOTEMPTY itself).
    pub(crate) fn check_union_empty(&self, rel: &CStr, min_copies: usize) -> io::Result<()> {
        if self.view().branches.len() < min_copies {
            return Ok(());
        }
        let copies: Vec<_> = self
            .view()
            .branches
            .indices()
            .filter_map(|b| self.dir_on(b, rel).ok())
            .collect();
        if copies.len() < min_copies {
            return Ok(());
        }
        for d in copies {
            let listed = beneath::list_dir(d.as_fd())?;
            if self.view().opts.cow {
                // Whiteouts and what they hide are not entries of the union.
                for e in listed {
                    let name = CString::new(e.name).expect("no NUL in a name");
                    let child = crate::fs::resolve::join(rel.to_bytes(), name.to_bytes());
                    if self.exists_anywhere(&child) {
                        return Err(errno(libc::ENOTEMPTY));
                    }
                }
            } else if !listed.is_empty() {
                return Err(errno(libc::ENOTEMPTY));
            }
        }
        Ok(())
    }

    /// Before renaming directory `src` over `dst`: ENOTEMPTY if `dst` is a directory that is
    /// not empty in the union.
    pub(crate) fn check_union_empty_target(&self, src: &CStr, dst: &CStr) -> io::Result<()> {
        if self.view().branches.len() < 2 {
            return Ok(());
        }
        let src_is_dir = self
            .view()
            .branches
            .indices()
            .any(|b| self.dir_on(b, src).is_ok());
        if src_is_dir {
            // A target copy on a branch the source is not on would be merged, not replaced.
            self.check_union_empty(dst, 1)?;
        }
        Ok(())
    }
}
