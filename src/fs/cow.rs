//! Copy-on-write layers (`cow=true`, off by default so mergerfs semantics stay exact): the RW
//! branches are upper layers over the RO ones, in overlayfs's on-disk format, so the same
//! directories mounted with the host's overlayfs show the tree the guest saw.
//!
//! - A change to an entry whose visible copy is on an RO branch first copies it up (data,
//!   mode, owner, times, xattrs, and its parent directories) to the RW branch the create
//!   policy picks, then applies the change there.
//! - Deleting an entry that an RO branch still has leaves a whiteout (a 0/0 character device)
//!   in the upper layer; a directory made where a whiteout was is opaque
//!   (`trusted.overlay.opaque=y`), so nothing below shows through it.
//! - Lookups and listings never show a whiteout, and nothing below a whiteout, an opaque
//!   directory or a non-directory of an upper layer.
//!
//! The `trusted.*` xattrs need CAP_SYS_ADMIN: with `cow=true` the daemon keeps it.

use crate::fs::call::Call;
use crate::fs::BranchId;
use crate::sync::LockRecover;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use fuse_backend_rs::abi::fuse_abi::stat64;
use rustix::fs::{AtFlags, FileType, Mode};

use super::caller::Groups;
use super::errno;
use super::found::{present, split_parent, Found};
use super::options::Func;
use crate::sys::beneath;
use fuse_backend_rs::api::filesystem::Context;

/// overlayfs's opaque-directory xattr.
pub(crate) const OPAQUE: &CStr = c"trusted.overlay.opaque";

/// Whether `st` is an overlayfs whiteout: a character device with device number 0/0.
pub(crate) fn is_whiteout(st: &stat64) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFCHR && st.st_rdev == 0
}

/// Whether directory `fd` is marked opaque.
fn is_opaque(fd: BorrowedFd<'_>) -> bool {
    let mut v = [0u8; 2];
    matches!(
        rustix::fs::getxattr(&beneath::proc_path(fd), OPAQUE, &mut v[..]),
        Ok(1) if v[0] == b'y'
    )
}

