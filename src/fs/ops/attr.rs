//! GETATTR, SETATTR, READLINK and ACCESS. Attribute changes go to every copy the action policy
//! selects; they reach the host inode through its `O_PATH` descriptor, never by re-walking a
//! path, so a symlink swapped in by a concurrent rename cannot redirect them.

use crate::fs::BranchId;
use std::ffi::CStr;
use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use fuse_backend_rs::abi::fuse_abi::{stat64, SetattrValid};
use fuse_backend_rs::api::filesystem::Context;
use rustix::fs::{AtFlags, Mode, OFlags, Timespec, Timestamps, UTIME_NOW, UTIME_OMIT};

use crate::fs::call::Call;
use crate::fs::caller::Groups;
use crate::fs::errno;
use crate::fs::ops::xattr::{clear_renamed_capability, clear_renamed_capability_through};
use crate::fs::options::Func;
use crate::fs::resolve::{split_parent, Found};
use crate::sys::{beneath, caps};
use crate::union::ErrnoFold;

fn is_type(st: &stat64, t: u32) -> bool {
    st.st_mode & libc::S_IFMT == t
}

/// Attributes of `inode`, from its open handle when the guest names one.
pub fn getattr(fs: &Call<'_>, inode: u64, handle: Option<u64>) -> io::Result<(stat64, Duration)> {
    if let Some(fh) = handle {
        if let Ok(h) = fs.handles.file(fh, inode) {
            let file = h.as_file()?;
            let st = beneath::stat_fd(file.fd.as_fd())?;
            let branch = file.branch();
            return Ok((fs.union_attr(st, b""), window(fs, branch, inode)));
        }
    }
    let f = fs.search_node(Func::Getattr, inode)?;
    Ok((shown(fs, inode, &f), window(fs, f.branch, inode)))
}

/// The attr window of `inode` found on `branch`: longer for a static node
/// (`fs/static_cache.rs`).
fn window(fs: &Call<'_>, branch: BranchId, inode: u64) -> Duration {
    fs.node_standing(branch, inode)
        .window(fs.view().opts.cache_attr)
}

/// The attributes the guest sees for `inode`, found as `f`.
fn shown(fs: &Call<'_>, inode: u64, f: &Found) -> stat64 {
    // The common case (one node, one fstat) builds no path.
    let rel = if fs.attr_needs_path(&f.st) {
        fs.node_rel(inode)
    } else {
        Default::default()
    };
    let mut st = fs.shown(f, &rel);
    fs.merge_dir_attrs(&mut st, &rel, f);
    fs.union_attr(st, rel.to_bytes())
}

/// Applies the changes `valid` selects to the copies of `inode` that each change's function
/// policy chooses (chmod, chown, truncate and utimens are separate mergerfs functions).
///
/// Each change is made as the caller (`fs::caller`), so the host checks its permission again
/// and clears set-user/group-ID as it would for that caller (chown, chmod into a group the
/// caller is not in, truncate).
pub fn setattr(
    fs: &Call<'_>,
    ctx: &Context,
    inode: u64,
    attr: stat64,
    handle: Option<u64>,
    valid: SetattrValid,
) -> io::Result<(stat64, Duration)> {
    let kill = valid.contains(SetattrValid::KILL_SUIDGID) && fs.view().opts.killpriv_v2;
    let valid = valid & !SetattrValid::KILL_SUIDGID;
    // ftruncate on an open file changes exactly that file.
    if valid == SetattrValid::SIZE {
        if let Some(fh) = handle {
            let h = fs.handles.file(fh, inode)?;
            let fd = h.as_file()?.fd.as_fd();
            let _killpriv = (kill
                && beneath::stat_fd(fd).is_ok_and(|st| caps::mode_has_privs(st.st_mode)))
            .then(caps::without_fsetid);
            clear_renamed_capability_through(fs.view(), h.as_file()?)?;
            fs.as_caller(ctx, &[], &[], Groups::OnRefusal, || {
                Ok(rustix::fs::ftruncate(fd, attr.st_size as u64)?)
            })?;
            return getattr(fs, inode, handle);
        }
    }
    // A node without a name (an open file that was unlinked) is changed through its own
    // descriptor; otherwise each change goes to the copies its policy selects.
    let rel = fs.inodes.path(inode);
    let times = SetattrValid::ATIME
        | SetattrValid::MTIME
        | SetattrValid::ATIME_NOW
        | SetattrValid::MTIME_NOW;
    let parts = [
        (SetattrValid::MODE, Func::Chmod),
        (SetattrValid::UID | SetattrValid::GID, Func::Chown),
        (SetattrValid::SIZE, Func::Truncate),
        (times, Func::Utimens),
    ];
    for (mask, func) in parts {
        if !valid.intersects(mask) {
            continue;
        }
        let mut fold = ErrnoFold::new();
        let (copies, rel) = match &rel {
            Ok(rel) => (fs.action(func, rel)?, rel.as_c_str()),
            Err(_) => (
                smallvec::smallvec![fs.search_node(Func::Getattr, inode)?],
                c"",
            ),
        };
        for f in copies {
            let _killpriv =
                (kill && mask == SetattrValid::SIZE && caps::mode_has_privs(f.st.st_mode))
                    .then(caps::without_fsetid);
            fold.add(&apply(fs, ctx, &f, rel, &attr, valid & mask));
        }
        fold.result_all()?;
    }
    getattr(fs, inode, None)
}

