//! `erofs`: exclusively read-only: every operation of the category fails with EROFS.

use super::{BranchInfo, Category, Chosen, Probe};

/// See the module docs.
pub fn select(
    cat: Category,
    branches: &[BranchInfo],
    rel: &[u8],
    probe: &dyn Probe,
) -> Result<Chosen, i32> {
    let _ = (cat, branches, rel, probe);
    Err(libc::EROFS)
}
