//! The node table as records, for a session image: [`InodeTable::records`] lists every node
//! as the source holds it; [`InodeTable::restore`] replaces the table with nodes found again
//! on the destination, checking that the records make a table (a root, unique ids, parents
//! that exist). No I/O.

use crate::fs::BranchId;
use foldhash::{HashMap, HashMapExt, HashSet};
use std::ffi::CString;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use super::{err, Hold, InodeTable, Key, Node, ROOT_ID};
use crate::sync::RwRecover;
use crate::sys::handle::FileHandle;

/// How a record's node holds its object: its branch, its descriptor when open, its handle.
pub type HoldRecord = (BranchId, Option<Arc<OwnedFd>>, Option<Arc<FileHandle>>);

/// One node as the table holds it (or as a session import found it again: `hold` None for
/// a node not bound, or lost).
pub struct NodeRecord {
    /// Its id.
    pub id: u64,
    /// The guest's lookup count.
    pub lookups: u64,
    /// Its names, the first being its path.
    pub names: Vec<(u64, CString)>,
    /// Whether it is a directory.
    pub is_dir: bool,
    /// Its object's identity.
    pub key: Option<Key>,
    /// Its branch, descriptor (when open) and handle, when bound.
    pub hold: Option<HoldRecord>,
    /// Its content stamp.
    pub stamp: Option<(i64, i64, i64)>,
    /// Whether it was not found again in a migration: operations on it answer EIO.
    pub lost: bool,
}

impl InodeTable {
    /// Every node, root included, and the next free id.
    pub fn records(&self) -> (Vec<NodeRecord>, u64) {
        let inner = self.inner.reading();
        let mut out: Vec<NodeRecord> = inner
            .nodes
            .iter()
            .map(|(&id, n)| NodeRecord {
                id,
                lookups: n.lookups,
                names: n.names.clone(),
                is_dir: n.is_dir,
                key: n.key,
                hold: n
                    .bound
                    .as_ref()
                    .map(|h| (h.branch, h.fd.clone(), h.handle.clone())),
                stamp: n.stamp,
                lost: n.lost,
            })
            .collect();
        out.sort_unstable_by_key(|r| r.id);
        (out, inner.next_id)
    }

    /// Replaces every node with `nodes` (which must hold the root, each id once, every
    /// parent they name, each name once; else EINVAL and the table is unchanged); node ids
    /// continue from `next_id`.
    pub fn restore(&self, nodes: Vec<NodeRecord>, next_id: u64) -> io::Result<()> {
        let ids: HashSet<u64> = nodes.iter().map(|n| n.id).collect();
        if ids.len() != nodes.len() || !ids.contains(&ROOT_ID) {
            return Err(err(libc::EINVAL));
        }
        if nodes.iter().any(|n| n.id >= next_id) {
            return Err(err(libc::EINVAL));
        }
        let mut names = super::Names::default();
        let mut children: HashMap<u64, u64> = HashMap::new();
        for n in &nodes {
            for e in &n.names {
                let bad_parent = !ids.contains(&e.0) || e.0 == n.id;
                if bad_parent || n.id == ROOT_ID || names.insert(e.clone(), n.id).is_some() {
                    return Err(err(libc::EINVAL));
                }
                *children.entry(e.0).or_default() += 1;
            }
        }
        let mut closed = Vec::new();
        let mut inner = self.inner.writing();
        let capacity = inner.capacity;
        inner.nodes.clear();
        inner.names = names;
        inner.by_key.clear();
        inner.open.clear();
        inner.next_id = next_id;
        inner.capacity = capacity;
        for n in nodes {
            if n.id != ROOT_ID {
                if let Some(k) = n.key {
                    inner.by_key.entry(k).or_insert(n.id);
                }
            }
            if n.hold.as_ref().is_some_and(|h| h.1.is_some()) {
                inner.open.insert(n.id);
            }
            let bound = n
                .hold
                .map(|(branch, fd, handle)| Hold { branch, fd, handle });
            inner.nodes.insert(
                n.id,
                Node {
                    names: n.names,
                    lookups: n.lookups,
                    children: children.get(&n.id).copied().unwrap_or(0),
                    key: n.key,
                    is_dir: n.is_dir,
                    stamp: n.stamp,
                    bound,
                    used: AtomicU64::new(0),
                    lost: n.lost,
                },
            );
        }
        inner.trim(&mut closed);
        drop(inner);
        Ok(())
    }
}
