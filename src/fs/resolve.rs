//! Finding entries on branches: runs the category's policy with a probe that opens paths
//! beneath each branch root (caching what it opened, so the chosen branch is not opened twice),
//! and turns host attributes into the union's (stable inode numbers unique across branches).

use std::cell::RefCell;
use std::collections::hash_map::DefaultHasher;
use std::ffi::{CStr, CString};
use std::hash::{Hash, Hasher};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use fuse_backend_rs::abi::fuse_abi::stat64;
use fuse_backend_rs::api::filesystem::Entry;

use super::{errno, UnionFs};
use crate::sys::beneath;
use crate::union::policy::Space;
use crate::union::{Category, Probe};

/// An entry found on one branch.
pub(crate) struct Found {
    /// The branch index.
    pub branch: usize,
    /// `O_PATH` descriptor of the entry (never followed if it is a symlink).
    pub fd: OwnedFd,
    /// Its host attributes.
    pub st: stat64,
}

/// A probe over the real branches that remembers what it opened for one path.
struct OpeningProbe<'a> {
    fs: &'a UnionFs,
    rel: &'a CStr,
    cache: RefCell<Vec<Option<Option<Found>>>>,
}

impl<'a> OpeningProbe<'a> {
    fn new(fs: &'a UnionFs, rel: &'a CStr) -> Self {
        let cache = RefCell::new((0..fs.roots.len()).map(|_| None).collect());
        OpeningProbe { fs, rel, cache }
    }

    fn open(&self, branch: usize) -> Option<Found> {
        let fd = beneath::open_path(self.fs.root(branch), self.rel).ok()?;
        let st = beneath::stat_fd(fd.as_fd()).ok()?;
        Some(Found { branch, fd, st })
    }

    fn take(&self, branch: usize) -> io::Result<Found> {
        let cached = self.cache.borrow_mut()[branch].take().flatten();
        cached
            .or_else(|| self.open(branch))
            .ok_or_else(|| errno(libc::ENOENT))
    }
}

impl Probe for OpeningProbe<'_> {
    fn space(&self, branch: usize) -> Option<Space> {
        let st = rustix::fs::fstatvfs(self.fs.root(branch)).ok()?;
        Some(Space {
            avail: st.f_bavail.saturating_mul(st.f_frsize),
            total: st.f_blocks.saturating_mul(st.f_frsize),
            readonly: st.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY),
        })
    }

    fn mtime(&self, branch: usize, rel: &[u8]) -> Option<i128> {
        let st = if rel == self.rel.to_bytes() && self.exists(branch, rel) {
            self.cache.borrow()[branch].as_ref()?.as_ref()?.st
        } else {
            let r = CString::new(rel).ok()?;
            beneath::stat_fd(beneath::open_path(self.fs.root(branch), &r).ok()?.as_fd()).ok()?
        };
        Some(i128::from(st.st_mtime) * 1_000_000_000 + i128::from(st.st_mtime_nsec))
    }

    fn random(&self, bound: u64) -> u64 {
        fastrand::u64(0..bound.max(1))
    }

    fn exists(&self, branch: usize, rel: &[u8]) -> bool {
        if rel != self.rel.to_bytes() {
            return CString::new(rel)
                .ok()
                .and_then(|r| beneath::open_path(self.fs.root(branch), &r).ok())
                .is_some();
        }
        let mut cache = self.cache.borrow_mut();
        cache[branch]
            .get_or_insert_with(|| self.open(branch))
            .is_some()
    }
}

/// Rejects names the guest must never send: empty, `.`, `..`, containing `/`, or too long.
pub(crate) fn check_name(name: &CStr) -> io::Result<()> {
    let b = name.to_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') {
        return Err(errno(libc::EINVAL));
    }
    if b.len() > 255 {
        return Err(errno(libc::ENAMETOOLONG));
    }
    Ok(())
}

/// Splits `a/b/c` into (`a/b`, `c`); a top-level name has parent `.`.
pub(crate) fn split_parent(rel: &CStr) -> (CString, CString) {
    let b = rel.to_bytes();
    match b.iter().rposition(|&c| c == b'/') {
        Some(i) => (
            CString::new(&b[..i]).expect("no NUL"),
            CString::new(&b[i + 1..]).expect("no NUL"),
        ),
        None => (c".".to_owned(), rel.to_owned()),
    }
}

fn hash_ino(parts: impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    parts.hash(&mut h);
    // Keep clear of 0 (invalid) and 1 (the root's number).
    h.finish().max(2)
}

