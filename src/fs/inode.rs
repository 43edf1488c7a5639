//! The node table: FUSE node ids for host objects, the names the guest knows them by, and the
//! kernel's lookup counts.
//!
//! A node is one host object, identified by the device and inode number of the copy its lookup
//! found: hard links to a file share one node. A node holds its object by an `O_PATH`
//! descriptor while it is in use; the table keeps at most `capacity` such descriptors and
//! closes those of the least recently used nodes beyond it, which are then reopened by their
//! file handle (when the daemon uses handles) or by their path, checked against their device
//! and inode number (see [`Bound`]). A node with no name left (an open-unlinked file) is never
//! closed: nothing could find its object again, so it stays usable until the guest forgets it.
//! Union operations that need a path on other branches use the node's names, kept as a tree
//! of (parent, name) entries that rename and unlink update. A rename can never make a
//! directory its own ancestor, so every path walk ends at the root. A node is freed when
//! its lookup count reaches zero and no entry names it as parent, so memory follows what the
//! guest holds. This module does no I/O.

use crate::fs::BranchId;
use crate::sync::RwRecover;
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::sys::handle::FileHandle;

mod image;
mod names;
pub use image::NodeRecord;

/// The FUSE root node id.
pub const ROOT_ID: u64 = 1;

/// A host object's identity: (`st_dev`, `st_ino`).
pub type Key = (u64, u64);

/// What a lookup found for a name: the object's identity and the descriptor to bind.
pub struct Bind {
    /// The branch the object is on.
    pub branch: BranchId,
    /// Its `O_PATH` descriptor.
    pub fd: Arc<OwnedFd>,
    /// Its identity.
    pub key: Key,
    /// Whether it is a directory (a directory has at most one name).
    pub is_dir: bool,
    /// Its file handle, when the daemon uses handles and the filesystem makes one.
    pub handle: Option<Arc<FileHandle>>,
}

/// How a node holds its object now.
#[derive(Clone)]
pub enum Bound {
    /// By an open `O_PATH` descriptor, on this branch.
    Open(BranchId, Arc<OwnedFd>),
    /// Its object was not found again after a migration: EIO.
    Lost,
    /// Closed to stay within the table's capacity: reopen it by `handle`, or without one by
    /// the node's path on `branch`, and check that it is still `key`.
    Closed {
        /// The branch the object is on.
        branch: BranchId,
        /// Its file handle, if it has one.
        handle: Option<Arc<FileHandle>>,
        /// Its identity.
        key: Key,
    },
}

/// Whether a lookup that finds its node closed (its descriptor closed by the table's limit)
/// gives it the descriptor the lookup opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rebind {
    /// Yes: the guest looked the name up to use it (LOOKUP, a create).
    Yes,
    /// No: a listing (READDIRPLUS) names many entries the guest may never touch; reopening
    /// each would push the nodes in use out of the table's descriptor budget.
    No,
}

/// A node's object: its branch, its descriptor while open, its handle.
struct Hold {
    branch: BranchId,
    fd: Option<Arc<OwnedFd>>,
    handle: Option<Arc<FileHandle>>,
}

type Entry = (u64, CString);

/// The name table: entry to node, looked up by a borrowed name ([`NameRef`]) with no copy.
type Names = hashbrown::HashMap<Entry, u64, foldhash::fast::RandomState>;

/// A borrowed [`Entry`], hashing and comparing as the owned one does (a `CString` hashes its
/// bytes with the NUL, as a `CStr` does).
#[derive(Hash)]
struct NameRef<'a>(u64, &'a CStr);

impl hashbrown::Equivalent<Entry> for NameRef<'_> {
    fn equivalent(&self, key: &Entry) -> bool {
        self.0 == key.0 && self.1 == key.1.as_c_str()
    }
}

struct Node {
    /// The names the guest reached this node by; the first is the path union operations use.
    names: Vec<Entry>,
    lookups: u64,
    /// Number of entries whose parent is this node.
    children: u64,
    key: Option<Key>,
    is_dir: bool,
    /// (mtime, mtime_nsec, size) at the last open, for `cache.files=auto-full`.
    stamp: Option<(i64, i64, i64)>,
    /// How the node's object is held.
    bound: Option<Hold>,
    /// When it was last used (the table's clock), for closing the least recently used.
    used: AtomicU64,
    /// Its object could not be found again after a migration (`--migration-on-error=
    /// guest-error`): operations on it answer EIO.
    lost: bool,
}

