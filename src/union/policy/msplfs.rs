//! `msplfs`: most shared path, least free space: for create, `eplfs` on the parent, then on each ancestor until a branch qualifies; otherwise as `eplfs`.

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
        Category::Create => common::most_shared_path(branches, rel, probe, Pick::LeastFree),
        _ => super::eplfs::select(cat, branches, rel, probe),
    }
}
