//! LOOKUP: find a name in a directory with the search policy and hand the guest a node for it.

use std::ffi::CStr;
use std::io;

use fuse_backend_rs::api::filesystem::Entry;

use crate::fs::options::Func;
use crate::fs::resolve::check_name;
use crate::fs::UnionFs;

/// Looks up `name` in `parent`; ENOENT if no branch has it.
pub fn lookup(fs: &UnionFs, parent: u64, name: &CStr) -> io::Result<Entry> {
    check_name(name)?;
    let rel = fs.inodes.child_path(parent, name)?;
    let found = fs.search(Func::Getattr, &rel)?;
    fs.make_entry(parent, name, &rel, found.st)
}
