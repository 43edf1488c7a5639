//! RENAME and RENAME2, as mergerfs does them. With a path-preserving create policy the entry is
//! renamed on every branch the rename policy selects; a branch where that fails loses its old
//! copy, other branches lose stale copies of the destination, and if no branch succeeded the
//! answer is EXDEV. Otherwise the destination's parent is cloned where missing and the rename
//! retried. On EXDEV, `rename-exdev` may instead park the source in `.mergerfs_rename_exdev`
//! and leave a symlink at the destination. RENAME_NOREPLACE, RENAME_EXCHANGE and
//! RENAME_WHITEOUT (which mergerfs does not offer) are done per branch. Unlike mergerfs, RO branches are never cleaned up.

use crate::fs::BranchId;
use std::ffi::{CStr, CString};
use std::io;

use fuse_backend_rs::api::filesystem::Context;
use rustix::fs::{AtFlags, Mode, RenameFlags};
use std::os::fd::AsFd;

use crate::fs::call::Call;
use crate::fs::caller::Groups;
use crate::fs::errno;
use crate::fs::options::{Func, RenameExdev};
use crate::fs::resolve::{check_name, split_parent, Found};
use crate::union::ErrnoFold;

/// The hidden directory where `rename-exdev` symlink modes park moved sources.
pub const EXDEV_DIR: &str = ".mergerfs_rename_exdev";

/// The union paths of one rename.
struct Names<'a> {
    old_rel: CString,
    new_rel: CString,
    old_parent: CString,
    new_parent: CString,
    oldname: &'a CStr,
    newname: &'a CStr,
    /// The caller (host ids): renames and the removals that go with them are made as it.
    ctx: &'a Context,
}

/// Renames `olddir/oldname` to `newdir/newname` with renameat2 `flags`.
pub fn rename(
    fs: &Call<'_>,
    ctx: &Context,
    olddir: u64,
    oldname: &CStr,
    newdir: u64,
    newname: &CStr,
    flags: u32,
) -> io::Result<()> {
    check_name(oldname)?;
    check_name(newname)?;
    let flags = RenameFlags::from_bits(flags).ok_or_else(|| errno(libc::EINVAL))?;
    // As renameat2(2): EXCHANGE goes with neither NOREPLACE nor WHITEOUT.
    if flags.contains(RenameFlags::EXCHANGE)
        && flags.intersects(RenameFlags::NOREPLACE | RenameFlags::WHITEOUT)
    {
        return Err(errno(libc::EINVAL));
    }
    fs.inodes.check_move(olddir, oldname, newdir)?;
    // A rename moves subtrees, and may park, clone or copy up on other branches.
    let _memo = fs.lookup_memo.changing_everywhere();
    // A subdirectory renamed changes no link count: the counts kept from listings go.
    let _links = fs.dir_links.renaming();
    let n = Names {
        old_rel: fs.inodes.child_path(olddir, oldname)?,
        new_rel: fs.inodes.child_path(newdir, newname)?,
        old_parent: fs.inodes.path(olddir)?,
        new_parent: fs.inodes.path(newdir)?,
        oldname,
        newname,
        ctx,
    };
    if fs.view().opts.cow {
        cow_permitted(fs, &n)?;
        cow_prepare(fs, &n)?;
    }
    if !flags.contains(RenameFlags::NOREPLACE) {
        fs.check_union_empty_target(&n.old_rel, &n.new_rel)?;
        if flags.contains(RenameFlags::EXCHANGE) {
            fs.check_union_empty_target(&n.new_rel, &n.old_rel)?;
        }
    }
    // The node at the target (and, should the rename go half-way, at the source) may lose
    // its last name.
    let kept = [fs.keep_open(newdir, newname), fs.keep_open(olddir, oldname)];
    let r = rename_names(fs, &n, flags, (olddir, oldname), (newdir, newname));
    for k in kept {
        fs.kept_open(k);
    }
    r
}

