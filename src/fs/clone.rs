//! Path preservation: before a non-path-preserving create policy puts an entry on a branch that
//! lacks its parent directory, the parent path is cloned there from a branch that has it —
//! each missing directory made with the same mode, owner, times and xattrs (mergerfs's
//! clonepath). Runs with the daemon's own credentials, as mergerfs's clonepath_as_root does.

use crate::fs::BranchId;
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{AtFlags, Gid, Mode, Timespec, Timestamps, Uid, XattrFlags};

use super::errno;
use crate::fs::call::Call;
use crate::sys::beneath;

fn is_dir(st: &libc::stat64) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

/// Copies every xattr of `src` onto `dst`; filesystems without xattr support are not an error.
pub(crate) fn copy_xattrs(src: BorrowedFd<'_>, dst: BorrowedFd<'_>) -> io::Result<()> {
    let (sp, dp) = (beneath::proc_path(src), beneath::proc_path(dst));
    let len = match rustix::fs::listxattr_query(&sp) {
        Ok(n) => n,
        Err(rustix::io::Errno::NOTSUP) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let mut names = vec![0u8; len];
    let n = rustix::fs::listxattr(&sp, &mut names[..])?;
    for name in names[..n].split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let name = std::ffi::CString::new(name).expect("split at NUL");
        let size = rustix::fs::getxattr_query(&sp, &name)?;
        let mut value = vec![0u8; size];
        let m = rustix::fs::getxattr(&sp, &name, &mut value[..])?;
        match rustix::fs::setxattr(&dp, &name, &value[..m], XattrFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOTSUP) | Err(rustix::io::Errno::PERM) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The access and modification times of `st`, to put them on a copy.
pub(crate) fn times_of(st: &libc::stat64) -> Timestamps {
    Timestamps {
        last_access: Timespec {
            tv_sec: st.st_atime,
            tv_nsec: st.st_atime_nsec,
        },
        last_modification: Timespec {
            tv_sec: st.st_mtime,
            tv_nsec: st.st_mtime_nsec,
        },
    }
}

impl Call<'_> {
    /// Makes directory `rel` and its missing ancestors on branch `to`, copying each one's
    /// metadata from branch `from`.
    pub(crate) fn clone_path(&self, from: BranchId, to: BranchId, rel: &CStr) -> io::Result<()> {
        let bytes = rel.to_bytes();
        if bytes == b"." {
            return Ok(());
        }
        // Directories appear on a branch: absences noted anywhere beneath may be wrong.
        let _memo = self.lookup_memo.changing_everywhere();
        let ends = bytes
            .iter()
            .enumerate()
            .filter(|(_, &c)| c == b'/')
            .map(|(i, _)| i)
            .chain(std::iter::once(bytes.len()));
        let mut parent_end = None;
        // Times are restored last, deepest first: making a child bumps its parent's mtime.
        let mut made = Vec::new();
        for end in ends {
            let path = std::ffi::CString::new(&bytes[..end]).expect("no NUL");
            let start = parent_end.map_or(0, |p| p + 1);
            let name = std::ffi::CString::new(&bytes[start..end]).expect("no NUL");
            let parent = match parent_end {
                None => c".".to_owned(),
                Some(p) => std::ffi::CString::new(&bytes[..p]).expect("no NUL"),
            };
            parent_end = Some(end);
            if let Ok(fd) = self.open_on(to, &path) {
                if !is_dir(&beneath::stat_fd(fd.as_fd())?) {
                    return Err(errno(libc::ENOTDIR));
                }
                continue;
            }
            let src = self.open_on(from, &path)?;
            let st = beneath::stat_fd(src.as_fd())?;
            if !is_dir(&st) {
                return Err(errno(libc::ENOTDIR));
            }
            let pd = self.dir_on(to, &parent)?;
            match rustix::fs::mkdirat(&pd, &name, Mode::from_raw_mode(st.st_mode & 0o7777)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
            let dst = self.open_on(to, &path)?;
            let owner = (
                Some(Uid::from_raw(st.st_uid)),
                Some(Gid::from_raw(st.st_gid)),
            );
            // Best effort, as mergerfs: an unprivileged daemon cannot give directories away.
            let _ = rustix::fs::chownat(&dst, c"", owner.0, owner.1, AtFlags::EMPTY_PATH);
            copy_xattrs(src.as_fd(), dst.as_fd())?;
            made.push((dst, st));
        }
        for (dst, st) in made.iter().rev() {
            let times = times_of(st);
            let path = beneath::proc_path(dst.as_fd());
            rustix::fs::utimensat(rustix::fs::CWD, &path, &times, AtFlags::empty())?;
        }
        Ok(())
    }
}