fn apply(
    fs: &Call<'_>,
    ctx: &Context,
    f: &Found,
    rel: &CStr,
    attr: &stat64,
    valid: SetattrValid,
) -> io::Result<()> {
    let symlink = is_type(&f.st, libc::S_IFLNK);
    if valid.contains(SetattrValid::MODE) {
        if symlink {
            return Err(errno(libc::EOPNOTSUPP));
        }
        // The host keeps set-group-ID only for a member of the file's group: the group joins
        // from the start (a guest caller in it through a supplementary group keeps the bit).
        fs.as_caller(ctx, &[f.fd.as_fd()], &[], Groups::Always, || {
            Ok(rustix::fs::chmod(
                &beneath::proc_path(f.fd.as_fd()),
                Mode::from_raw_mode(attr.st_mode & 0o7777),
            )?)
        })?;
    }
    if valid.intersects(SetattrValid::UID | SetattrValid::GID) {
        let uid = valid
            .contains(SetattrValid::UID)
            .then(|| rustix::fs::Uid::from_raw(attr.st_uid));
        let gid = valid
            .contains(SetattrValid::GID)
            .then(|| rustix::fs::Gid::from_raw(attr.st_gid));
        let new_group: &[u32] = if valid.contains(SetattrValid::GID) {
            std::slice::from_ref(&attr.st_gid)
        } else {
            &[]
        };
        fs.as_caller(ctx, &[], new_group, Groups::OnRefusal, || {
            Ok(rustix::fs::chownat(
                f.fd.as_fd(),
                c"",
                uid,
                gid,
                AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
            )?)
        })?;
        // Once the caller was allowed the change, as the kernel's chown clears the real name.
        if is_type(&f.st, libc::S_IFREG) {
            clear_renamed_capability(fs.view(), f.fd.as_fd())?;
        }
    }
    if valid.contains(SetattrValid::SIZE) {
        if is_type(&f.st, libc::S_IFDIR) {
            return Err(errno(libc::EISDIR));
        }
        if !is_type(&f.st, libc::S_IFREG) {
            return Err(errno(libc::EINVAL));
        }
        fs.as_caller(ctx, &[f.fd.as_fd()], &[], Groups::OnRefusal, || {
            let fd = beneath::reopen(f.fd.as_fd(), OFlags::WRONLY)?;
            Ok(rustix::fs::ftruncate(&fd, attr.st_size as u64)?)
        })?;
        clear_renamed_capability(fs.view(), f.fd.as_fd())?;
    }
    let times = SetattrValid::ATIME
        | SetattrValid::MTIME
        | SetattrValid::ATIME_NOW
        | SetattrValid::MTIME_NOW;
    if valid.intersects(times) {
        let ts = |set: SetattrValid, now: SetattrValid, sec: i64, nsec: i64| {
            if valid.contains(now) {
                Timespec {
                    tv_sec: 0,
                    tv_nsec: UTIME_NOW,
                }
            } else if valid.contains(set) {
                Timespec {
                    tv_sec: sec,
                    tv_nsec: nsec,
                }
            } else {
                Timespec {
                    tv_sec: 0,
                    tv_nsec: UTIME_OMIT,
                }
            }
        };
        let t = Timestamps {
            last_access: ts(
                SetattrValid::ATIME,
                SetattrValid::ATIME_NOW,
                attr.st_atime,
                attr.st_atime_nsec,
            ),
            last_modification: ts(
                SetattrValid::MTIME,
                SetattrValid::MTIME_NOW,
                attr.st_mtime,
                attr.st_mtime_nsec,
            ),
        };
        if symlink {
            // A symlink is reached through its parent and never followed.
            let (parent, name) = split_parent(rel);
            let dir = fs.dir_on(f.branch, &parent)?;
            fs.as_caller(ctx, &[f.fd.as_fd()], &[], Groups::OnRefusal, || {
                Ok(rustix::fs::utimensat(
                    &dir,
                    &name,
                    &t,
                    AtFlags::SYMLINK_NOFOLLOW,
                )?)
            })?;
        } else {
            fs.as_caller(ctx, &[f.fd.as_fd()], &[], Groups::OnRefusal, || {
                Ok(rustix::fs::utimensat(
                    rustix::fs::CWD,
                    &beneath::proc_path(f.fd.as_fd()),
                    &t,
                    AtFlags::empty(),
                )?)
            })?;
        }
    }
    Ok(())
}