/// The renames of [`rename`] on the branches, and the node table brought in step.
fn rename_names(
    fs: &Call<'_>,
    n: &Names<'_>,
    flags: RenameFlags,
    (olddir, oldname): (u64, &CStr),
    (newdir, newname): (u64, &CStr),
) -> io::Result<()> {
    let ctx = n.ctx;
    if !flags.is_empty() {
        rename_flagged(fs, n, flags)?;
        if !flags.contains(RenameFlags::EXCHANGE) {
            fs.whiteout_if_lower(&n.old_rel)?;
        }
        if flags.contains(RenameFlags::EXCHANGE) {
            fs.inodes.exchange(olddir, oldname, newdir, newname);
        } else {
            fs.inodes.rename(olddir, oldname, newdir, newname);
        }
        return Ok(());
    }
    let mut moved = false;
    let done = if fs.view().opts.policies.get(Func::Create).path_preserving() {
        preserve_path(fs, n)
    } else {
        create_path(fs, n, &mut moved)
    };
    match done {
        Err(e) if moved && e.raw_os_error() != Some(libc::EXDEV) => {
            // Renamed on some branches, not on others: neither name is what the table says
            // any more. Both are unbound (their nodes keep working through their own
            // descriptors), and the guest looks them up afresh.
            fs.inodes.unlink(olddir, oldname);
            fs.inodes.unlink(newdir, newname);
            return Err(e);
        }
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            exdev(fs, ctx, n, newdir)?;
            // The guest now sees a symlink at the new name; let it look both names up afresh.
            fs.inodes.unlink(olddir, oldname);
            fs.inodes.unlink(newdir, newname);
        }
        r => {
            r?;
            fs.whiteout_if_lower(&n.old_rel)?;
            fs.inodes.rename(olddir, oldname, newdir, newname);
        }
    }
    Ok(())
}

/// Copy-on-write: the copy-up, the whiteouts taken away at the destination and left at the
/// source are the daemon's own, so the caller's permission to remove the source from its
/// directory and to put the destination in its own is checked first, on the directories the
/// guest sees.
fn cow_permitted(fs: &Call<'_>, n: &Names) -> io::Result<()> {
    fs.may_remove_from(n.ctx, &n.old_parent, || {
        Ok(fs.search(Func::Getattr, &n.old_rel)?.st.st_uid)
    })?;
    fs.may_remove_from(n.ctx, &n.new_parent, || {
        Ok(fs
            .search(Func::Getattr, &n.new_rel)
            .map_or(n.ctx.uid, |t| t.st.st_uid))
    })
}

/// Copy-on-write, before a rename: a directory that an RO branch also has is copied up whole
/// and made opaque (its lower entries would otherwise stay behind), so the rename never
/// answers EXDEV. A whiteout at the destination on an RW branch goes (a directory cannot
/// replace it).
fn cow_prepare(fs: &Call<'_>, n: &Names) -> io::Result<()> {
    let src = fs.search(Func::Getattr, &n.old_rel)?;
    if src.st.st_mode & libc::S_IFMT == libc::S_IFDIR && fs.lower_has(&n.old_rel) {
        fs.copy_up_tree(&n.old_rel)?;
    }
    for b in fs
        .view()
        .branches
        .indices()
        .filter(|&b| !fs.view().branches.is_ro(b))
    {
        if let Ok(d) = fs.dir_on(b, &n.new_parent) {
            fs.remove_whiteout(&d, n.newname)?;
        }
    }
    Ok(())
}

/// Removes `rel` on `branch` (a file, or an empty directory); never on an RO branch.
/// As the caller, who may lack the permission.
fn remove_on(fs: &Call<'_>, ctx: &Context, branch: BranchId, rel: &CStr) {
    if fs.view().branches.is_ro(branch) {
        return;
    }
    let (parent, name) = split_parent(rel);
    if let Ok(d) = fs.dir_on(branch, &parent) {
        let _ =
            fs.as_caller(
                ctx,
                &[d.as_fd()],
                &[],
                Groups::OnRefusal,
                || match rustix::fs::unlinkat(&d, &name, AtFlags::empty()) {
                    Err(rustix::io::Errno::ISDIR) => {
                        Ok(rustix::fs::unlinkat(&d, &name, AtFlags::REMOVEDIR)?)
                    }
                    r => Ok(r?),
                },
            );
    }
}

