//! `epall`: existing path, all: every qualifying branch on which the path (for create, the parent directory) exists. The default action policy, so a chmod or unlink reaches every writable copy.

use super::common::{self, Path, Pick};
use super::{BranchInfo, Category, Chosen, Probe};

/// See the module docs.
pub fn select(
    cat: Category,
    branches: &[BranchInfo],
    rel: &[u8],
    probe: &dyn Probe,
) -> Result<Chosen, i32> {
    common::select(cat, branches, rel, probe, Path::Existing, Pick::All)
}
