//! The branch set one request sees: each branch's root descriptor, the device it is on, its
//! mode and free-space floor, in branch order. A branch is named by an id that never changes
//! and is never reused: removing a branch leaves its id empty, adding one takes a new id, so
//! a node or handle that names a removed branch can never reach another branch's file. The
//! policies see modes and floors as a `&[BranchInfo]` slice in branch order (positions, not
//! ids); [`Branches::id_at`] turns a position back into an id.

use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

use crate::union::policy::BranchInfo;
use crate::union::{Branch, BranchMode};

/// A branch's id: given when the branch joins the union, kept while it stays, never given to
/// another branch. Not a position in branch order (a plain `usize`, what the policies
/// answer): [`Branches::id_at`] and [`Branches::position`] turn one into the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct BranchId(usize);

impl BranchId {
    /// The id numbered `n` where a number is all there is: a session image, a control
    /// request, a test.
    pub(crate) const fn from_raw(n: usize) -> Self {
        BranchId(n)
    }

    /// Its number, for a session image or a control reply.
    pub(crate) const fn raw(self) -> usize {
        self.0
    }
}

impl fmt::Display for BranchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// One branch's root.
pub(crate) struct Root {
    /// `O_PATH` descriptor of the branch directory; every guest path is resolved beneath it.
    pub(crate) fd: OwnedFd,
    /// Device of the branch root, to count each filesystem once (statfs, syncfs).
    pub(crate) dev: u64,
    /// The host path the branch was named by (control queries, absolute symlinks).
    pub(crate) path: PathBuf,
    /// Where its nodes' file handles are opened, when they use handles (worked out at first
    /// use).
    pub(crate) handle_mount: std::sync::OnceLock<Option<HandleMount>>,
}

impl AsFd for Root {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A branch root's filesystem as file handles need it.
pub(crate) struct HandleMount {
    /// The root opened for reading (open_by_handle_at takes no `O_PATH` descriptor).
    pub(crate) fd: OwnedFd,
    /// Its mount id: only handles made on that mount are opened there.
    pub(crate) id: i32,
}

/// Every branch of the union, as one snapshot.
#[derive(Clone)]
pub(crate) struct Branches {
    /// Roots by id; `None` where a branch was removed.
    slots: Vec<Option<Arc<Root>>>,
    /// Each id's mode (a removed branch keeps its last one, for the files still open there).
    modes: Vec<BranchMode>,
    /// Live ids in branch order.
    order: Vec<BranchId>,
    /// Mode and floor of each live branch, in branch order (what the policies see).
    infos: Vec<BranchInfo>,
    /// The branches as configured (path, mode, own floor), in branch order.
    specs: Vec<Branch>,
}

impl Branches {
    /// The set of `roots` configured as `specs` (the same length, in branch order), with
    /// `min_free` the floor of branches that name none: ids 0, 1, ….
    pub(crate) fn new(roots: Vec<Root>, specs: Vec<Branch>, min_free: u64) -> Self {
        assert_eq!(roots.len(), specs.len(), "one spec per root");
        let slots: Vec<_> = roots.into_iter().map(|r| Some(Arc::new(r))).collect();
        let order = (0..slots.len()).map(BranchId).collect();
        let mut b = Branches {
            modes: specs.iter().map(|s| s.mode).collect(),
            slots,
            order,
            infos: Vec::new(),
            specs,
        };
        b.refloor(min_free);
        b
    }

    /// Recomputes what the policies see after the global floor became `min_free`.
    pub(crate) fn refloor(&mut self, min_free: u64) {
        self.infos = self
            .specs
            .iter()
            .map(|s| BranchInfo {
                mode: s.mode,
                min_free: s.min_free.unwrap_or(min_free),
            })
            .collect();
    }