struct Inner {
    nodes: HashMap<u64, Node>,
    names: Names,
    by_key: HashMap<Key, u64>,
    next_id: u64,
    /// The nodes that hold an open descriptor.
    open: HashSet<u64>,
    /// How many of them may, before the least recently used are closed.
    capacity: usize,
    /// The next trim waits until this many are open: an eighth of the capacity above what
    /// the last trim left, which may be above the capacity where nodes without a name hold
    /// most descriptors (so that every new descriptor does not scan the table again).
    trim_at: usize,
    /// Scans of the table by [`Inner::trim`] (for tests).
    trims: u64,
    /// Nodes freed since the allocator was last asked to give free memory back.
    freed: usize,
}

/// Maps FUSE node ids to host objects and union paths.
pub struct InodeTable {
    inner: RwLock<Inner>,
    /// Counts uses, to date them.
    clock: AtomicU64,
    /// Test hook: a lookup of this name panics holding the table's lock.
    panic_on: Option<CString>,
}

fn err(e: i32) -> io::Error {
    io::Error::from_raw_os_error(e)
}

impl Default for InodeTable {
    fn default() -> Self {
        Self::new()
    }
}

impl Inner {
    /// Whether `anc` is `id` or one of its ancestors (by first names). Bounded: a malformed
    /// tree answers true, which callers treat as "refuse".
    fn is_ancestor_or_self(&self, anc: u64, mut id: u64) -> bool {
        for _ in 0..=self.nodes.len() {
            if id == anc {
                return true;
            }
            if id == ROOT_ID {
                return false;
            }
            match self.nodes.get(&id).and_then(|n| n.names.first()) {
                Some((p, _)) => id = *p,
                None => return false,
            }
        }
        true
    }

    /// Adds `entry` as a name of `id`.
    fn add_name(&mut self, entry: Entry, id: u64) {
        if let Some(p) = self.nodes.get_mut(&entry.0) {
            p.children += 1;
        }
        self.nodes
            .get_mut(&id)
            .expect("caller checked")
            .names
            .push(entry.clone());
        self.names.insert(entry, id);
    }

    /// Removes name `entry` (if it names anything) and frees what became unused.
    fn drop_name(&mut self, entry: &Entry) {
        self.drop_name_ref(entry.0, &entry.1);
    }

    /// [`Inner::drop_name`] of `parent/name`, borrowed.
    fn drop_name_ref(&mut self, parent: u64, name: &CStr) {
        let Some(id) = self.names.remove(&NameRef(parent, name)) else {
            return;
        };
        if let Some(n) = self.nodes.get_mut(&id) {
            n.names
                .retain(|e| !(e.0 == parent && e.1.as_c_str() == name));
        }
        if let Some(p) = self.nodes.get_mut(&parent) {
            p.children -= 1;
        }
        self.reap(id);
        self.reap(parent);
    }

    /// A new node bound to `found`, with one guest lookup and no name yet; ENFILE when that
    /// would make more than `max_nodes`.
    fn new_node(&mut self, found: Bind, max_nodes: usize) -> io::Result<u64> {
        if self.nodes.len() >= max_nodes {
            return Err(err(libc::ENFILE));
        }
        let id = self.next_id;
        self.next_id += 1;
        self.nodes.insert(
            id,
            Node {
                names: Vec::new(),
                lookups: 1,
                children: 0,
                key: Some(found.key),
                is_dir: found.is_dir,
                stamp: None,
                bound: None,
                used: AtomicU64::new(0),
                lost: false,
            },
        );
        self.hold(id, found);
        Ok(id)
    }

    /// Binds node `id` to `found` (its descriptor counts as open).
    fn hold(&mut self, id: u64, found: Bind) {
        let Some(n) = self.nodes.get_mut(&id) else {
            return;
        };
        n.bound = Some(Hold {
            branch: found.branch,
            fd: Some(found.fd),
            handle: found.handle,
        });
        self.open.insert(id);
    }

    /// Closes the descriptors of the least recently used nodes beyond `capacity` (down to
    /// seven eighths of it, so that the work is done once per many new descriptors), except
    /// those of nodes without a name. The descriptors are moved to `closed`, for the caller to
    /// drop after it let go of the table.
    fn trim(&mut self, closed: &mut Vec<Arc<OwnedFd>>) {
        if self.open.len() <= self.capacity.max(self.trim_at) {
            return;
        }
        self.trim_lru(closed);
        self.trim_at = if self.open.len() <= self.capacity {
            0
        } else {
            self.open.len() + (self.capacity / 8).max(1)
        };
    }

    /// [`Inner::trim`]'s work: closes the least recently used named nodes' descriptors.
    fn trim_lru(&mut self, closed: &mut Vec<Arc<OwnedFd>>) {
        self.trims += 1;
        let mut old: Vec<(u64, u64)> = self
            .open
            .iter()
            .filter_map(|id| {
                let n = self.nodes.get(id)?;
                (!n.names.is_empty()).then(|| (n.used.load(Ordering::Relaxed), *id))
            })
            .collect();
        let excess = self.open.len() - self.capacity * 7 / 8;
        let excess = excess.min(old.len());
        if excess == 0 {
            return;
        }
        old.select_nth_unstable(excess - 1);
        for (_, id) in &old[..excess] {
            self.open.remove(id);
            if let Some(fd) = self
                .nodes
                .get_mut(id)
                .and_then(|n| n.bound.as_mut())
                .and_then(|h| h.fd.take())
            {
                closed.push(fd);
            }
        }
    }

