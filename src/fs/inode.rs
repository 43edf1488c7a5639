//! The inode table: FUSE node ids for union paths, with the kernel's lookup counts.
//!
//! The union is path-based (as mergerfs is): a node is a (parent, name) pair, and its host
//! location is found per request by resolving its path beneath each branch root. Renames move a
//! node by changing its parent and name; an unlinked node is detached but kept until the guest
//! forgets it. A node is freed when its lookup count reaches zero and no child node points to it,
//! so memory follows what the guest holds.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::{Arc, RwLock};

/// The FUSE root node id.
pub const ROOT_ID: u64 = 1;

struct Node {
    parent: u64,
    name: CString,
    lookups: u64,
    children: u64,
    linked: bool,
    /// (mtime, mtime_nsec, size) at the last open, for `cache.files=auto-full`.
    stamp: Option<(i64, i64, i64)>,
    /// The branch and `O_PATH` descriptor the node's last lookup found.
    bound: Option<(usize, Arc<OwnedFd>)>,
}

struct Inner {
    nodes: HashMap<u64, Node>,
    names: HashMap<(u64, CString), u64>,
    next_id: u64,
}

/// Maps FUSE node ids to union paths.
pub struct InodeTable {
    inner: RwLock<Inner>,
}

fn ebadf() -> io::Error {
    io::Error::from_raw_os_error(libc::EBADF)
}

impl Default for InodeTable {
    fn default() -> Self {
        Self::new()
    }
}

