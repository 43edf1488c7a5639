//! `pfrd`: percentage free random distribution: for create, a random qualifying branch weighted by available space (mergerfs's default create policy); otherwise as `eppfrd`.

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
        Category::Create => common::select(
            cat,
            branches,
            rel,
            probe,
            Path::Any,
            Pick::PercentFreeRandom,
        ),
        _ => super::eppfrd::select(cat, branches, rel, probe),
    }
}