    /// After nodes were freed: shrinks the tables once they are mostly empty (a quarter full
    /// or less, above a few hundred entries), so that a guest that held many nodes and forgot
    /// them leaves the daemon its size before. True if the memory freed since the last time
    /// is worth giving back to the system (the tables shrank, or a few hundred nodes went):
    /// the allocator keeps what was freed in the middle of its heaps otherwise.
    fn after_freeing(&mut self) -> bool {
        const FLOOR: usize = 512;
        const RELEASE_EVERY: usize = 256;
        let cap = self.nodes.capacity();
        if cap <= FLOOR || self.nodes.len() * 4 > cap {
            // A walk of the whole heap costs as much as the heap is large: not before as
            // many nodes went as are left (a steady create-and-delete load at 65,536 files
            // trims a dozen times, not 256).
            if self.freed < RELEASE_EVERY.max(self.nodes.len()) {
                return false;
            }
            self.freed = 0;
            return true;
        }
        self.freed = 0;
        let keep = (self.nodes.len() * 2).max(FLOOR / 2);
        self.nodes.shrink_to(keep);
        self.names.shrink_to(keep);
        self.by_key.shrink_to(keep);
        self.open.shrink_to(keep);
        log::debug!(
            "node table: {} nodes, room for {cap} -> {}",
            self.nodes.len(),
            self.nodes.capacity()
        );
        true
    }

    /// Frees `id` if unused, then any parent that became unused.
    fn reap(&mut self, id: u64) {
        let mut work: smallvec::SmallVec<[u64; 4]> = smallvec::smallvec![id];
        while let Some(id) = work.pop() {
            if id == ROOT_ID {
                continue;
            }
            let Some(n) = self.nodes.get(&id) else {
                continue;
            };
            if n.lookups > 0 || n.children > 0 {
                continue;
            }
            let n = self.nodes.remove(&id).expect("present");
            self.freed += 1;
            self.open.remove(&id);
            if let Some(k) = n.key {
                if self.by_key.get(&k) == Some(&id) {
                    self.by_key.remove(&k);
                }
            }
            for e in n.names {
                self.names.remove(&e);
                if let Some(p) = self.nodes.get_mut(&e.0) {
                    p.children -= 1;
                    work.push(e.0);
                }
            }
        }
    }
}

impl InodeTable {
    /// A table holding only the root, whose nodes keep their descriptors open.
    pub fn new() -> Self {
        Self::with_capacity(usize::MAX)
    }