fn rename_on(fs: &Call<'_>, branch: BranchId, n: &Names, flags: RenameFlags) -> io::Result<()> {
    let od = fs.dir_on(branch, &n.old_parent)?;
    let nd = fs.dir_on(branch, &n.new_parent)?;
    let dirs = [od.as_fd(), nd.as_fd()];
    fs.as_caller(n.ctx, &dirs, &[], Groups::OnRefusal, || {
        Ok(rustix::fs::renameat_with(
            &od, n.oldname, &nd, n.newname, flags,
        )?)
    })
}

fn holders(fs: &Call<'_>, rel: &CStr) -> io::Result<Vec<BranchId>> {
    Ok(fs
        .action(Func::Rename, rel)?
        .iter()
        .map(|f: &Found| f.branch)
        .collect())
}

/// mergerfs's rename for path-preserving create policies.
fn preserve_path(fs: &Call<'_>, n: &Names) -> io::Result<()> {
    let old = holders(fs, &n.old_rel)?;
    let mut remove = Vec::new();
    let mut success = false;
    let mut refused = None;
    for b in fs.view().branches.indices() {
        if !old.contains(&b) {
            remove.push((b, &n.new_rel));
        } else if let Err(e) = rename_on(fs, b, n, RenameFlags::empty()) {
            if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) {
                refused.get_or_insert(e);
            }
            remove.push((b, &n.old_rel));
        } else {
            success = true;
        }
    }
    if !success {
        // The caller may not rename (nothing moved anywhere): say so, rather than EXDEV,
        // which would have the guest copy and delete instead.
        return Err(refused.unwrap_or_else(|| errno(libc::EXDEV)));
    }
    for (b, rel) in remove {
        remove_on(fs, n.ctx, b, rel);
    }
    Ok(())
}

/// mergerfs's rename for create policies that clone paths: a missing destination directory is
/// cloned from where the getattr policy finds it, then the rename is retried.
/// `moved` says whether any branch renamed, also when the answer is an error.
fn create_path(fs: &Call<'_>, n: &Names, moved: &mut bool) -> io::Result<()> {
    let old = holders(fs, &n.old_rel)?;
    let from = fs.search(Func::Getattr, &n.new_parent)?.branch;
    let mut remove = Vec::new();
    let mut last = Ok(());
    for b in fs.view().branches.indices() {
        if !old.contains(&b) {
            remove.push((b, &n.new_rel));
            continue;
        }
        let mut r = rename_on(fs, b, n, RenameFlags::empty());
        if r.is_err() && fs.clone_path(from, b, &n.new_parent).is_ok() {
            r = rename_on(fs, b, n, RenameFlags::empty());
        }
        if r.is_err() {
            remove.push((b, &n.old_rel));
        } else {
            *moved = true;
        }
        last = r;
    }
    last?;
    for (b, rel) in remove {
        remove_on(fs, n.ctx, b, rel);
    }
    Ok(())
}

/// What `rename-exdev` does when the rename could not stay on its branches.
fn exdev(fs: &Call<'_>, ctx: &Context, n: &Names, newdir: u64) -> io::Result<()> {
    let target = match &fs.view().opts.rename_exdev {
        RenameExdev::Passthrough => return Err(errno(libc::EXDEV)),
        RenameExdev::RelSymlink => {
            let parked = parked(&n.old_rel);
            crate::fs::ops::link::relative(parked.to_bytes(), n.new_parent.to_bytes())
        }
        RenameExdev::AbsSymlink => fs.pool_path(parked(&n.old_rel).to_bytes()),
    };
    let parked = park(fs, n)?;
    let target = CString::new(target).expect("no NUL");
    match crate::fs::ops::create::symlink(
        fs,
        ctx,
        &target,
        newdir,
        n.newname,
        &crate::fs::ops::create::NewEntry::PLAIN,
    ) {
        Ok(e) => {
            fs.inodes.forget(e.inode, 1);
            Ok(())
        }
        Err(e) => {
            unpark(fs, n, &parked);
            Err(e)
        }
    }
}

