//! `epff`: existing path, first found: the first qualifying branch on which the path (for create, the parent directory) exists. Path-preserving.

use super::common::{self, Path, Pick};
use super::{BranchInfo, Category, Chosen, Probe};

/// See the module docs.
pub fn select(
    cat: Category,
    branches: &[BranchInfo],
    rel: &[u8],
    probe: &dyn Probe,
) -> Result<Chosen, i32> {
    common::select(cat, branches, rel, probe, Path::Existing, Pick::First)
}
