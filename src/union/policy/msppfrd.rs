//! `msppfrd`: most shared path, percentage free random distribution: as `msplfs` with `eppfrd`'s pick.

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
        Category::Create => common::most_shared_path(branches, rel, probe, Pick::PercentFreeRandom),
        _ => super::eppfrd::select(cat, branches, rel, probe),
    }
}
