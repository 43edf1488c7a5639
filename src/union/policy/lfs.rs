//! `lfs`: least free space: for create, the qualifying branch with the least available space; otherwise as `eplfs`.

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
        Category::Create => common::select(cat, branches, rel, probe, Path::Any, Pick::LeastFree),
        _ => super::eplfs::select(cat, branches, rel, probe),
    }
}
