//! `moveonenospc`: when a write fails with ENOSPC or EDQUOT, the file is moved to a branch the
//! configured policy picks (never the one it is on), with its data, mode, owner, times and
//! xattrs, and the open handle is switched to the new copy so the write can be retried. No
//! byte already written is lost: the copy is complete before the original is unlinked.

use crate::fs::call::Call;
use crate::sync::LockRecover;
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{AtFlags, Gid, Mode, OFlags, Uid};

use super::errno;
use super::found::split_parent;
use super::handle::FileHandle;
use crate::sys::{beneath, file::replace_fd};
use crate::union::policy::Category;
use crate::union::BranchMode;

/// Whether `e` is the kind of failure `moveonenospc` reacts to.
pub(crate) fn is_out_of_space(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

impl Call<'_> {
    /// Moves the file behind handle `h` to another branch; the handle refers to the new copy
    /// afterwards. Fails (and changes nothing) if no other branch qualifies.
    pub(crate) fn move_on_enospc(&self, h: &FileHandle) -> io::Result<()> {
        let policy = self
            .view()
            .opts
            .moveonenospc
            .ok_or_else(|| errno(libc::ENOSPC))?;
        let _one_at_a_time = self.moves.locked();
        // The file's first copy moves to another branch.
        let _memo = self.lookup_memo.changing_everywhere();
        let from = h.branch();
        let rel = self.inodes.path(h.inode)?;
        let (parent, name) = split_parent(&rel);
        // The current branch must not be chosen again: present it as read-only to the policy.
        let probe = super::probe::OpeningProbe::new(self, &parent);
        let mut infos = probe.infos().to_vec();
        if let Some(pos) = probe.position(from) {
            infos[pos].mode = BranchMode::RO;
        }
        let to = probe.id(*policy
            .select(Category::Create, &infos, parent.to_bytes(), &probe)
            .map_err(errno)?
            .first()
            .ok_or_else(|| errno(libc::ENOSPC))?);
        if self.open_on(to, &parent).is_err() {
            self.clone_path(from, to, &parent)?;
        }
        // The copy is made from the handle's own file, never from whatever now sits at its
        // path (a guest can make the two drift apart; the path might name a FIFO or a device).
        let st = beneath::stat_fd(h.fd.as_fd())?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(errno(libc::ENOSPC));
        }
        let dir = self.dir_on(to, &parent)?;
        let tmp = copy_to_temp(&h.fd, &st, &dir, "moveonenospc")?;
        if let Err(e) = rustix::fs::renameat(&dir, &tmp, &dir, &name) {
            let _ = rustix::fs::unlinkat(&dir, &tmp, AtFlags::empty());
            return Err(e.into());
        }
        let new_path = self.open_on(to, &rel)?;
        let reopened = beneath::reopen(new_path.as_fd(), h.flags)?;
        replace_fd(reopened.as_fd(), h.fd.as_fd())?;
        h.moved(to);
        self.inodes.unbind(h.inode);
        // The old name goes only if it still is the file that was copied.
        let old_dir = self.dir_on(from, &parent)?;
        let same = beneath::stat_at(old_dir.as_fd(), &name)
            .is_ok_and(|o| (o.st_dev, o.st_ino) == (st.st_dev, st.st_ino));
        if same {
            rustix::fs::unlinkat(&old_dir, &name, AtFlags::empty())?;
        }
        log::info!(
            "moveonenospc: moved {} from branch {from} to branch {to}",
            rel.to_string_lossy()
        );
        Ok(())
    }
}

/// Creates a new hidden file in `dir` (never an existing one: `O_EXCL` with a random name that
/// stays short whatever the original's length) and returns it with its name.
fn create_temp(dir: &impl AsFd, purpose: &str, mode: u32) -> io::Result<(CString, OwnedFd)> {
    for _ in 0..16 {
        let name =
            CString::new(format!(".uvfs.{purpose}.{:016x}", fastrand::u64(..))).expect("no NUL");
        match beneath::open_beneath(
            dir.as_fd(),
            &name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
            Mode::from_raw_mode(mode & 0o7777),
        ) {
            Ok(fd) => return Ok((name, fd)),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(errno(libc::EEXIST))
}

/// Creates a temporary file in `dir` as a full copy of the file behind `src_path` (an `O_PATH`
/// descriptor with attributes `st`): data, mode, owner, xattrs and times; returns its name, for
/// the caller to rename into place. Removes it on failure.
pub(crate) fn copy_to_temp(
    src_path: &OwnedFd,
    st: &libc::stat64,
    dir: &impl AsFd,
    purpose: &str,
) -> io::Result<CString> {
    let src = beneath::reopen(src_path.as_fd(), OFlags::RDONLY)?;
    let (tmp, dst) = create_temp(dir, purpose, st.st_mode)?;
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
    if let Err(e) = copied {
        let _ = rustix::fs::unlinkat(dir, &tmp, AtFlags::empty());
        return Err(e);
    }
    Ok(tmp)
}

/// Copies all of `src` to `dst` (std picks copy_file_range, sendfile or read/write, whichever
/// works between the two filesystems).
fn copy_all(src: &OwnedFd, dst: &OwnedFd) -> io::Result<()> {
    let mut from = File::from(src.try_clone()?);
    let mut to = File::from(dst.try_clone()?);
    io::copy(&mut from, &mut to).map(drop)
}
