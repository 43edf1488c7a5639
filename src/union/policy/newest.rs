//! `newest`: of the qualifying branches holding the path, the one where it has the latest
//! mtime (for create, the parent directory's). As mergerfs: mtimes are compared in whole
//! seconds, and of branches that tie the last wins (mergerfs skips only a strictly older one).

use super::common::{self, Path};
use super::{BranchInfo, Category, Chosen, Probe};

/// See the module docs.
pub fn select(
    cat: Category,
    branches: &[BranchInfo],
    rel: &[u8],
    probe: &dyn Probe,
) -> Result<Chosen, i32> {
    let (cands, fold) = common::filter(cat, branches, rel, probe, Path::Existing, false);
    let mut best: Option<(i64, usize)> = None;
    for c in &cands {
        let t = probe.mtime(c.idx, rel).unwrap_or(i64::MIN);
        if best.is_none_or(|(bt, _)| t >= bt) {
            best = Some((t, c.idx));
        }
    }
    best.map(|(_, i)| smallvec::smallvec![i])
        .ok_or(fold.errno())
}