/// The target of symlink `inode`.
pub fn readlink(fs: &Call<'_>, inode: u64) -> io::Result<Vec<u8>> {
    let f = fs.search_node(Func::Readlink, inode)?;
    let rel = fs.node_rel(inode);
    if fs.symlinkified(&f) {
        return Ok(fs.host_path(f.branch, &rel));
    }
    if !is_type(&f.st, libc::S_IFLNK) {
        return Err(errno(libc::EINVAL));
    }
    Ok(rustix::fs::readlinkat(f.fd.as_fd(), c"", Vec::new())?.into_bytes())
}

/// Checks `mask` (R_OK/W_OK/X_OK) for the caller; W_OK on a copy on an RO branch is EROFS.
pub fn access(fs: &Call<'_>, ctx: &Context, inode: u64, mask: u32) -> io::Result<()> {
    let f = fs.search_node(Func::Access, inode)?;
    if mask & libc::W_OK as u32 != 0 && fs.view().branches.is_ro(f.branch) {
        return Err(errno(libc::EROFS));
    }
    if mask == libc::F_OK as u32 || is_type(&f.st, libc::S_IFLNK) {
        return Ok(());
    }
    let access = rustix::fs::Access::from_bits_truncate(mask as i32);
    fs.as_caller(ctx, &[f.fd.as_fd()], &[], Groups::OnRefusal, || {
        Ok(rustix::fs::accessat(
            rustix::fs::CWD,
            &beneath::proc_path(f.fd.as_fd()),
            access,
            AtFlags::EACCESS,
        )?)
    })
}

pub use crate::fuse::StatxExtra as Extra;

/// Attributes of `inode` as [`getattr`] gives them, plus [`Extra`].
pub fn statx(
    fs: &Call<'_>,
    inode: u64,
    handle: Option<u64>,
) -> io::Result<(stat64, Duration, Extra)> {
    // One statx(2) gives both (GETATTR's fstat and a statx for the rest took three calls).
    let handle_fd = handle.and_then(|fh| fs.handles.file(fh, inode).ok());
    let (st, sx, timeout) = match &handle_fd {
        Some(h) => {
            let file = h.as_file()?;
            let sx = crate::sys::file::statx_fd(file.fd.as_fd())?;
            let branch = file.branch();
            let st = fs.union_attr(crate::sys::file::stat_of(&sx), b"");
            (st, sx, window(fs, branch, inode))
        }
        None => {
            let (f, sx) = fs.search_node_statx(Func::Getattr, inode)?;
            (shown(fs, inode, &f), sx, window(fs, f.branch, inode))
        }
    };
    let btime = (sx.stx_mask & libc::STATX_BTIME != 0)
        .then_some((sx.stx_btime.tv_sec, sx.stx_btime.tv_nsec));
    Ok((
        st,
        timeout,
        Extra {
            btime,
            attributes: sx.stx_attributes,
            attributes_mask: sx.stx_attributes_mask,
        },
    ))
}
