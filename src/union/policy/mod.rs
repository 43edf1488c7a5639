//! Branch-selection policies, by mergerfs's names. Each policy lives in its own file as a pure
//! function of (branches, relative path, probe); this enum's one `match` is the only registry.

mod epall;
mod epff;
mod ff;

use super::errno::ErrnoFold;
use super::BranchMode;

/// Which kind of operation a policy is choosing branches for; it decides which modes qualify.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category {
    /// Creating a new entry (create, mkdir, mknod, symlink): only RW branches qualify.
    Create,
    /// Finding an existing entry (lookup, getattr, open, readlink…): every branch qualifies.
    Search,
    /// Changing an existing entry (unlink, chmod, setxattr…): RW and NC branches qualify.
    Action,
}

impl Category {
    /// Whether a branch of `mode` may be selected for this category.
    pub fn allows(self, mode: BranchMode) -> bool {
        match self {
            Category::Create => mode == BranchMode::RW,
            Category::Search => true,
            Category::Action => mode != BranchMode::RO,
        }
    }
}

/// What a policy may ask about a branch. Implemented over real directories by the fs layer and
/// by a table in unit tests.
pub trait Probe {
    /// Whether `rel` (a path relative to the union root; `.` is the root) exists on `branch`.
    fn exists(&self, branch: usize, rel: &[u8]) -> bool;
}

/// A branch-selection policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// First found: the first qualifying branch (for create: regardless of the parent path).
    Ff,
    /// Existing path, first found: the first qualifying branch where the path exists.
    Epff,
    /// Existing path, all: every qualifying branch where the path exists.
    Epall,
}

impl Policy {
    /// Chooses branches for an operation of `cat` on `rel` (for [`Category::Create`], `rel` is the
    /// parent directory). Returns branch indexes in priority order, never empty, or the errno
    /// mergerfs would report when no branch qualifies.
    pub fn select(
        self,
        cat: Category,
        modes: &[BranchMode],
        rel: &[u8],
        probe: &dyn Probe,
    ) -> Result<Vec<usize>, i32> {
        match self {
            Policy::Ff => ff::select(cat, modes, rel, probe),
            Policy::Epff => epff::select(cat, modes, rel, probe),
            Policy::Epall => epall::select(cat, modes, rel, probe),
        }
    }
}

/// Shared filter for existing-path policies: the qualifying branches where `rel` exists, and the
/// errno to report if there are none (EROFS when the path exists only on excluded branches).
fn existing(
    cat: Category,
    modes: &[BranchMode],
    rel: &[u8],
    probe: &dyn Probe,
) -> (Vec<usize>, ErrnoFold) {
    let mut fold = ErrnoFold::new();
    let mut out = Vec::new();
    for (i, &mode) in modes.iter().enumerate() {
        if !probe.exists(i, rel) {
            fold.err(libc::ENOENT);
        } else if !cat.allows(mode) {
            fold.err(libc::EROFS);
        } else {
            out.push(i);
        }
    }
    (out, fold)
}

#[cfg(test)]
pub(crate) mod fake {
    //! A probe backed by a table, for policy unit tests.
    use super::Probe;

    /// `present[branch]` lists the paths that exist on that branch.
    pub struct FakeProbe(pub Vec<Vec<&'static str>>);

    impl Probe for FakeProbe {
        fn exists(&self, branch: usize, rel: &[u8]) -> bool {
            self.0[branch].iter().any(|p| p.as_bytes() == rel)
        }
    }
}