    /// A table holding only the root that keeps at most about `capacity` node descriptors
    /// open.
    pub fn with_capacity(capacity: usize) -> Self {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT_ID,
            Node {
                names: Vec::new(),
                lookups: 1,
                children: 0,
                key: None,
                is_dir: true,
                stamp: None,
                bound: None,
                used: AtomicU64::new(0),
                lost: false,
            },
        );
        InodeTable {
            inner: RwLock::new(Inner {
                nodes,
                names: Names::default(),
                by_key: HashMap::new(),
                next_id: ROOT_ID + 1,
                open: HashSet::new(),
                capacity: capacity.max(1),
                trim_at: 0,
                trims: 0,
                freed: 0,
            }),
            clock: AtomicU64::new(1),
            panic_on: None,
        }
    }

    /// Makes a lookup of `name` panic while it holds the table's lock (a test of the
    /// lock-poisoning policy, `--test-panic-on-lookup`).
    pub fn panic_on_lookup(mut self, name: Option<CString>) -> Self {
        self.panic_on = name;
        self
    }

    /// Whether `id` is a directory's node.
    pub fn is_dir(&self, id: u64) -> bool {
        let inner = self.inner.reading();
        inner.nodes.get(&id).is_some_and(|n| n.is_dir)
    }

    /// Whether `id` is a known node that still has a name (the root always has).
    pub fn linked(&self, id: u64) -> bool {
        let inner = self.inner.reading();
        id == ROOT_ID || inner.nodes.get(&id).is_some_and(|n| !n.names.is_empty())
    }

    /// Records one more guest lookup of `parent/name`, found as `found`, and returns its node:
    /// the node already bound to that object when there is one (a hard link, or the same
    /// name again), else a new node; ENFILE when that would make more than `max_nodes`.
    /// A name that pointed at another object is moved off it.
    pub fn lookup(
        &self,
        parent: u64,
        name: &CStr,
        found: Bind,
        rebind: Rebind,
        max_nodes: usize,
    ) -> io::Result<u64> {
        let mut closed = Vec::new();
        let mut inner = self.inner.writing();
        if self.panic_on.as_deref() == Some(name) {
            panic!("--test-panic-on-lookup: a lookup of {name:?} panics holding the node table");
        }
        let r = inner.lookup(parent, name, found, rebind, max_nodes);
        if let Ok(id) = r {
            inner.touch(id, self.tick());
        }
        inner.trim(&mut closed);
        r
    }

    /// Moves the node bound to host object `old` (if any) onto the object `new` found as
    /// `found` (a copy-up replaced one by the other).
    pub fn rebind(&self, old: Key, found: Bind) {
        let mut closed = Vec::new();
        let mut inner = self.inner.writing();
        let Some(id) = inner.by_key.remove(&old) else {
            return;
        };
        let new = found.key;
        if let Some(n) = inner.nodes.get_mut(&id) {
            n.key = Some(new);
        }
        inner.hold(id, found);
        inner.by_key.insert(new, id);
        inner.touch(id, self.tick());
        inner.trim(&mut closed);
    }

    /// The next date of the table's clock.
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    /// A node for an object that has no name yet (O_TMPFILE), with one guest lookup; ENFILE
    /// when that would make more than `max_nodes`. A later LINK names it.
    pub fn insert_unnamed(&self, found: Bind, max_nodes: usize) -> io::Result<u64> {
        let mut inner = self.inner.writing();
        let key = found.key;
        let id = inner.new_node(found, max_nodes)?;
        inner.by_key.insert(key, id);
        // Never closed while it has no name: nothing else could find its object.
        Ok(id)
    }

    /// Drops `count` guest references to `id`; frees it (and parents that become unused).
    /// Unknown ids and over-large counts are ignored: the guest cannot make the table negative.
    /// True if the allocator was then asked to give its free memory back.
    pub fn forget(&self, id: u64, count: u64) -> bool {
        if id == ROOT_ID {
            return false;
        }
        let release = {
            let mut inner = self.inner.writing();
            let Some(n) = inner.nodes.get_mut(&id) else {
                return false;
            };
            n.lookups = n.lookups.saturating_sub(count);
            inner.reap(id);
            inner.after_freeing()
        };
        if release {
            crate::sys::mem::release_free();
        }
        release
    }

    /// How `id` holds its object, if it is bound to one (and it counts as used now).
    pub fn bound(&self, id: u64) -> Option<Bound> {
        let inner = self.inner.reading();
        let n = inner.nodes.get(&id)?;
        if n.lost {
            return Some(Bound::Lost);
        }
        let h = n.bound.as_ref()?;
        n.used.store(self.tick(), Ordering::Relaxed);
        Some(match &h.fd {
            Some(fd) => Bound::Open(h.branch, fd.clone()),
            None => Bound::Closed {
                branch: h.branch,
                handle: h.handle.clone(),
                key: n.key?,
            },
        })
    }

    /// Gives closed node `id` the descriptor `fd` it was reopened with, if it is still bound
    /// to object `key` and closed; returns the descriptor it holds now.
    pub fn reopened(&self, id: u64, key: Key, fd: Arc<OwnedFd>) -> Arc<OwnedFd> {
        let mut closed = Vec::new();
        let mut inner = self.inner.writing();
        let Some(n) = inner.nodes.get_mut(&id) else {
            return fd;
        };
        if n.key != Some(key) {
            return fd;
        }
        let Some(h) = n.bound.as_mut() else {
            return fd;
        };
        let held = h.fd.get_or_insert(fd).clone();
        inner.open.insert(id);
        inner.touch(id, self.tick());
        inner.trim(&mut closed);
        held
    }

    /// Keeps at most about `capacity` node descriptors open from now on.
    pub fn set_capacity(&self, capacity: usize) {
        let mut closed = Vec::new();
        let mut inner = self.inner.writing();
        inner.capacity = capacity.max(1);
        inner.trim_at = 0;
        inner.trim(&mut closed);
    }

    /// How many node descriptors the table keeps open at most.
    pub fn capacity(&self) -> usize {
        self.inner.reading().capacity
    }

    /// How many nodes hold an open descriptor.
    pub fn open_fds(&self) -> usize {
        self.inner.reading().open.len()
    }

    /// Binds `id` to a (possibly new) host object (no-op for unknown ids).
    pub fn bind(&self, id: u64, found: Bind) {
        let mut closed = Vec::new();
        let mut inner = self.inner.writing();
        let key = found.key;
        inner.hold(id, found);
        inner.touch(id, self.tick());
        inner.trim(&mut closed);
        let Some(n) = inner.nodes.get_mut(&id) else {
            return;
        };
        let old = n.key.replace(key);
        if old != Some(key) {
            if let Some(k) = old {
                if inner.by_key.get(&k) == Some(&id) {
                    inner.by_key.remove(&k);
                }
            }
            if id != ROOT_ID {
                inner.by_key.insert(key, id);
            }
        }
    }

    /// Forgets what `id` is bound to, after its file was replaced on the host by this daemon.
    pub fn unbind(&self, id: u64) {
        let mut inner = self.inner.writing();
        if let Some(n) = inner.nodes.get_mut(&id) {
            n.bound = None;
        }
        inner.open.remove(&id);
    }

    /// Records `stamp` as `id`'s content stamp and returns the previous one.
    pub fn swap_stamp(&self, id: u64, stamp: (i64, i64, i64)) -> Option<(i64, i64, i64)> {
        let mut inner = self.inner.writing();
        inner
            .nodes
            .get_mut(&id)
            .and_then(|n| n.stamp.replace(stamp))
    }

    /// Closes the descriptors of the nodes that `close` picks, given each one's branch and
    /// whether it has a name (a node without one may have no other way back to its object).
    /// Returns how many were closed. Their descriptors go after the table's lock is released.
    pub fn close_where(&self, close: impl Fn(BranchId, bool) -> bool) -> usize {
        let mut closed = Vec::new();
        let mut inner = self.inner.writing();
        let Inner { nodes, open, .. } = &mut *inner;
        open.retain(|id| {
            let Some(n) = nodes.get_mut(id) else {
                return false;
            };
            let named = !n.names.is_empty();
            match n.bound.as_mut() {
                Some(h) if close(h.branch, named) => {
                    closed.extend(h.fd.take());
                    false
                }
                Some(h) => h.fd.is_some(),
                None => false,
            }
        });
        drop(inner);
        closed.len()
    }

    /// Forgets every node but the root (FUSE_DESTROY, device reset): their descriptors close.
    pub fn clear(&self) {
        let mut inner = self.inner.writing();
        let capacity = inner.capacity;
        *inner = InodeTable::with_capacity(capacity)
            .inner
            .into_inner()
            .unwrap();
    }

    /// Number of nodes, root included (for tests and leak checks).
    pub fn len(&self) -> usize {
        self.inner.reading().nodes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A descriptor to bind nodes to (what it names does not matter to the table).
    fn some_fd() -> Arc<OwnedFd> {
        Arc::new(
            rustix::fs::open(c"/", rustix::fs::OFlags::PATH, rustix::fs::Mode::empty()).unwrap(),
        )
    }

    fn bind(key: u64, is_dir: bool) -> Bind {
        Bind {
            branch: BranchId::from_raw(0),
            fd: some_fd(),
            key: (1, key),
            is_dir,
            handle: None,
        }
    }

    /// `n` nodes named `f0`… in the root, all bound to one descriptor.
    fn named_nodes(t: &InodeTable, n: u64) -> Vec<u64> {
        let fd = some_fd();
        (0..n)
            .map(|i| {
                let name = CString::new(format!("f{i}")).unwrap();
                let b = Bind {
                    fd: fd.clone(),
                    ..bind(100 + i, false)
                };
                t.lookup(ROOT_ID, &name, b, Rebind::Yes, usize::MAX)
                    .unwrap()
            })
            .collect()
    }

    fn is_open(t: &InodeTable, id: u64) -> bool {
        matches!(t.bound(id), Some(Bound::Open(..)))
    }

    #[test]
    fn the_tables_shrink_once_the_guest_forgets_most_nodes() {
        let t = InodeTable::new();
        let ids = named_nodes(&t, 20_000);
        let full = t.inner.reading().nodes.capacity();
        assert!(full >= 20_000);
        // Forgetting half leaves the tables as they are (no shrink and regrow on churn).
        for id in &ids[..10_000] {
            t.forget(*id, 1);
        }
        // (capacity() counts deleted slots out, so it moves a little without any shrink)
        assert!(t.inner.reading().nodes.capacity() > full / 2);
        for id in &ids[10_000..19_900] {
            t.forget(*id, 1);
        }
        let inner = t.inner.reading();
        assert_eq!(inner.nodes.len(), 101, "the root and 100 nodes");
        for cap in [
            inner.nodes.capacity(),
            inner.names.capacity(),
            inner.by_key.capacity(),
        ] {
            assert!(cap < full / 4, "{cap} of {full}");
        }
        drop(inner);
        // The nodes kept still resolve.
        assert!(t.bound(ids[19_950]).is_some());
    }

    #[test]
    fn freed_memory_goes_back_a_few_times_per_halving_and_at_the_end() {
        let t = InodeTable::new();
        let ids = named_nodes(&t, 16_384);
        let released: Vec<usize> = ids
            .iter()
            .enumerate()
            .filter(|(_, id)| t.forget(**id, 1))
            .map(|(i, _)| i)
            .collect();
        // Every 256 nodes would be 64 walks of the heap; as many as are left, about one per
        // halving of the table (and one per shrink of its maps).
        assert!(
            (4..=16).contains(&released.len()),
            "released after {released:?}"
        );
        assert!(released[0] >= 4_096, "released after {released:?}");
        // The last nodes' memory goes back too.
        assert!(
            *released.last().unwrap() >= 16_384 - 256,
            "released after {released:?}"
        );
    }

    #[test]
    fn the_least_recently_used_descriptors_close_and_unnamed_nodes_keep_theirs() {
        let t = InodeTable::with_capacity(8);
        let look = |range: std::ops::Range<u64>| -> Vec<u64> {
            range
                .map(|i| {
                    let name = CString::new(format!("f{i}")).unwrap();
                    t.lookup(
                        ROOT_ID,
                        &name,
                        bind(100 + i, false),
                        Rebind::Yes,
                        usize::MAX,
                    )
                    .unwrap()
                })
                .collect()
        };
        let ids = look(0..8);
        assert_eq!(t.open_fds(), 8);
        // f1 loses its last name: it may not be closed.
        t.unlink(ROOT_ID, c"f1");
        let more = look(8..20);
        assert!(t.open_fds() <= 8, "{}", t.open_fds());
        assert!(is_open(&t, ids[1]), "unnamed: never closed");
        assert!(is_open(&t, *more.last().unwrap()), "the newest stays");
        assert!(!is_open(&t, ids[2]), "an old one is closed");
        let Some(Bound::Closed { key, handle, .. }) = t.bound(ids[2]) else {
            panic!("closed");
        };
        assert_eq!((key, handle), ((1, 102), None));
        // Reopened: it holds the descriptor given, for its own object only.
        let fd = some_fd();
        assert!(Arc::ptr_eq(&t.reopened(ids[2], (1, 102), fd.clone()), &fd));
        assert!(is_open(&t, ids[2]));
        t.reopened(ids[3], (1, 999), some_fd());
        assert!(
            !is_open(&t, ids[3]),
            "another object's descriptor is not taken"
        );
        // A listing's lookup leaves a closed node closed (and takes a reference all the same);
        // a lookup proper gives it the descriptor it opened.
        let open = t.open_fds();
        let listed = t.lookup(ROOT_ID, c"f4", bind(104, false), Rebind::No, usize::MAX);
        assert_eq!(listed.unwrap(), ids[4]);
        assert!(!is_open(&t, ids[4]));
        assert_eq!(t.open_fds(), open);
        t.lookup(ROOT_ID, c"f4", bind(104, false), Rebind::Yes, usize::MAX)
            .unwrap();
        assert!(is_open(&t, ids[4]));
        t.forget(ids[4], 1);
        // Forgotten nodes take their descriptors along.
        for id in ids.iter().chain(&more) {
            t.forget(*id, 2);
        }
        assert_eq!((t.len(), t.open_fds()), (1, 0));
    }

    #[test]
    fn an_unlinked_node_keeps_the_descriptor_given_for_its_object() {
        let t = InodeTable::with_capacity(1);
        let a = t
            .lookup(ROOT_ID, c"a", bind(600, false), Rebind::Yes, usize::MAX)
            .unwrap();
        let b = t
            .lookup(ROOT_ID, c"b", bind(601, false), Rebind::Yes, usize::MAX)
            .unwrap();
        assert!(!is_open(&t, a), "closed by the limit");
        // Another object's descriptor is not taken; the name goes all the same.
        t.unlink_keeping(ROOT_ID, c"a", Some((a, (1, 999), some_fd())));
        assert!(!is_open(&t, a));
        assert_eq!(t.path(a).unwrap_err().raw_os_error(), Some(libc::ENOENT));
        // Its own object's is.
        let c = t
            .lookup(ROOT_ID, c"c", bind(602, false), Rebind::Yes, usize::MAX)
            .unwrap();
        assert!(!is_open(&t, b) || !is_open(&t, c));
        let closed = if is_open(&t, b) {
            (c, c"c", 602)
        } else {
            (b, c"b", 601)
        };
        t.unlink_keeping(
            ROOT_ID,
            closed.1,
            Some((closed.0, (1, closed.2), some_fd())),
        );
        assert!(is_open(&t, closed.0));
        assert_eq!(
            t.path(closed.0).unwrap_err().raw_os_error(),
            Some(libc::ENOENT)
        );
    }

    #[test]
    fn a_known_name_is_looked_up_without_binding() {
        let t = InodeTable::with_capacity(2);
        let ids: Vec<u64> = (0..4)
            .map(|i| {
                let name = CString::new(format!("k{i}")).unwrap();
                t.lookup(
                    ROOT_ID,
                    &name,
                    bind(500 + i, false),
                    Rebind::Yes,
                    usize::MAX,
                )
                .unwrap()
            })
            .collect();
        // k3 is open, k0 and k1 were closed by the limit.
        assert!(is_open(&t, ids[3]) && !is_open(&t, ids[0]) && !is_open(&t, ids[1]));
        let fd = some_fd();
        let on = |b| (BranchId::from_raw(b), &fd);
        assert_eq!(
            t.lookup_known(ROOT_ID, c"k3", (1, 503), on(0), Rebind::Yes),
            Some(ids[3])
        );
        assert_eq!(
            t.lookup_known(ROOT_ID, c"k0", (1, 500), on(0), Rebind::No),
            Some(ids[0])
        );
        assert!(!is_open(&t, ids[0]), "left closed");
        // Found on another branch than it was bound to: the full lookup binds it.
        assert_eq!(
            t.lookup_known(ROOT_ID, c"k0", (1, 500), on(1), Rebind::Yes),
            None
        );
        // On its own branch it takes the lookup's descriptor back.
        assert_eq!(
            t.lookup_known(ROOT_ID, c"k0", (1, 500), on(0), Rebind::Yes),
            Some(ids[0])
        );
        match t.bound(ids[0]) {
            Some(Bound::Open(_, held)) => assert!(Arc::ptr_eq(&held, &fd)),
            _ => panic!("k0 is not open"),
        }
        assert_eq!(
            t.lookup_known(ROOT_ID, c"k3", (1, 999), on(0), Rebind::No),
            None
        );
        assert_eq!(
            t.lookup_known(ROOT_ID, c"nope", (1, 503), on(0), Rebind::No),
            None
        );
        // Each answer was one more reference: k3 twice, k0 three times.
        t.forget(ids[3], 1);
        t.forget(ids[0], 2);
        assert!(t.bound(ids[3]).is_some() && t.bound(ids[0]).is_some());
        t.forget(ids[3], 1);
        t.forget(ids[0], 1);
        assert!(t.bound(ids[3]).is_none() && t.bound(ids[0]).is_none());
    }

    #[test]
    fn unnamed_nodes_over_capacity_do_not_make_every_descriptor_scan_the_table() {
        // Eighty unnamed nodes hold more descriptors than the capacity (64), and keep them.
        let t = InodeTable::with_capacity(1024);
        for i in 0..80u64 {
            let name = CString::new(format!("u{i}")).unwrap();
            t.lookup(
                ROOT_ID,
                &name,
                bind(200 + i, false),
                Rebind::Yes,
                usize::MAX,
            )
            .unwrap();
            t.unlink(ROOT_ID, &name);
        }
        t.set_capacity(64);
        assert_eq!(t.open_fds(), 80);
        // Named nodes come and go beyond them: at most an eighth of the capacity (8) above
        // what the last trim left stays open, and the table is scanned once per that many.
        let before = t.inner.reading().trims;
        for i in 0..100u64 {
            let name = CString::new(format!("n{i}")).unwrap();
            t.lookup(
                ROOT_ID,
                &name,
                bind(300 + i, false),
                Rebind::Yes,
                usize::MAX,
            )
            .unwrap();
            assert!(t.open_fds() <= 80 + 8, "{} open after n{i}", t.open_fds());
        }
        let scans = t.inner.reading().trims - before;
        assert!(
            (10..=13).contains(&scans),
            "{scans} scans for 100 new descriptors"
        );
    }

    #[test]
    fn paths_lookups_and_forget() {
        let t = InodeTable::new();
        let d = t
            .lookup(ROOT_ID, c"d", bind(10, true), Rebind::Yes, usize::MAX)
            .unwrap();
        let f = t
            .lookup(d, c"f", bind(11, false), Rebind::Yes, usize::MAX)
            .unwrap();
        assert_eq!(
            t.lookup(d, c"f", bind(11, false), Rebind::Yes, usize::MAX)
                .unwrap(),
            f
        );
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
            t.lookup(999, c"x", bind(12, false), Rebind::Yes, usize::MAX)
                .unwrap_err()
                .raw_os_error(),
            Some(libc::EBADF)
        );
    }

    #[test]
    fn hard_links_share_a_node_and_survive_unlink() {
        let t = InodeTable::new();
        let a = t
            .lookup(ROOT_ID, c"a", bind(20, false), Rebind::Yes, usize::MAX)
            .unwrap();
        let b = t
            .lookup(ROOT_ID, c"b", bind(20, false), Rebind::Yes, usize::MAX)
            .unwrap();
        assert_eq!(a, b);
        t.unlink(ROOT_ID, c"a");
        assert_eq!(t.path(a).unwrap().as_bytes(), b"b");
        t.unlink(ROOT_ID, c"b");
        assert!(!t.linked(a));
        assert_eq!(t.path(a).unwrap_err().raw_os_error(), Some(libc::ENOENT));
        assert!(
            t.bound(a).is_some(),
            "an unlinked node keeps its descriptor"
        );
        t.forget(a, 2);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn replaced_name_gets_a_new_node() {
        let t = InodeTable::new();
        let a = t
            .lookup(ROOT_ID, c"a", bind(30, false), Rebind::Yes, usize::MAX)
            .unwrap();
        let a2 = t
            .lookup(ROOT_ID, c"a", bind(31, false), Rebind::Yes, usize::MAX)
            .unwrap();
        assert_ne!(a, a2);
        assert!(!t.linked(a));
        assert_eq!(t.path(a2).unwrap().as_bytes(), b"a");
    }

    #[test]
    fn a_directory_found_on_another_branch_is_the_same_directory() {
        let t = InodeTable::new();
        let var = t
            .lookup(ROOT_ID, c"var", bind(40, true), Rebind::Yes, usize::MAX)
            .unwrap();
        let lib = t
            .lookup(var, c"lib", bind(41, true), Rebind::Yes, usize::MAX)
            .unwrap();
        // "var" is now found as another host directory (cloned onto an earlier branch).
        let again = t
            .lookup(ROOT_ID, c"var", bind(42, true), Rebind::Yes, usize::MAX)
            .unwrap();
        assert_eq!(again, var);
        assert_eq!(t.path(lib).unwrap().as_bytes(), b"var/lib");
        // Its new copy is what the node is known by; a file replacing it still gets a new node.
        assert_eq!(
            t.lookup(ROOT_ID, c"var", bind(42, true), Rebind::Yes, usize::MAX)
                .unwrap(),
            var
        );
        let file = t
            .lookup(ROOT_ID, c"var", bind(43, false), Rebind::Yes, usize::MAX)
            .unwrap();
        assert_ne!(file, var);
    }

    #[test]
    fn rename_unlink_exchange() {
        let t = InodeTable::new();
        let a = t
            .lookup(ROOT_ID, c"a", bind(1, false), Rebind::Yes, usize::MAX)
            .unwrap();
        let d = t
            .lookup(ROOT_ID, c"d", bind(2, true), Rebind::Yes, usize::MAX)
            .unwrap();
        let b = t
            .lookup(d, c"b", bind(3, false), Rebind::Yes, usize::MAX)
            .unwrap();
        t.rename(ROOT_ID, c"a", d, c"b");
        assert_eq!(t.path(a).unwrap().as_bytes(), b"d/b");
        assert_eq!(t.path(b).unwrap_err().raw_os_error(), Some(libc::ENOENT));
        let c = t
            .lookup(ROOT_ID, c"c", bind(4, false), Rebind::Yes, usize::MAX)
            .unwrap();
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

    #[test]
    fn rename_of_a_parent_moves_children_and_never_makes_a_cycle() {
        let t = InodeTable::new();
        let d = t
            .lookup(ROOT_ID, c"d", bind(1, true), Rebind::Yes, usize::MAX)
            .unwrap();
        let e = t
            .lookup(d, c"e", bind(2, true), Rebind::Yes, usize::MAX)
            .unwrap();
        let f = t
            .lookup(e, c"f", bind(3, false), Rebind::Yes, usize::MAX)
            .unwrap();
        t.rename(ROOT_ID, c"d", ROOT_ID, c"x");
        assert_eq!(t.path(f).unwrap().as_bytes(), b"x/e/f");
        assert_eq!(
            t.check_move(ROOT_ID, c"x", e).unwrap_err().raw_os_error(),
            Some(libc::EINVAL)
        );
        assert_eq!(
            t.check_move(ROOT_ID, c"x", d).unwrap_err().raw_os_error(),
            Some(libc::EINVAL)
        );
        assert!(t.check_move(d, c"e", ROOT_ID).is_ok());
        // The same directory found inside itself (a followed symlink) is a separate node.
        let inner = t
            .lookup(e, c"loop", bind(1, true), Rebind::Yes, usize::MAX)
            .unwrap();
        assert_ne!(inner, d);
        assert_eq!(t.path(d).unwrap().as_bytes(), b"x");
        // Renaming a hard link onto another name of the same file changes nothing.
        let h1 = t
            .lookup(ROOT_ID, c"h1", bind(9, false), Rebind::Yes, usize::MAX)
            .unwrap();
        let h2 = t
            .lookup(ROOT_ID, c"h2", bind(9, false), Rebind::Yes, usize::MAX)
            .unwrap();
        assert_eq!(h1, h2);
        t.rename(ROOT_ID, c"h1", ROOT_ID, c"h2");
        assert!(t.linked(h1));
        t.unlink(ROOT_ID, c"h1");
        assert_eq!(t.path(h1).unwrap().as_bytes(), b"h2");
    }
}
