//! `eplus`: existing path, least used space: of the qualifying branches holding the path, the one with the least used space.

use super::common::{self, Path, Pick};
use super::{BranchInfo, Category, Chosen, Probe};

/// See the module docs.
pub fn select(
    cat: Category,
    branches: &[BranchInfo],
    rel: &[u8],
    probe: &dyn Probe,
) -> Result<Chosen, i32> {
    common::select(cat, branches, rel, probe, Path::Existing, Pick::LeastUsed)
}
