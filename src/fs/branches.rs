//! The branch set: for each branch, in branch order, its root descriptor, the device it is
//! on, its mode and its free-space floor. One typed set instead of parallel vectors; the
//! policies see the mode and floor as a `&[BranchInfo]` slice.

use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::union::policy::BranchInfo;
use crate::union::BranchMode;

/// One branch's root.
pub(crate) struct Root {
    /// `O_PATH` descriptor of the branch directory; every guest path is resolved beneath it.
    pub(crate) fd: OwnedFd,
    /// Device of the branch root, to count each filesystem once (statfs, syncfs).
    pub(crate) dev: u64,
    /// Where its nodes' file handles are opened, when they use handles (worked out at first
    /// use).
    pub(crate) handle_mount: std::sync::OnceLock<Option<HandleMount>>,
}

/// A branch root's filesystem as file handles need it.
pub(crate) struct HandleMount {
    /// The root opened for reading (open_by_handle_at takes no `O_PATH` descriptor).
    pub(crate) fd: OwnedFd,
    /// Its mount id: only handles made on that mount are opened there.
    pub(crate) id: i32,
}

/// Every branch of the union.
pub(crate) struct Branches {
    roots: Vec<Root>,
    infos: Vec<BranchInfo>,
}

impl Branches {
    /// The set of `roots` with their `infos` (the same length, in branch order).
    pub(crate) fn new(roots: Vec<Root>, infos: Vec<BranchInfo>) -> Self {
        assert_eq!(roots.len(), infos.len(), "one info per root");
        Branches { roots, infos }
    }

    /// Number of branches.
    pub(crate) fn len(&self) -> usize {
        self.roots.len()
    }

    /// Every branch index, in order.
    pub(crate) fn indices(&self) -> Range<usize> {
        0..self.roots.len()
    }

    /// The root descriptor of branch `b`.
    pub(crate) fn fd(&self, b: usize) -> BorrowedFd<'_> {
        self.roots[b].fd.as_fd()
    }

    /// Where branch `b`'s nodes' file handles are opened, worked out by `probe`
    /// (given the root) the first time.
    pub(crate) fn handle_mount(
        &self,
        b: usize,
        probe: impl FnOnce(BorrowedFd<'_>) -> Option<HandleMount>,
    ) -> Option<&HandleMount> {
        let r = &self.roots[b];
        r.handle_mount.get_or_init(|| probe(r.fd.as_fd())).as_ref()
    }

    /// The roots with their indices.
    pub(crate) fn roots(&self) -> impl Iterator<Item = (usize, &Root)> {
        self.roots.iter().enumerate()
    }

    /// The roots, mutable (the sandbox reopens them).
    pub(crate) fn roots_mut(&mut self) -> impl Iterator<Item = &mut Root> {
        self.roots.iter_mut()
    }

    /// The mode of branch `b`.
    pub(crate) fn mode(&self, b: usize) -> BranchMode {
        self.infos[b].mode
    }

    /// Whether branch `b` is read-only (RO); NC and RW branches may be written.
    pub(crate) fn is_ro(&self, b: usize) -> bool {
        self.infos[b].mode == BranchMode::RO
    }

    /// Mode and free-space floor of every branch, for the policies.
    pub(crate) fn infos(&self) -> &[BranchInfo] {
        &self.infos
    }
}
