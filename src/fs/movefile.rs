//! `moveonenospc`: when a write fails with ENOSPC or EDQUOT, the file is moved to a branch the
//! configured policy picks (never the one it is on), with its data, mode, owner, times and
//! xattrs, and the open handle is switched to the new copy so the write can be retried. No
//! byte already written is lost: the copy is complete before the original is unlinked.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;

use rustix::fs::{AtFlags, Gid, Mode, OFlags, Uid};

use super::handle::FileHandle;
use super::resolve::split_parent;
use super::{errno, UnionFs};
use crate::sys::{beneath, file::replace_fd};
use crate::union::policy::Category;
use crate::union::BranchMode;

/// Whether `e` is the kind of failure `moveonenospc` reacts to.
pub(crate) fn is_out_of_space(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

impl UnionFs {
    /// Moves the file behind handle `h` to another branch; the handle refers to the new copy
    /// afterwards. Fails (and changes nothing) if no other branch qualifies.
    pub(crate) fn move_on_enospc(&self, h: &FileHandle) -> io::Result<()> {
        let policy = self
            .cfg
            .opts
            .moveonenospc
            .ok_or_else(|| errno(libc::ENOSPC))?;
        let _one_at_a_time = self.moves.lock().unwrap();
        let from = h.branch.load(Ordering::Acquire);
        let rel = self.inodes.path(h.inode)?;
        let (parent, name) = split_parent(&rel);
        // The current branch must not be chosen again: present it as read-only to the policy.
        let mut infos = self.infos.clone();
        infos[from].mode = BranchMode::RO;
        let probe = super::resolve::OpeningProbe::new(self, &parent);
        let to = *policy
            .select(Category::Create, &infos, parent.to_bytes(), &probe)
            .map_err(errno)?
            .first()
            .ok_or_else(|| errno(libc::ENOSPC))?;
        if self.open_on(to, &parent).is_err() {
            self.clone_path(from, to, &parent)?;
        }
        let src_path = self.open_on(from, &rel)?;
        let st = beneath::stat_fd(src_path.as_fd())?;
        let dir = self.dir_on(to, &parent)?;
        let tmp = temp_name(&name, "moveonenospc");
        copy_to_temp(&src_path, &st, &dir, &tmp)?;
        if let Err(e) = rustix::fs::renameat(&dir, &tmp, &dir, &name) {
            let _ = rustix::fs::unlinkat(&dir, &tmp, AtFlags::empty());
            return Err(e.into());
        }
        let new_path = self.open_on(to, &rel)?;
        let reopened = beneath::reopen(new_path.as_fd(), h.flags)?;
        replace_fd(reopened.as_fd(), h.fd.as_fd())?;
        h.branch.store(to, Ordering::Release);
        self.inodes.unbind(h.inode);
        let old_dir = self.dir_on(from, &parent)?;
        rustix::fs::unlinkat(&old_dir, &name, AtFlags::empty())?;
        log::info!(
            "moveonenospc: moved {} from branch {from} to branch {to}",
            rel.to_string_lossy()
        );
        Ok(())
    }
}

/// A hidden temporary name next to `name`, for `purpose`.
pub(crate) fn temp_name(name: &CStr, purpose: &str) -> CString {
    CString::new(format!(".{}.{purpose}", name.to_string_lossy())).expect("no NUL")
}

/// Creates `tmp` in `dir` as a full copy of the file behind `src_path` (an `O_PATH` descriptor
/// with attributes `st`): data, mode, owner, xattrs and times. Removes `tmp` on failure.
pub(crate) fn copy_to_temp(
    src_path: &OwnedFd,
    st: &libc::stat64,
    dir: &OwnedFd,
    tmp: &CStr,
) -> io::Result<()> {
    let src = beneath::reopen(src_path.as_fd(), OFlags::RDONLY)?;
    let dst = beneath::open_beneath(
        dir.as_fd(),
        tmp,
        OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC,
        Mode::from_raw_mode(st.st_mode & 0o7777),
    )?;
    let copied = copy_all(&src, &dst).and_then(|()| {
        let owner = (
            Some(Uid::from_raw(st.st_uid)),
            Some(Gid::from_raw(st.st_gid)),
        );
        // Best effort: an unprivileged daemon cannot give files away.
        let _ = rustix::fs::fchown(&dst, owner.0, owner.1);
        rustix::fs::fchmod(&dst, Mode::from_raw_mode(st.st_mode & 0o7777))?;
        super::clone::copy_xattrs(src_path.as_fd(), dst.as_fd())?;
        Ok(rustix::fs::futimens(&dst, &super::clone::times_of(st))?)
    });
    if copied.is_err() {
        let _ = rustix::fs::unlinkat(dir, tmp, AtFlags::empty());
    }
    copied
}

/// Copies all of `src` to `dst` (std picks copy_file_range, sendfile or read/write, whichever
/// works between the two filesystems).
fn copy_all(src: &OwnedFd, dst: &OwnedFd) -> io::Result<()> {
    let mut from = File::from(src.try_clone()?);
    let mut to = File::from(dst.try_clone()?);
    io::copy(&mut from, &mut to).map(drop)
}
