//! `all`: all: for create, every qualifying branch (mkdir, mknod and symlink make the entry on each; create uses the first); otherwise as `epall`.

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
        Category::Create => common::select(cat, branches, rel, probe, Path::Any, Pick::All),
        _ => super::epall::select(cat, branches, rel, probe),
    }
}
