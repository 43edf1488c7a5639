//! SYNCFS: the guest's `syncfs(2)` (and `sync`) flushes every filesystem the union writes to.

use std::io;
use std::os::fd::AsFd;

use rustix::fs::OFlags;

use crate::fs::call::Call;
use crate::sys::beneath;

/// syncfs on each distinct filesystem under a branch that may be written (RW or NC); the
/// first error is reported after all were tried.
pub fn syncfs(fs: &Call<'_>) -> io::Result<()> {
    let mut done: Vec<u64> = Vec::new();
    let mut first_err = None;
    for (b, root) in fs.view().branches.roots() {
        if fs.view().branches.is_ro(b) || done.contains(&root.dev) {
            continue;
        }
        done.push(root.dev);
        let r = beneath::reopen(root.fd.as_fd(), OFlags::RDONLY | OFlags::DIRECTORY)
            .and_then(|d| crate::sys::file::syncfs(d.as_fd()));
        if let Err(e) = r {
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}