impl InodeTable {
    /// A table holding only the root.
    pub fn new() -> Self {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT_ID,
            Node {
                parent: ROOT_ID,
                name: CString::default(),
                lookups: 1,
                children: 0,
                linked: true,
                stamp: None,
                bound: None,
            },
        );
        InodeTable {
            inner: RwLock::new(Inner {
                nodes,
                names: HashMap::new(),
                next_id: ROOT_ID + 1,
            }),
        }
    }

    /// The union-relative path of `id` (`.` for the root), or EBADF for an unknown id and
    /// ENOENT for a node that has been unlinked or renamed over.
    pub fn path(&self, id: u64) -> io::Result<CString> {
        let inner = self.inner.read().unwrap();
        let mut parts: Vec<&CStr> = Vec::new();
        let mut cur = id;
        while cur != ROOT_ID {
            let n = inner.nodes.get(&cur).ok_or_else(ebadf)?;
            if !n.linked {
                return Err(io::Error::from_raw_os_error(libc::ENOENT));
            }
            parts.push(&n.name);
            cur = n.parent;
        }
        if parts.is_empty() {
            return Ok(c".".to_owned());
        }
        let mut out = Vec::with_capacity(parts.iter().map(|p| p.to_bytes().len() + 1).sum());
        for (i, p) in parts.iter().rev().enumerate() {
            if i > 0 {
                out.push(b'/');
            }
            out.extend_from_slice(p.to_bytes());
        }
        Ok(CString::new(out).expect("names never contain NUL"))
    }

    /// The path of the child `name` of `parent` (which need not be in the table).
    pub fn child_path(&self, parent: u64, name: &CStr) -> io::Result<CString> {
        Ok(super::resolve::join(
            self.path(parent)?.as_bytes(),
            name.to_bytes(),
        ))
    }

    /// Records one more guest lookup of `parent/name` and returns its node id.
    pub fn lookup(&self, parent: u64, name: &CStr) -> io::Result<u64> {
        let mut inner = self.inner.write().unwrap();
        if !inner.nodes.contains_key(&parent) {
            return Err(ebadf());
        }
        let key = (parent, name.to_owned());
        if let Some(&id) = inner.names.get(&key) {
            inner
                .nodes
                .get_mut(&id)
                .expect("names point at nodes")
                .lookups += 1;
            return Ok(id);
        }
        let id = inner.next_id;
        inner.next_id += 1;
        inner.nodes.get_mut(&parent).expect("checked").children += 1;
        inner.nodes.insert(
            id,
            Node {
                parent,
                name: key.1.clone(),
                lookups: 1,
                children: 0,
                linked: true,
                stamp: None,
                bound: None,
            },
        );
        inner.names.insert(key, id);
        Ok(id)
    }

    /// Drops `count` guest references to `id`; frees it (and parents that become unused).
    /// Unknown ids and over-large counts are ignored: the guest cannot make the table negative.
    pub fn forget(&self, id: u64, count: u64) {
        if id == ROOT_ID {
            return;
        }
        let mut inner = self.inner.write().unwrap();
        if let Some(n) = inner.nodes.get_mut(&id) {
            n.lookups = n.lookups.saturating_sub(count);
            Self::reap(&mut inner, id);
        }
    }

    fn reap(inner: &mut Inner, mut id: u64) {
        while id != ROOT_ID {
            let Some(n) = inner.nodes.get(&id) else {
                return;
            };
            if n.lookups > 0 || n.children > 0 {
                return;
            }
            let n = inner.nodes.remove(&id).expect("present");
            if n.linked {
                inner.names.remove(&(n.parent, n.name));
            }
            match inner.nodes.get_mut(&n.parent) {
                Some(p) => p.children -= 1,
                None => return,
            }
            id = n.parent;
        }
    }

    /// Detaches `parent/name` after an unlink or rmdir: the node lives on until forgotten, but
    /// no longer has a path.
    pub fn unlink(&self, parent: u64, name: &CStr) {
        let mut inner = self.inner.write().unwrap();
        if let Some(id) = inner.names.remove(&(parent, name.to_owned())) {
            inner
                .nodes
                .get_mut(&id)
                .expect("names point at nodes")
                .linked = false;
        }
    }

    /// Moves `oldp/oldn` to `newp/newn` after a rename, detaching whatever was at the target.
    pub fn rename(&self, oldp: u64, oldn: &CStr, newp: u64, newn: &CStr) {
        self.unlink(newp, newn);
        let mut inner = self.inner.write().unwrap();
        let Some(id) = inner.names.remove(&(oldp, oldn.to_owned())) else {
            return;
        };
        Self::relink(&mut inner, id, newp, newn);
    }

    /// Swaps `ap/an` and `bp/bn` after a RENAME_EXCHANGE.
    pub fn exchange(&self, ap: u64, an: &CStr, bp: u64, bn: &CStr) {
        let mut inner = self.inner.write().unwrap();
        let a = inner.names.remove(&(ap, an.to_owned()));
        let b = inner.names.remove(&(bp, bn.to_owned()));
        if let Some(a) = a {
            Self::relink(&mut inner, a, bp, bn);
        }
        if let Some(b) = b {
            Self::relink(&mut inner, b, ap, an);
        }
    }

    fn relink(inner: &mut Inner, id: u64, newp: u64, newn: &CStr) {
        let oldp = inner.nodes[&id].parent;
        if oldp != newp {
            if let Some(p) = inner.nodes.get_mut(&oldp) {
                p.children -= 1;
            }
            if let Some(p) = inner.nodes.get_mut(&newp) {
                p.children += 1;
            }
        }
        let n = inner.nodes.get_mut(&id).expect("present");
        n.parent = newp;
        n.name = newn.to_owned();
        inner.names.insert((newp, newn.to_owned()), id);
        Self::reap(inner, oldp);
    }

    /// The branch and descriptor `id` is bound to, if any.
    pub fn bound(&self, id: u64) -> Option<(usize, Arc<OwnedFd>)> {
        let inner = self.inner.read().unwrap();
        inner.nodes.get(&id).and_then(|n| n.bound.clone())
    }

    /// Binds `id` to what a lookup found (no-op for unknown ids).
    pub fn bind(&self, id: u64, branch: usize, fd: Arc<OwnedFd>) {
        if let Some(n) = self.inner.write().unwrap().nodes.get_mut(&id) {
            n.bound = Some((branch, fd));
        }
    }

    /// Forgets what `id` is bound to, after its file was replaced on the host.
    pub fn unbind(&self, id: u64) {
        if let Some(n) = self.inner.write().unwrap().nodes.get_mut(&id) {
            n.bound = None;
        }
    }

    /// Records `stamp` as `id`'s content stamp and returns the previous one.
    pub fn swap_stamp(&self, id: u64, stamp: (i64, i64, i64)) -> Option<(i64, i64, i64)> {
        let mut inner = self.inner.write().unwrap();
        inner
            .nodes
            .get_mut(&id)
            .and_then(|n| n.stamp.replace(stamp))
    }

    /// Number of nodes, root included (for tests and leak checks).
    pub fn len(&self) -> usize {
        self.inner.read().unwrap().nodes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_lookups_and_forget() {
        let t = InodeTable::new();
        let d = t.lookup(ROOT_ID, c"d").unwrap();
        let f = t.lookup(d, c"f").unwrap();
        assert_eq!(t.lookup(d, c"f").unwrap(), f);
        assert_eq!(t.path(f).unwrap().as_bytes(), b"d/f");
        assert_eq!(t.path(ROOT_ID).unwrap().as_bytes(), b".");
        // The parent stays while its child is referenced, even with no lookups of its own.
        t.forget(d, 1);
        assert_eq!(t.path(f).unwrap().as_bytes(), b"d/f");
        t.forget(f, 1);
        assert_eq!(t.len(), 3, "f was looked up twice");
        t.forget(f, 100);
        assert_eq!(t.len(), 1);
        assert_eq!(t.path(f).unwrap_err().raw_os_error(), Some(libc::EBADF));
        assert_eq!(
            t.lookup(999, c"x").unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
    }

    #[test]
    fn rename_unlink_exchange() {
        let t = InodeTable::new();
        let a = t.lookup(ROOT_ID, c"a").unwrap();
        let d = t.lookup(ROOT_ID, c"d").unwrap();
        let b = t.lookup(d, c"b").unwrap();
        t.rename(ROOT_ID, c"a", d, c"b");
        assert_eq!(t.path(a).unwrap().as_bytes(), b"d/b");
        assert_eq!(t.path(b).unwrap_err().raw_os_error(), Some(libc::ENOENT));
        let c = t.lookup(ROOT_ID, c"c").unwrap();
        t.exchange(ROOT_ID, c"c", d, c"b");
        assert_eq!(t.path(c).unwrap().as_bytes(), b"d/b");
        assert_eq!(t.path(a).unwrap().as_bytes(), b"c");
        t.unlink(ROOT_ID, c"c");
        assert!(t.path(a).is_err());
        for id in [a, b, c, d] {
            t.forget(id, 1);
        }
        assert_eq!(t.len(), 1);
    }
}
