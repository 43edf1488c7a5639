//! The name side of the node table: a lookup that finds or makes the node for a name, and
//! moving a name (rename). Split from `inode.rs` (same types, its private items).

use std::ffi::CStr;
use std::io;
use std::sync::atomic::Ordering;

use super::{err, Bind, Entry, Inner, NameRef, Rebind};

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
