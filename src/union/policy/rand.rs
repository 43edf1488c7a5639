//! `rand`: random: for create, a uniformly random qualifying branch; otherwise as `eprand`.

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
        Category::Create => common::select(cat, branches, rel, probe, Path::Any, Pick::Random),
        _ => super::eprand::select(cat, branches, rel, probe),
    }
}
