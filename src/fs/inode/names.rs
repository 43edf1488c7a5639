//! The name side of the node table: a lookup that finds or makes the node for a name, union
//! paths from names, removing and moving names (unlink, rename, exchange). Split from
//! `inode.rs` (same types, its private items).

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{err, Bind, Entry, Inner, InodeTable, Key, NameRef, Node, Rebind, ROOT_ID};
use crate::fs::BranchId;
use crate::sync::RwRecover;

impl Inner {
    /// See [`InodeTable::lookup`].
    pub(super) fn lookup(
        &mut self,
        parent: u64,
        name: &CStr,
        found: Bind,
        rebind: Rebind,
        max_nodes: usize,
    ) -> io::Result<u64> {
        if !self.nodes.contains_key(&parent) {
            return Err(err(libc::EBADF));
        }
        if let Some(&id) = self.names.get(&NameRef(parent, name)) {
            let n = self.nodes.get_mut(&id).expect("names point at nodes");
            if n.key == Some(found.key) {
                n.lookups += 1;
                // A closed node takes the descriptor the lookup just opened, if asked to.
                if rebind == Rebind::Yes && n.bound.as_ref().is_none_or(|h| h.fd.is_none()) {
                    self.hold(id, found);
                }
                return Ok(id);
            }
            if n.is_dir && found.is_dir {
                // A union directory is its path, not one host copy: when the policy finds
                // another copy now (a parent path cloned onto a branch earlier in the list, a
                // copy-up), it is the same directory, and its children keep their paths.
                let old = n.key.replace(found.key);
                n.lookups += 1;
                if old.is_some_and(|k| self.by_key.get(&k) == Some(&id)) {
                    self.by_key.remove(&old.expect("checked"));
                }
                self.by_key.entry(found.key).or_insert(id);
                self.hold(id, found);
                return Ok(id);
            }
            // Another object has this name now (it was replaced on the host).
            self.drop_name(&(parent, name.to_owned()));
        }
        let entry = (parent, name.to_owned());
        if let Some(&id) = self.by_key.get(&found.key) {
            let is_dir = self.nodes[&id].is_dir;
            // A directory found inside itself (a followed symlink) must not become its own
            // ancestor: it gets a node of its own below.
            if !(is_dir && self.is_ancestor_or_self(id, parent)) {
                if is_dir {
                    // A directory has one name: this one (it was moved on the host).
                    let old: Vec<Entry> = self.nodes[&id].names.clone();
                    self.nodes.get_mut(&id).expect("present").lookups += 1;
                    for e in &old {
                        self.drop_name(e);
                    }
                } else {
                    self.nodes.get_mut(&id).expect("present").lookups += 1;
                }
                self.add_name(entry, id);
                return Ok(id);
            }
        }
        let key = found.key;
        let id = self.new_node(found, max_nodes)?;
        self.by_key.entry(key).or_insert(id);
        self.add_name(entry, id);
        Ok(id)
    }

    /// Marks `id` used at `now`.
    pub(super) fn touch(&self, id: u64, now: u64) {
        if let Some(n) = self.nodes.get(&id) {
            n.used.store(now, Ordering::Relaxed);
        }
    }

    /// Renames entry `from` of node `id` to `to`, keeping its rank among the node's names.
    pub(super) fn move_name(&mut self, from: &Entry, to: Entry, id: u64) {
        self.names.remove(from);
        if let Some(p) = self.nodes.get_mut(&from.0) {
            p.children -= 1;
        }
        if let Some(p) = self.nodes.get_mut(&to.0) {
            p.children += 1;
        }
        if let Some(n) = self.nodes.get_mut(&id) {
            if let Some(slot) = n.names.iter_mut().find(|e| *e == from) {
                *slot = to.clone();
            }
        }
        self.names.insert(to, id);
        self.reap(from.0);
    }
}

impl InodeTable {
    /// The union-relative path of `id` (`.` for the root), or EBADF for an unknown id and
    /// ENOENT for a node (or an ancestor) that no longer has a name.
    pub fn path(&self, id: u64) -> io::Result<CString> {
        self.path_with(id, None)
    }

    /// The path of the child `name` of `parent` (which need not be in the table).
    pub fn child_path(&self, parent: u64, name: &CStr) -> io::Result<CString> {
        self.path_with(parent, Some(name))
    }

    /// [`InodeTable::path`] of `id`, with `child` appended: built in one allocation.
    fn path_with(&self, id: u64, child: Option<&CStr>) -> io::Result<CString> {
        let inner = self.inner.reading();
        let mut parts: smallvec::SmallVec<[&CStr; 16]> = smallvec::SmallVec::new();
        let mut cur = id;
        while cur != ROOT_ID {
            let n = inner.nodes.get(&cur).ok_or_else(|| err(libc::EBADF))?;
            let (parent, name) = n.names.first().ok_or_else(|| err(libc::ENOENT))?;
            parts.push(name);
            cur = *parent;
            if parts.len() > inner.nodes.len() {
                return Err(err(libc::ELOOP));
            }
        }
        if parts.is_empty() && child.is_none() {
            return Ok(c".".to_owned());
        }
        let len = parts
            .iter()
            .chain(&child)
            .map(|p| p.count_bytes() + 1)
            .sum();
        let mut out = Vec::with_capacity(len);
        for p in parts.iter().rev().chain(&child) {
            if !out.is_empty() {
                out.push(b'/');
            }
            out.extend_from_slice(p.to_bytes());
        }
        Ok(CString::new(out).expect("names never contain NUL"))
    }

