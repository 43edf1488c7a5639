//! `ff`: first found: the first qualifying branch. For create the parent need not exist there (it is cloned); search and action behave as `epff`.

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
        Category::Create => common::select(cat, branches, rel, probe, Path::Any, Pick::First),
        _ => super::epff::select(cat, branches, rel, probe),
    }
}
