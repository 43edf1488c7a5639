//! LINK, as mergerfs does it: a hard link is made on each branch the link policy selects. With
//! a path-preserving create policy a branch lacking the new parent answers EXDEV; otherwise the
//! parent is cloned there first. On EXDEV, `link-exdev` may make a symlink instead (relative,
//! to the host path on the source's branch, or under `mountpoint`); the guest then gets the
//! source's attributes with no caching, as mergerfs replies.

use crate::fs::call::Call;
use crate::fs::inode::Rebind;
use crate::fs::BranchId;
use std::ffi::{CStr, CString};
use std::io;
use std::time::Duration;

use fuse_backend_rs::api::filesystem::{Context, Entry};
use rustix::fs::AtFlags;

use crate::fs::caller::Groups;
use crate::fs::errno;
use crate::fs::options::{Func, LinkExdev};
use crate::fs::resolve::{check_name, split_parent};
use crate::union::ErrnoFold;
use std::os::fd::AsFd;

/// Links `inode` as `newparent/newname`.
pub fn link(
    fs: &Call<'_>,
    ctx: &Context,
    inode: u64,
    newparent: u64,
    newname: &CStr,
) -> io::Result<Entry> {
    check_name(newname)?;
    let _memo = fs.lookup_memo.changing_in(newparent);
    let old_rel = match fs.inodes.path(inode) {
        // No name: an O_TMPFILE file (or an open-unlinked one, which the host refuses).
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            return link_unnamed(fs, ctx, inode, newparent, newname)
        }
        r => r?,
    };
    if old_rel.as_bytes() == b"." {
        return Err(errno(libc::EPERM));
    }
    let new_rel = fs.inodes.child_path(newparent, newname)?;
    if fs.exists_anywhere(&new_rel) {
        return Err(errno(libc::EEXIST));
    }
    let new_parent = fs.inodes.path(newparent)?;
    match link_on_branches(fs, ctx, &old_rel, &new_parent, newname) {
        Ok(branch) => {
            // The reply carries the host's attributes now (the new link count); the new name
            // joins the source's node, as it is the same file.
            let f = fs
                .find_on(branch, &new_rel)
                .ok_or_else(|| errno(libc::ENOENT))?;
            fs.entry_for(newparent, newname, &new_rel, &f, Rebind::Yes)
        }
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            exdev(fs, ctx, &old_rel, &new_parent, newparent, newname)
        }
        Err(e) => Err(e),
    }
}

/// Links on every branch the link policy selects; returns the first branch that succeeded.
fn link_on_branches(
    fs: &Call<'_>,
    ctx: &Context,
    old_rel: &CStr,
    new_parent: &CStr,
    newname: &CStr,
) -> io::Result<BranchId> {
    let (old_parent, old_name) = split_parent(old_rel);
    let preserve = fs.view().opts.policies.get(Func::Create).path_preserving();
    let mut fold = ErrnoFold::new();
    let mut first = None;
    for f in fs.action(Func::Link, old_rel)? {
        if !preserve && fs.dir_on(f.branch, new_parent).is_err() {
            let from = fs.search(Func::Getattr, new_parent)?.branch;
            fs.clone_path(from, f.branch, new_parent)?;
        }
        let r = (|| {
            let od = fs.dir_on(f.branch, &old_parent)?;
            let nd = fs
                .dir_on(f.branch, new_parent)
                .map_err(|_| errno(libc::EXDEV))?;
            // Copy-on-write: a whiteout at the new name goes (dpkg links status to
            // status-old right after unlinking the old backup).
            fs.make_entry(ctx, nd.as_fd(), newname, || {
                Ok(rustix::fs::linkat(
                    &od,
                    &old_name,
                    &nd,
                    newname,
                    AtFlags::empty(),
                )?)
            })
            .map(drop)
        })();
        fold.add(&r);
        if r.is_ok() && first.is_none() {
            first = Some(f.branch);
        }
    }
    fold.result()?;
    Ok(first.expect("a success was folded"))
}