    /// The node named `parent/name`, with the object it is bound to.
    pub fn child(&self, parent: u64, name: &CStr) -> Option<(u64, Key)> {
        let inner = self.inner.reading();
        let id = *inner.names.get(&NameRef(parent, name))?;
        Some((id, inner.nodes.get(&id)?.key?))
    }

    /// [`InodeTable::lookup`] when `parent/name` already names the node of object `key`
    /// found on `branch` as `fd`: one more guest reference, and its node. A node the table
    /// closed takes `fd` back if `rebind` says so and it was bound on `branch` (the same
    /// object there: its file handle stays, none is made again). `None` otherwise, for the
    /// full lookup.
    pub fn lookup_known(
        &self,
        parent: u64,
        name: &CStr,
        key: Key,
        found: (BranchId, &Arc<OwnedFd>),
        rebind: Rebind,
    ) -> Option<u64> {
        // Descriptors the trim closes are dropped after the table is let go.
        let mut closed = Vec::new();
        let mut inner = self.inner.writing();
        if self.panic_on.as_deref() == Some(name) {
            return None;
        }
        let id = *inner.names.get(&NameRef(parent, name))?;
        let n = inner.nodes.get_mut(&id)?;
        if n.key != Some(key) {
            return None;
        }
        match n.bound.as_mut() {
            Some(h) if h.fd.is_some() => {}
            _ if rebind == Rebind::No => {}
            Some(h) if h.branch == found.0 => {
                h.fd = Some(found.1.clone());
                inner.open.insert(id);
            }
            _ => return None,
        }
        let n = inner.nodes.get_mut(&id)?;
        n.lookups += 1;
        inner.touch(id, self.tick());
        inner.trim(&mut closed);
        Some(id)
    }

    /// Removes the name `parent/name` after an unlink or rmdir. The node keeps its other names
    /// and its descriptor, and lives on until forgotten.
    pub fn unlink(&self, parent: u64, name: &CStr) {
        let mut inner = self.inner.writing();
        inner.drop_name_ref(parent, name);
    }

    /// [`InodeTable::unlink`], the node first given the descriptor `kept` for its object
    /// (see [`InodeTable::reopened`]) if it has none: an unlinked node that the guest still
    /// holds stays usable. One pass over the table; the descriptor budget is trimmed by the
    /// next lookup (a node without a name is never closed).
    pub fn unlink_keeping(&self, parent: u64, name: &CStr, kept: Option<(u64, Key, Arc<OwnedFd>)>) {
        // A descriptor not taken is closed after the table is let go.
        let mut spare = None;
        let mut inner = self.inner.writing();
        if let Some((id, key, fd)) = kept {
            let slot = match inner.nodes.get_mut(&id) {
                Some(n) if n.key == Some(key) => n.bound.as_mut().map(|h| &mut h.fd),
                _ => None,
            };
            match slot {
                Some(slot @ None) => {
                    *slot = Some(fd);
                    inner.open.insert(id);
                }
                _ => spare = Some(fd),
            }
        }
        inner.drop_name_ref(parent, name);
        drop(inner);
        drop(spare);
    }

    /// EINVAL if moving `oldp/oldn` into directory `newp` would make a directory its own
    /// ancestor (checked before the host rename, whose own check cannot see union paths).
    pub fn check_move(&self, oldp: u64, oldn: &CStr, newp: u64) -> io::Result<()> {
        let inner = self.inner.reading();
        match inner.names.get(&NameRef(oldp, oldn)) {
            Some(&id) if inner.is_ancestor_or_self(id, newp) => Err(err(libc::EINVAL)),
            _ => Ok(()),
        }
    }

    /// Moves the name `oldp/oldn` to `newp/newn` after a rename; the name that was at the
    /// target goes (unless both named the same object, when rename(2) changes nothing).
    pub fn rename(&self, oldp: u64, oldn: &CStr, newp: u64, newn: &CStr) {
        let mut inner = self.inner.writing();
        let old = (oldp, oldn.to_owned());
        let new = (newp, newn.to_owned());
        let src = inner.names.get(&old).copied();
        if src.is_some() && src == inner.names.get(&new).copied() {
            return;
        }
        inner.drop_name(&new);
        if let Some(id) = src {
            inner.move_name(&old, new, id);
        }
    }

    /// Swaps the names `ap/an` and `bp/bn` after a RENAME_EXCHANGE.
    pub fn exchange(&self, ap: u64, an: &CStr, bp: u64, bn: &CStr) {
        let mut inner = self.inner.writing();
        let ea = (ap, an.to_owned());
        let eb = (bp, bn.to_owned());
        let a = inner.names.get(&ea).copied();
        let b = inner.names.get(&eb).copied();
        match (a, b) {
            (Some(a), Some(b)) if a == b => {}
            (Some(a), Some(b)) => {
                // Each parent keeps one entry: only the names swap.
                inner.names.insert(ea.clone(), b);
                inner.names.insert(eb.clone(), a);
                let swap = |n: &mut Node, from: &Entry, to: &Entry| {
                    if let Some(slot) = n.names.iter_mut().find(|e| *e == from) {
                        *slot = to.clone();
                    }
                };
                swap(inner.nodes.get_mut(&a).expect("named"), &ea, &eb);
                swap(inner.nodes.get_mut(&b).expect("named"), &eb, &ea);
            }
            (Some(a), None) => inner.move_name(&ea, eb, a),
            (None, Some(b)) => inner.move_name(&eb, ea, b),
            (None, None) => {}
        }
    }
}