impl Call<'_> {
    /// Whether `rel` on `branch` is hidden by a layer above it: a whiteout at `rel` or at one
    /// of its ancestors, a non-directory at an ancestor, or an opaque directory at `rel` or
    /// at an ancestor. Always false without `cow`.
    pub(crate) fn cow_masked(&self, branch: BranchId, rel: &CStr) -> io::Result<bool> {
        let bytes = rel.to_bytes();
        // The layers above `branch` are the branches before it in branch order (a removed
        // branch has none: nothing it holds is served).
        let branches = &self.view().branches;
        let above = branches.position(branch).unwrap_or(0);
        if !self.view().opts.cow || above == 0 || bytes == b"." {
            return Ok(false);
        }
        let mut ends: Vec<usize> = bytes
            .iter()
            .enumerate()
            .filter_map(|(i, &c)| (c == b'/').then_some(i))
            .collect();
        ends.push(bytes.len());
        for upper in (0..above).map(|pos| branches.id_at(pos)) {
            for (k, &end) in ends.iter().enumerate() {
                let p = CString::new(&bytes[..end]).expect("no NUL in a path");
                let Some(fd) = present(self.open_on(upper, &p))? else {
                    break; // nothing deeper on this layer
                };
                let st = beneath::stat_fd(fd.as_fd())?;
                if is_whiteout(&st) {
                    return Ok(true);
                }
                let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
                let last = k + 1 == ends.len();
                if (!is_dir && !last) || (is_dir && is_opaque(fd.as_fd())) {
                    return Ok(true);
                }
                if last {
                    break;
                }
            }
        }
        Ok(false)
    }

    /// Directory `parent` on the writable layer the create policy picks (cloned there from
    /// the base if missing), with a descriptor of it.
    fn upper_dir(&self, parent: &CStr) -> io::Result<(Found, super::found::DirFd)> {
        let dir = self
            .create_targets(Func::Create, parent)?
            .into_iter()
            .find(|d| !self.view().branches.is_ro(d.branch))
            .ok_or_else(|| errno(libc::EROFS))?;
        let fd = self.dir_on(dir.branch, parent)?;
        Ok((dir, fd))
    }

    /// Whether any RO branch still shows `rel` (so deleting it needs a whiteout).
    pub(crate) fn lower_has(&self, rel: &CStr) -> bool {
        self.view()
            .branches
            .indices()
            .filter(|&b| self.view().branches.is_ro(b))
            .any(|b| self.find_on(b, rel).is_some())
    }

    /// Copies the entry `f` at `rel` (on an RO branch) up to the RW branch the create policy
    /// picks for its parent (cloning the parent path there), replacing a whiteout there, and
    /// returns the copy. Files keep data, mode, owner, times and xattrs; directories are made
    /// empty (their entries stay below, merged); symlinks keep their target.
    pub(crate) fn copy_up(&self, rel: &CStr, f: &Found) -> io::Result<Found> {
        // The first copy moves to an upper branch.
        let _memo = self.lookup_memo.changing_everywhere();
        let (parent, name) = split_parent(rel);
        let (dir, dir_fd) = self.upper_dir(&parent)?;
        let kind = f.st.st_mode & libc::S_IFMT;
        match kind {
            libc::S_IFREG
                if f.st.st_nlink > 1 && self.link_to_copy(f, dir.branch, &dir_fd, &name)? => {}
            libc::S_IFREG => {
                let fd = std::sync::Arc::try_unwrap(f.fd.clone()).or_else(|a| a.try_clone())?;
                let tmp = super::movefile::copy_to_temp(&fd, &f.st, &dir_fd, "copyup")?;
                rustix::fs::renameat(&dir_fd, &tmp, &dir_fd, &name)?;
                if f.st.st_nlink > 1 {
                    self.copied_up
                        .record((f.st.st_dev, f.st.st_ino), dir.branch, rel);
                }
            }
            libc::S_IFDIR => {
                self.clone_path(f.branch, dir.branch, rel)?;
            }
            libc::S_IFLNK => {
                let target = rustix::fs::readlinkat(f.fd.as_fd(), c"", Vec::new())?;
                self.remove_whiteout(&dir_fd, &name)?;
                rustix::fs::symlinkat(&target, &dir_fd, &name)?;
                let _ = rustix::fs::chownat(
                    &dir_fd,
                    &name,
                    Some(rustix::fs::Uid::from_raw(f.st.st_uid)),
                    Some(rustix::fs::Gid::from_raw(f.st.st_gid)),
                    AtFlags::SYMLINK_NOFOLLOW,
                );
            }
            _ => {
                self.remove_whiteout(&dir_fd, &name)?;
                rustix::fs::mknodat(
                    &dir_fd,
                    &name,
                    FileType::from_raw_mode(kind),
                    Mode::from_raw_mode(f.st.st_mode & 0o7777),
                    f.st.st_rdev,
                )?;
            }
        }
        let up = self
            .find_on(dir.branch, rel)
            .ok_or_else(|| errno(libc::ENOENT))?;
        // The guest's node now acts on the copy.
        self.inodes
            .rebind((f.st.st_dev, f.st.st_ino), self.bind_of(&up));
        Ok(up)
    }

    /// Removes a whiteout named `name` in `dir`, if there is one; whether there was.
    pub(crate) fn remove_whiteout(&self, dir: &impl AsFd, name: &CStr) -> io::Result<bool> {
        match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if is_whiteout(&st) => {
                rustix::fs::unlinkat(dir, name, AtFlags::empty())?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Makes entry `name` in directory `dir` with `make`, as caller `ctx` (`fs::caller`). With
    /// copy-on-write a whiteout in the way goes first and comes back if `make` fails, so a
    /// refused create never uncovers what the layers below hold. Also says whether there was
    /// one.
    pub(crate) fn make_entry<T>(
        &self,
        ctx: &Context,
        dir: BorrowedFd<'_>,
        name: &CStr,
        make: impl FnMut() -> io::Result<T>,
    ) -> io::Result<(T, bool)> {
        let removed = self.view().opts.cow && self.remove_whiteout(&dir, name)?;
        match self.as_caller(ctx, &[dir], &[], Groups::OnRefusal, make) {
            Ok(t) => Ok((t, removed)),
            Err(e) => {
                if removed {
                    put_whiteout(&dir, name)?;
                }
                Err(e)
            }
        }
    }

    /// After `rel` was removed from the RW branches: a whiteout where an RO branch still has
    /// it, in the upper layer the create policy picks for its parent.
    pub(crate) fn whiteout_if_lower(&self, rel: &CStr) -> io::Result<()> {
        if !self.view().opts.cow || !self.lower_has(rel) {
            return Ok(());
        }
        let (parent, name) = split_parent(rel);
        let (_, dir_fd) = self.upper_dir(&parent)?;
        match put_whiteout(&dir_fd, &name) {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                if self.remove_whiteout(&dir_fd, &name)? {
                    put_whiteout(&dir_fd, &name)
                } else {
                    Err(e)
                }
            }
            r => r,
        }
    }

    /// Marks directory `name` in `dir` opaque (`trusted.overlay.opaque=y`): nothing of the
    /// layers below shows through it (a directory made where one was deleted).
    pub(crate) fn make_opaque(&self, dir: &impl AsFd, name: &CStr) -> io::Result<()> {
        let fd = beneath::open_path(dir.as_fd(), name)?;
        Ok(rustix::fs::setxattr(
            &beneath::proc_path(fd.as_fd()),
            OPAQUE,
            b"y",
            rustix::fs::XattrFlags::empty(),
        )?)
    }

    /// Removes the whiteouts in directory `rel` on every RW branch (so that rmdir of a
    /// directory that is empty in the union can remove its upper copies).
    pub(crate) fn clear_whiteouts(&self, rel: &CStr) -> io::Result<()> {
        for b in self
            .view()
            .branches
            .indices()
            .filter(|&b| !self.view().branches.is_ro(b))
        {
            let Ok(d) = self.dir_on(b, rel) else { continue };
            for e in beneath::list_dir(d.as_fd())? {
                let name = CString::new(e.name).expect("no NUL in a name");
                self.remove_whiteout(&d, &name)?;
            }
        }
        Ok(())
    }

    /// The names directory `rel` shows in the union (whiteouts and what they hide left out).
    fn visible_children(&self, rel: &CStr) -> io::Result<Vec<CString>> {
        let mut names: Vec<CString> = Vec::new();
        for b in self.view().branches.indices() {
            let Some(d) = self.find_on(b, rel) else {
                continue;
            };
            if d.st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                continue;
            }
            for e in beneath::list_dir(d.fd.as_fd())? {
                let name = CString::new(e.name).expect("no NUL in a name");
                if names.contains(&name) {
                    continue;
                }
                let child = super::found::join(rel.to_bytes(), name.to_bytes());
                if self.exists_anywhere(&child) {
                    names.push(name);
                }
            }
        }
        Ok(names)
    }

    /// Copies directory `rel` and everything the union shows in it up to an RW branch, and
    /// marks the copy opaque: it then holds the whole directory, which can be renamed as one
    /// (a directory with lower parts would otherwise leave them behind: overlayfs answers
    /// EXDEV there unless it records a redirect).
    pub(crate) fn copy_up_tree(&self, rel: &CStr) -> io::Result<()> {
        let f = self.search(Func::Getattr, rel)?;
        if self.view().branches.is_ro(f.branch) {
            self.copy_up(rel, &f)?;
        }
        for name in self.visible_children(rel)? {
            let child = super::found::join(rel.to_bytes(), name.to_bytes());
            let cf = self.search(Func::Getattr, &child)?;
            if cf.st.st_mode & libc::S_IFMT == libc::S_IFDIR {
                self.copy_up_tree(&child)?;
            } else if self.view().branches.is_ro(cf.branch) {
                self.copy_up(&child, &cf)?;
            }
        }
        let (parent, name) = split_parent(rel);
        let pd = self.dir_on(
            self.view()
                .branches
                .indices()
                .find(|&b| !self.view().branches.is_ro(b) && self.dir_on(b, rel).is_ok())
                .ok_or_else(|| errno(libc::EROFS))?,
            &parent,
        )?;
        self.make_opaque(&pd, &name)
    }

    /// A hard-linked base file whose other name was already copied up to `branch`: links
    /// `name` in `dir` to that copy, so the names stay one file; whether it did.
    fn link_to_copy(
        &self,
        f: &Found,
        branch: BranchId,
        dir: &impl AsFd,
        name: &CStr,
    ) -> io::Result<bool> {
        let known = self.copied_up.copy_of((f.st.st_dev, f.st.st_ino));
        let Some((b, other)) = known else {
            return Ok(false);
        };
        if b != branch {
            return Ok(false);
        }
        let Some(copy) = self.find_on(b, &other) else {
            return Ok(false);
        };
        self.remove_whiteout(dir, name)?;
        rustix::fs::linkat(
            rustix::fs::CWD,
            &beneath::proc_path(copy.fd.as_fd()),
            dir,
            name,
            AtFlags::SYMLINK_FOLLOW,
        )?;
        Ok(true)
    }

    /// Whether `f`, found on a base branch, is a hard-linked file another name of which was
    /// already copied up (so this name must be linked to that copy too).
    pub(crate) fn has_copied_alias(&self, f: &Found) -> bool {
        f.st.st_nlink > 1
            && f.st.st_mode & libc::S_IFMT == libc::S_IFREG
            && self.copied_up.copy_of((f.st.st_dev, f.st.st_ino)).is_some()
    }
}

