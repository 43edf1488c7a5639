//! STATFS: the union's capacity is the sum over its branches, each filesystem counted once (two
//! branches on one device are one pool of space). `statfs=full` counts only the branches on
//! which the queried path exists; `statfs-ignore=ro|nc` keeps those branches' size but not
//! their free space, as mergerfs does.

use std::collections::HashSet;
use std::io;
use std::os::fd::AsFd;

use fuse_backend_rs::abi::fuse_abi::statvfs64;
use rustix::fs::StatVfsMountFlags;

use crate::fs::call::Call;
use crate::fs::options::{StatfsIgnore, StatfsMode};
use crate::sys::abi::zeroed_statvfs;
use crate::union::BranchMode;

/// Summed capacity, in units of the first counted branch's fragment size.
pub fn statfs(fs: &Call<'_>, inode: u64) -> io::Result<statvfs64> {
    let rel = fs.inodes.path(inode)?;
    let view = fs.view();
    let opts = &view.opts;
    let mut seen = HashSet::new();
    let mut out = zeroed_statvfs();
    let (mut blocks, mut bfree, mut bavail) = (0u128, 0u128, 0u128);
    let mut namemax = u64::MAX;
    for (b, root) in view.branches.roots() {
        if opts.statfs == StatfsMode::Full && fs.open_on(b, &rel).is_err() {
            continue;
        }
        if !seen.insert(root.dev) {
            continue;
        }
        let st = rustix::fs::fstatvfs(root.as_fd())?;
        let readonly = st.f_flag.contains(StatVfsMountFlags::RDONLY);
        let ignore_free = match opts.statfs_ignore {
            StatfsIgnore::None => false,
            StatfsIgnore::Ro => readonly || view.branches.mode(b) != BranchMode::RW,
            StatfsIgnore::Nc => view.branches.mode(b) == BranchMode::NC,
        };
        if out.f_frsize == 0 {
            out.f_frsize = st.f_frsize.max(1);
            out.f_bsize = st.f_bsize.max(1);
        }
        let fr = u128::from(st.f_frsize);
        blocks += u128::from(st.f_blocks) * fr;
        if !ignore_free {
            bfree += u128::from(st.f_bfree) * fr;
            bavail += u128::from(st.f_bavail) * fr;
            out.f_ffree += st.f_ffree;
            out.f_favail += st.f_favail;
        }
        out.f_files += st.f_files;
        namemax = namemax.min(st.f_namemax);
    }
    let unit = u128::from(out.f_frsize.max(1));
    out.f_frsize = out.f_frsize.max(1);
    out.f_bsize = out.f_bsize.max(1);
    out.f_blocks = (blocks / unit) as u64;
    out.f_bfree = (bfree / unit) as u64;
    out.f_bavail = (bavail / unit) as u64;
    out.f_namemax = if namemax == u64::MAX { 255 } else { namemax };
    Ok(out)
}