/// `.mergerfs_rename_exdev/<rel>` (or the directory itself for the root).
fn parked(rel: &CStr) -> CString {
    let mut v = EXDEV_DIR.as_bytes().to_vec();
    if rel.to_bytes() != b"." {
        v.push(b'/');
        v.extend_from_slice(rel.to_bytes());
    }
    CString::new(v).expect("no NUL")
}

fn ensure_dir(fs: &Call<'_>, b: BranchId, parent: &CStr, name: &[u8], mode: u32) -> io::Result<()> {
    let d = fs.dir_on(b, parent)?;
    match rustix::fs::mkdirat(&d, name, Mode::from_raw_mode(mode)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Moves the source into `.mergerfs_rename_exdev/<old path>` on branch `b`, mirroring its
/// parent directories there with their modes.
fn park_on(fs: &Call<'_>, b: BranchId, n: &Names) -> io::Result<()> {
    ensure_dir(fs, b, c".", EXDEV_DIR.as_bytes(), 0o1777)?;
    if n.old_parent.to_bytes() != b"." {
        let mut done: Vec<u8> = Vec::new();
        for comp in n.old_parent.to_bytes().split(|&c| c == b'/') {
            let under = parked(
                &CString::new(if done.is_empty() {
                    b".".to_vec()
                } else {
                    done.clone()
                })
                .expect("no NUL"),
            );
            if !done.is_empty() {
                done.push(b'/');
            }
            done.extend_from_slice(comp);
            let src = CString::new(done.clone()).expect("no NUL");
            let mode = fs
                .dir_on(b, &src)
                .and_then(|d| crate::sys::beneath::stat_fd(std::os::fd::AsFd::as_fd(&d)))?
                .st_mode;
            ensure_dir(fs, b, &under, comp, mode & 0o7777)?;
        }
    }
    let od = fs.dir_on(b, &n.old_parent)?;
    let pd = fs.dir_on(b, &parked(&n.old_parent))?;
    Ok(rustix::fs::renameat(&od, n.oldname, &pd, n.oldname)?)
}

/// Parks the source on every branch holding it; all or nothing (EXDEV if any fails).
fn park(fs: &Call<'_>, n: &Names) -> io::Result<Vec<BranchId>> {
    let mut done = Vec::new();
    for b in holders(fs, &n.old_rel)? {
        if let Err(e) = park_on(fs, b, n) {
            unpark(fs, n, &done);
            log::warn!(
                "rename-exdev: cannot park {}: {e}",
                n.old_rel.to_string_lossy()
            );
            return Err(errno(libc::EXDEV));
        }
        done.push(b);
    }
    Ok(done)
}

/// Undoes [`park`] on the branches listed.
fn unpark(fs: &Call<'_>, n: &Names, branches: &[BranchId]) {
    for &b in branches {
        if let (Ok(pd), Ok(od)) = (
            fs.dir_on(b, &parked(&n.old_parent)),
            fs.dir_on(b, &n.old_parent),
        ) {
            let _ = rustix::fs::renameat(&pd, n.oldname, &od, n.oldname);
        }
    }
}

/// RENAME_NOREPLACE / RENAME_EXCHANGE / RENAME_WHITEOUT: renameat2 on every branch holding the
/// source; a branch lacking the destination directory answers EXDEV. NOREPLACE sees names on
/// every branch. WHITEOUT leaves an overlayfs whiteout (a 0/0 character device, made by the
/// host kernel) at the old name on each of those branches, as a guest's overlayfs with its
/// upper layer on this share expects.
fn rename_flagged(fs: &Call<'_>, n: &Names, flags: RenameFlags) -> io::Result<()> {
    if flags.contains(RenameFlags::NOREPLACE) && fs.exists_anywhere(&n.new_rel) {
        return Err(errno(libc::EEXIST));
    }
    let mut fold = ErrnoFold::new();
    for b in holders(fs, &n.old_rel)? {
        let r = if fs.dir_on(b, &n.new_parent).is_err() {
            Err(errno(libc::EXDEV))
        } else {
            rename_on(fs, b, n, flags)
        };
        fold.add(&r);
    }
    fold.result()
}
