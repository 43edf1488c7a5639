//! `eprand`: existing path, random: a uniformly random qualifying branch holding the path.

use super::common::{self, Path, Pick};
use super::{BranchInfo, Category, Chosen, Probe};

/// See the module docs.
pub fn select(
    cat: Category,
    branches: &[BranchInfo],
    rel: &[u8],
    probe: &dyn Probe,
) -> Result<Chosen, i32> {
    common::select(cat, branches, rel, probe, Path::Existing, Pick::Random)
}
