//! LOOKUP: find a name in a directory with the getattr policy and hand the guest a node for it.
//! With `cache.negative-entry` set, a missing name is answered with a negative entry the guest
//! may cache for that long instead of ENOENT.

use std::ffi::CStr;
use std::io;

use fuse_backend_rs::api::filesystem::Entry;

use crate::fs::call::Call;
use crate::fs::inode::Rebind;
use crate::fs::options::Func;
use crate::fs::resolve::check_name;
use crate::sys::abi::zeroed_stat;

/// Looks up `name` in `parent`; ENOENT (or a negative entry) if no branch has it.
pub fn lookup(fs: &Call<'_>, parent: u64, name: &CStr) -> io::Result<Entry> {
    check_name(name)?;
    let rel = fs.inodes.child_path(parent, name)?;
    match fs.search(Func::Getattr, &rel) {
        Ok(found) => fs.entry_for(parent, name, &rel, &found, Rebind::Yes),
        Err(e)
            if e.raw_os_error() == Some(libc::ENOENT)
                && !fs.view().opts.cache_negative_entry.is_zero() =>
        {
            Ok(Entry {
                inode: 0,
                generation: 0,
                attr: zeroed_stat(),
                attr_flags: 0,
                attr_timeout: Default::default(),
                entry_timeout: fs.view().opts.cache_negative_entry,
            })
        }
        Err(e) => Err(e),
    }
}