/// An overlayfs whiteout (a 0/0 character device) at `name` in `dir`, made by the daemon.
fn put_whiteout(dir: &impl AsFd, name: &CStr) -> io::Result<()> {
    Ok(rustix::fs::mknodat(
        dir,
        name,
        FileType::CharacterDevice,
        Mode::empty(),
        0,
    )?)
}

/// Where each hard-linked base file was copied up (its host identity to its upper branch and
/// path), so that its other names are linked to that copy instead of copied again.
#[derive(Default)]
pub(crate) struct CopiedUp(
    std::sync::Mutex<std::collections::HashMap<(u64, u64), (BranchId, CString)>>,
);

impl CopiedUp {
    /// The base file `base` (dev, ino) was copied to `rel` on branch `branch`.
    pub(crate) fn record(&self, base: (u64, u64), branch: BranchId, rel: &CStr) {
        self.0.locked().insert(base, (branch, rel.to_owned()));
    }

    /// Where `base` was copied up, if it was.
    pub(crate) fn copy_of(&self, base: (u64, u64)) -> Option<(BranchId, CString)> {
        self.0.locked().get(&base).cloned()
    }

    /// Every copy, for a session image.
    pub(crate) fn all(&self) -> Vec<((u64, u64), BranchId, CString)> {
        let map = self.0.locked();
        map.iter().map(|(k, (b, p))| (*k, *b, p.clone())).collect()
    }

    /// Replaces every copy with `copies` (a session taken over).
    pub(crate) fn replace(
        &self,
        copies: impl IntoIterator<Item = ((u64, u64), BranchId, CString)>,
    ) {
        let mut map = self.0.locked();
        map.clear();
        map.extend(copies.into_iter().map(|(k, b, p)| (k, (b, p))));
    }
}
