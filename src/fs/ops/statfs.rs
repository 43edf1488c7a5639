//! STATFS: the union's capacity is the sum over its branches, each filesystem counted once
//! (two branches on one device are one pool of space, as mergerfs's `statfs=base` counts it).

use std::collections::HashSet;
use std::io;

use fuse_backend_rs::abi::fuse_abi::statvfs64;

use crate::fs::UnionFs;
use crate::sys::abi::zeroed_statvfs;

/// Summed capacity, in units of the first branch's fragment size.
pub fn statfs(fs: &UnionFs, inode: u64) -> io::Result<statvfs64> {
    fs.inodes.path(inode)?;
    let mut seen = HashSet::new();
    let mut out = zeroed_statvfs();
    let (mut blocks, mut bfree, mut bavail) = (0u128, 0u128, 0u128);
    let mut namemax = u64::MAX;
    for (b, root) in fs.roots.iter().enumerate() {
        if !seen.insert(root.dev) {
            continue;
        }
        let st = rustix::fs::fstatvfs(fs.root(b))?;
        if out.f_frsize == 0 {
            out.f_frsize = st.f_frsize.max(1);
            out.f_bsize = st.f_bsize.max(1);
        }
        let fr = u128::from(st.f_frsize);
        blocks += u128::from(st.f_blocks) * fr;
        bfree += u128::from(st.f_bfree) * fr;
        bavail += u128::from(st.f_bavail) * fr;
        out.f_files += st.f_files;
        out.f_ffree += st.f_ffree;
        out.f_favail += st.f_favail;
        namemax = namemax.min(st.f_namemax);
    }
    let unit = u128::from(out.f_frsize);
    out.f_blocks = (blocks / unit) as u64;
    out.f_bfree = (bfree / unit) as u64;
    out.f_bavail = (bavail / unit) as u64;
    out.f_namemax = namemax;
    Ok(out)
}
