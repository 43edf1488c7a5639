//! `mfs`: most free space: for create, the qualifying branch with the most available space; otherwise as `epmfs`.

use super::common::{self, Path, Pick};
use super::{BranchInfo, Category, Chosen, Probe};

/// See the module docs.
pub fn select(
    cat: Category,
    branches: &[BranchInfo],
    rel: &[u8],
    probe: &dyn Probe,
) -> Result<Chosen, i32> {
    match cat {
        Category::Create => common::select(cat, branches, rel, probe, Path::Any, Pick::MostFree),
        _ => super::epmfs::select(cat, branches, rel, probe),
    }
}