/// Union inode number of the directory at union path `rel` (the root is 1).
pub(crate) fn dir_ino(rel: &[u8]) -> u64 {
    if rel == b"." {
        1
    } else {
        hash_ino(("dir", rel))
    }
}

/// Union inode number of a non-directory with host identity (`dev`, `ino`).
pub(crate) fn devino(dev: u64, ino: u64) -> u64 {
    hash_ino(("devino", dev, ino))
}

impl UnionFs {
    /// The `O_PATH` root descriptor of `branch`.
    pub(crate) fn root(&self, branch: usize) -> BorrowedFd<'_> {
        self.roots[branch].fd.as_fd()
    }

    /// Runs `policy` for `cat` on `rel`, returning what the probe opened for each chosen branch.
    fn select(&self, cat: Category, rel: &CStr) -> io::Result<Vec<Found>> {
        let policy = match cat {
            Category::Create => self.policies.create,
            Category::Search => self.policies.search,
            Category::Action => self.policies.action,
        };
        let probe = OpeningProbe::new(self, rel);
        let chosen = policy
            .select(cat, &self.infos, rel.to_bytes(), &probe)
            .map_err(errno)?;
        chosen.into_iter().map(|b| probe.take(b)).collect()
    }

    /// The entry at `rel` as the search policy finds it.
    pub(crate) fn search(&self, rel: &CStr) -> io::Result<Found> {
        let mut v = self.select(Category::Search, rel)?;
        Ok(v.swap_remove(0))
    }

    /// Every copy of `rel` the action policy chooses to change (EROFS if only RO copies exist).
    pub(crate) fn action(&self, rel: &CStr) -> io::Result<Vec<Found>> {
        self.select(Category::Action, rel)
    }

    /// The branch on which a new entry in directory `parent_rel` is created, with the `O_PATH`
    /// descriptor of that parent directory there.
    pub(crate) fn create_target(&self, parent_rel: &CStr) -> io::Result<Found> {
        let mut v = self.select(Category::Create, parent_rel)?;
        let f = v.swap_remove(0);
        if f.st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(errno(libc::ENOTDIR));
        }
        Ok(f)
    }

    /// Whether `rel` exists on any branch.
    pub(crate) fn exists_anywhere(&self, rel: &CStr) -> bool {
        (0..self.roots.len()).any(|b| beneath::open_path(self.root(b), rel).is_ok())
    }

    /// The `O_PATH` descriptor of directory `rel` on `branch`.
    pub(crate) fn dir_on(&self, branch: usize, rel: &CStr) -> io::Result<OwnedFd> {
        let fd = beneath::open_path(self.root(branch), rel)?;
        if beneath::stat_fd(fd.as_fd())?.st_mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(errno(libc::ENOTDIR));
        }
        Ok(fd)
    }

    /// The union inode number for a host entry: directories (which merge across branches) by
    /// their union path, everything else by host device and inode (mergerfs's hybrid-hash).
    pub(crate) fn union_ino(&self, st: &stat64, rel: &[u8]) -> u64 {
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            dir_ino(rel)
        } else {
            devino(st.st_dev, st.st_ino)
        }
    }

    /// Host attributes as the guest sees them.
    pub(crate) fn union_attr(&self, mut st: stat64, rel: &[u8]) -> stat64 {
        st.st_ino = self.union_ino(&st, rel);
        st
    }

    /// Records a guest lookup of `parent/name` found as `found` and builds the FUSE entry.
    pub(crate) fn make_entry(
        &self,
        parent: u64,
        name: &CStr,
        rel: &CStr,
        st: stat64,
    ) -> io::Result<Entry> {
        let inode = self.inodes.lookup(parent, name)?;
        Ok(Entry {
            inode,
            generation: 0,
            attr: self.union_attr(st, rel.to_bytes()),
            attr_flags: 0,
            attr_timeout: self.cfg.attr_timeout,
            entry_timeout: self.cfg.entry_timeout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_parents() {
        assert!(check_name(c"ok").is_ok());
        for bad in [c"", c".", c"..", c"a/b", c"/"] {
            assert_eq!(
                check_name(bad).unwrap_err().raw_os_error(),
                Some(libc::EINVAL)
            );
        }
        let long = CString::new(vec![b'x'; 256]).unwrap();
        assert_eq!(
            check_name(&long).unwrap_err().raw_os_error(),
            Some(libc::ENAMETOOLONG)
        );
        let (p, n) = split_parent(c"a/b/c");
        assert_eq!((p.as_bytes(), n.as_bytes()), (&b"a/b"[..], &b"c"[..]));
        let (p, n) = split_parent(c"c");
        assert_eq!((p.as_bytes(), n.as_bytes()), (&b"."[..], &b"c"[..]));
    }
}
