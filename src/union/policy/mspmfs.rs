//! `mspmfs`: most shared path, most free space: as `msplfs` with most free space.

use super::common::{self, Pick};
use super::{BranchInfo, Category, Chosen, Probe};

/// See the module docs.
pub fn select(
    cat: Category,
    branches: &[BranchInfo],
    rel: &[u8],
    probe: &dyn Probe,
) -> Result<Chosen, i32> {
    match cat {
        Category::Create => common::most_shared_path(branches, rel, probe, Pick::MostFree),
        _ => super::epmfs::select(cat, branches, rel, probe),
    }
}