    /// A new set: `specs` in order, each either an existing id (its root kept, its mode and
    /// floor as given) or a new root. Ids not named are removed; new roots take new ids.
    pub(crate) fn edited(&self, next: Vec<(Branch, Reuse)>, min_free: u64) -> Self {
        let mut slots = self.slots.clone();
        let mut modes = self.modes.clone();
        let mut order = Vec::with_capacity(next.len());
        let mut specs = Vec::with_capacity(next.len());
        for (spec, reuse) in next {
            let id = match reuse {
                Reuse::Id(id) => id,
                Reuse::New(root) => {
                    slots.push(Some(Arc::new(root)));
                    modes.push(spec.mode);
                    BranchId(slots.len() - 1)
                }
            };
            modes[id.0] = spec.mode;
            order.push(id);
            specs.push(spec);
        }
        for (id, slot) in slots.iter_mut().enumerate() {
            if !order.contains(&BranchId(id)) {
                *slot = None;
            }
        }
        let mut b = Branches {
            slots,
            modes,
            order,
            infos: Vec::new(),
            specs,
        };
        b.refloor(min_free);
        b
    }

    /// Number of (live) branches.
    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }

    /// Every live branch id, in branch order.
    pub(crate) fn indices(&self) -> impl Iterator<Item = BranchId> + '_ {
        self.order.iter().copied()
    }

    /// One past the highest id ever given (removed branches included).
    pub(crate) fn id_bound(&self) -> usize {
        self.slots.len()
    }

    /// Every id ever given, removed branches' included, lowest first.
    pub(crate) fn all_ids(&self) -> impl Iterator<Item = BranchId> {
        (0..self.slots.len()).map(BranchId)
    }

    /// The id of the branch at `pos` in branch order (a policy's answer).
    pub(crate) fn id_at(&self, pos: usize) -> BranchId {
        self.order[pos]
    }

    /// Where branch `id` stands in branch order; `None` once it was removed.
    pub(crate) fn position(&self, id: BranchId) -> Option<usize> {
        self.order.iter().position(|&b| b == id)
    }

    /// Whether branch `id` is part of this set.
    pub(crate) fn is_live(&self, id: BranchId) -> bool {
        matches!(self.slots.get(id.0), Some(Some(_)))
    }

    /// The root of branch `id`; `None` once it was removed.
    pub(crate) fn root(&self, id: BranchId) -> Option<&Arc<Root>> {
        self.slots.get(id.0).and_then(Option::as_ref)
    }

    /// Where branch `id`'s nodes' file handles are opened, worked out by `probe` (given the
    /// root) the first time.
    pub(crate) fn handle_mount(
        &self,
        id: BranchId,
        probe: impl FnOnce(BorrowedFd<'_>) -> Option<HandleMount>,
    ) -> Option<&HandleMount> {
        let r = self.root(id)?;
        r.handle_mount.get_or_init(|| probe(r.fd.as_fd())).as_ref()
    }

    /// The live roots with their ids, in branch order.
    pub(crate) fn roots(&self) -> impl Iterator<Item = (BranchId, &Root)> {
        self.order
            .iter()
            .filter_map(|&id| Some((id, &**self.slots[id.0].as_ref()?)))
    }

    /// The mode of branch `id` (a removed branch's last mode).
    pub(crate) fn mode(&self, id: BranchId) -> BranchMode {
        self.modes.get(id.0).copied().unwrap_or(BranchMode::RO)
    }

    /// Whether branch `id` is read-only (RO); NC and RW branches may be written.
    pub(crate) fn is_ro(&self, id: BranchId) -> bool {
        self.mode(id) == BranchMode::RO
    }

    /// Whether branch `id` is live and configured `static` (the host never changes it).
    pub(crate) fn is_static(&self, id: BranchId) -> bool {
        self.position(id)
            .is_some_and(|pos| self.specs[pos].static_cache)
    }

    /// Whether every live branch is `static`: then only the guest adds names to the union.
    pub(crate) fn all_static(&self) -> bool {
        self.specs.iter().all(|s| s.static_cache)
    }

    /// The live branches that are not `static`, by id.
    pub(crate) fn changing(&self) -> impl Iterator<Item = BranchId> + '_ {
        self.indices().filter(|&id| !self.is_static(id))
    }

    /// Mode and free-space floor of every branch in branch order, for the policies.
    pub(crate) fn infos(&self) -> &[BranchInfo] {
        &self.infos
    }

    /// The branches as configured, in branch order.
    pub(crate) fn specs(&self) -> &[Branch] {
        &self.specs
    }
}

/// What an edited branch list keeps of the current set.
pub(crate) enum Reuse {
    /// The branch with this id (its root and its id stay).
    Id(BranchId),
    /// A new branch with this root.
    New(Root),
}
