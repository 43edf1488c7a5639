//! Branch-selection policies, by mergerfs's names. Each policy lives in its own file as a pure
//! function of (branches, relative path, probe); the `match` in [`Policy::select`] is the only
//! registry, so adding a policy is one file and one arm.

mod all;
mod common;
mod epall;
mod epff;
mod eplfs;
mod eplup;
mod eplus;
mod epmfs;
mod eppfrd;
mod eprand;
mod erofs;
mod ff;
mod lfs;
mod lup;
mod lus;
mod mfs;
mod msplfs;
mod msplus;
mod mspmfs;
mod msppfrd;
mod newest;
mod pfrd;
mod rand;

use std::fmt;
use std::str::FromStr;

use super::BranchMode;

/// The branches a policy chose, in branch order (rarely more than a few: kept inline).
pub type Chosen = smallvec::SmallVec<[usize; 4]>;

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

/// What the policies know about a branch besides its contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BranchInfo {
    /// Its mode.
    pub mode: BranchMode,
    /// Creates skip it when less than this many bytes are available.
    pub min_free: u64,
}

/// Space on a branch's filesystem, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Space {
    /// Available to unprivileged users.
    pub avail: u64,
    /// Size of the filesystem.
    pub total: u64,
    /// Whether the filesystem is mounted read-only.
    pub readonly: bool,
}

/// What a policy may ask about branches. Implemented over real directories by the fs layer and
/// by a table in unit tests.
pub trait Probe {
    /// Whether `rel` (a path relative to the union root; `.` is the root) exists on `branch`.
    fn exists(&self, branch: usize, rel: &[u8]) -> bool;
    /// Space on `branch`'s filesystem; `None` if it cannot be read.
    fn space(&self, branch: usize) -> Option<Space>;
    /// Modification time of `rel` on `branch` in whole seconds (`st_mtime`, the resolution
    /// mergerfs compares), if it exists.
    fn mtime(&self, branch: usize, rel: &[u8]) -> Option<i64>;
    /// A uniformly distributed number in `0..bound` (`bound` > 0).
    fn random(&self, bound: u64) -> u64;
}

/// Error for an unknown policy name.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown policy '{0}'")]
pub struct UnknownPolicy(pub String);

macro_rules! policies {
    ($($variant:ident => $name:literal, $module:ident, $pp:literal;)*) => {
        /// A branch-selection policy; names and behaviour as mergerfs's.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Policy {
            $(
                #[doc = concat!("`", $name, "`")]
                $variant,
            )*
        }

        impl Policy {
            /// Every policy, in mergerfs's documentation order.
            pub const ALL: &'static [Policy] = &[$(Policy::$variant),*];

            /// The mergerfs name.
            pub fn name(self) -> &'static str {
                match self {
                    $(Policy::$variant => $name,)*
                }
            }

            /// Whether a create with this policy only uses branches where the parent directory
            /// already exists (otherwise the parent path is cloned onto the chosen branch).
            pub fn path_preserving(self) -> bool {
                match self {
                    $(Policy::$variant => $pp,)*
                }
            }

            /// Chooses branches for an operation of `cat` on `rel` (for [`Category::Create`],
            /// `rel` is the parent directory). Returns branch indexes, never empty, or the errno
            /// mergerfs reports when none qualifies (precedence ENOENT < ENOSPC < EROFS).
            pub fn select(
                self,
                cat: Category,
                branches: &[BranchInfo],
                rel: &[u8],
                probe: &dyn Probe,
            ) -> Result<Chosen, i32> {
                match self {
                    $(Policy::$variant => $module::select(cat, branches, rel, probe),)*
                }
            }
        }
    };
}

policies! {
    All => "all", all, false;
    Epall => "epall", epall, true;
    Epff => "epff", epff, true;
    Eplfs => "eplfs", eplfs, true;
    Eplus => "eplus", eplus, true;
    Epmfs => "epmfs", epmfs, true;
    Eppfrd => "eppfrd", eppfrd, true;
    Eprand => "eprand", eprand, true;
    Erofs => "erofs", erofs, false;
    Ff => "ff", ff, false;
    Lfs => "lfs", lfs, false;
    Lus => "lus", lus, false;
    Lup => "lup", lup, false;
    Mfs => "mfs", mfs, false;
    Msplfs => "msplfs", msplfs, false;
    Msplus => "msplus", msplus, false;
    Mspmfs => "mspmfs", mspmfs, false;
    Msppfrd => "msppfrd", msppfrd, false;
    Newest => "newest", newest, false;
    Pfrd => "pfrd", pfrd, false;
    Rand => "rand", rand, false;
}

impl Policy {
    /// Whether, for `cat`, this policy's first choice is simply the first branch in order on
    /// which the path exists (`ff`, `epff`, `all` and `epall` searching: every mode qualifies
    /// and no space is read), so that a caller needing only that one may stop probing there.
    pub fn first_existing(self, cat: Category) -> bool {
        cat == Category::Search
            && matches!(
                self,
                Policy::Ff | Policy::Epff | Policy::All | Policy::Epall
            )
    }

    /// Whether, for `cat`, this policy chooses every branch on which the path exists and
    /// whose mode `cat` allows, in branch order (`all` and `epall` outside create: mergerfs's
    /// default action policy), reading no space.
    pub fn every_existing(self, cat: Category) -> bool {
        cat != Category::Create && matches!(self, Policy::All | Policy::Epall)
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Policy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Policy::ALL
            .iter()
            .copied()
            .find(|p| p.name() == s)
            .ok_or_else(|| UnknownPolicy(s.to_string()))
    }
}

#[cfg(test)]
mod tests;