/// The `link-exdev` fallback.
fn exdev(
    fs: &Call<'_>,
    ctx: &Context,
    old_rel: &CStr,
    new_parent: &CStr,
    newparent: u64,
    newname: &CStr,
) -> io::Result<Entry> {
    let target: Vec<u8> = match fs.view().opts.link_exdev {
        LinkExdev::Passthrough => return Err(errno(libc::EXDEV)),
        LinkExdev::RelSymlink => relative(old_rel.to_bytes(), new_parent.to_bytes()),
        LinkExdev::AbsBaseSymlink => {
            let f = fs.search(Func::Open, old_rel)?;
            fs.host_path(f.branch, old_rel)
        }
        LinkExdev::AbsPoolSymlink => fs.pool_path(old_rel.to_bytes()),
    };
    let target = CString::new(target).expect("no NUL");
    let mut e = crate::fs::ops::create::symlink(
        fs,
        ctx,
        &target,
        newparent,
        newname,
        &crate::fs::ops::create::NewEntry::PLAIN,
    )?;
    // Answer with the source's attributes, uncached, so the guest's link(2) sees a hard link
    // now and the symlink on its next lookup.
    e.attr = fs.union_attr(fs.search(Func::Getattr, old_rel)?.st, old_rel.to_bytes());
    e.attr_timeout = Duration::ZERO;
    e.entry_timeout = Duration::ZERO;
    Ok(e)
}

/// `target` relative to directory `from` (both union paths; `.` is the root).
pub(crate) fn relative(target: &[u8], from: &[u8]) -> Vec<u8> {
    let t: Vec<&[u8]> = target
        .split(|&c| c == b'/')
        .filter(|c| *c != b".")
        .collect();
    let f: Vec<&[u8]> = from.split(|&c| c == b'/').filter(|c| *c != b".").collect();
    let common = t.iter().zip(&f).take_while(|(a, b)| a == b).count();
    let mut out = Vec::new();
    for _ in common..f.len() {
        out.extend_from_slice(b"../");
    }
    out.extend_from_slice(&t[common..].join(&b'/'));
    out
}

/// Names an unnamed node (O_TMPFILE) `newparent/newname` on its own branch, through its
/// descriptor; EXDEV when that branch lacks the new parent.
fn link_unnamed(
    fs: &Call<'_>,
    ctx: &Context,
    inode: u64,
    newparent: u64,
    newname: &CStr,
) -> io::Result<Entry> {
    let (branch, fd) = fs.node_fd(inode)?.ok_or_else(|| errno(libc::ENOENT))?;
    let new_rel = fs.inodes.child_path(newparent, newname)?;
    if fs.exists_anywhere(&new_rel) {
        return Err(errno(libc::EEXIST));
    }
    let new_parent = fs.inodes.path(newparent)?;
    if fs.view().branches.is_ro(branch) {
        return Err(errno(libc::EROFS));
    }
    let nd = fs
        .dir_on(branch, &new_parent)
        .map_err(|_| errno(libc::EXDEV))?;
    {
        fs.as_caller(ctx, &[nd.as_fd()], &[], Groups::OnRefusal, || {
            Ok(rustix::fs::linkat(
                rustix::fs::CWD,
                &crate::sys::beneath::proc_path(std::os::fd::AsFd::as_fd(&*fd)),
                &nd,
                newname,
                AtFlags::SYMLINK_FOLLOW,
            )?)
        })?;
    }
    let f = fs
        .find_on(branch, &new_rel)
        .ok_or_else(|| errno(libc::ENOENT))?;
    fs.entry_for(newparent, newname, &new_rel, &f, Rebind::Yes)
}

#[cfg(test)]
mod tests {
    use super::relative;

    #[test]
    fn relative_paths() {
        assert_eq!(relative(b"a/f", b"."), b"a/f");
        assert_eq!(relative(b"a/f", b"a"), b"f");
        assert_eq!(relative(b"a/f", b"b/c"), b"../../a/f");
        assert_eq!(relative(b"a/b/f", b"a/c"), b"../b/f");
    }
}
