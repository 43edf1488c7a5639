//! The filter-then-pick core every policy shares: which branches qualify for a category (mode,
//! existing path, minfreespace) and the errno when none does, then how one is picked.

use super::{BranchInfo, Category, Chosen, Probe};
use crate::union::errno::ErrnoFold;

/// Whether a policy needs the path to exist on a branch.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Path {
    /// The path (for create: the parent directory) must exist on the branch.
    Existing,
    /// Any branch of the right mode and with room qualifies.
    Any,
}

/// A qualifying branch and what was learned about it while filtering.
pub(super) struct Cand {
    pub idx: usize,
    pub avail: u64,
    pub total: u64,
}

impl Cand {
    fn used(&self) -> u64 {
        self.total.saturating_sub(self.avail)
    }
}

/// Filters `branches` for `cat` as mergerfs does: create needs an RW branch (RO and NC give
/// EROFS) with at least its minfreespace available (ENOSPC); action needs a non-RO branch;
/// `Path::Existing` needs `rel` on the branch (ENOENT). Space is read only when `space` is set
/// or minfreespace must be checked.
pub(super) fn filter(
    cat: Category,
    branches: &[BranchInfo],
    rel: &[u8],
    probe: &dyn Probe,
    path: Path,
    space: bool,
) -> (Cands, ErrnoFold) {
    filter_upto(cat, branches, rel, probe, path, space, usize::MAX)
}

/// The candidates, kept inline for the usual few branches.
pub(super) type Cands = smallvec::SmallVec<[Cand; 4]>;

/// [`filter`], stopping once `max` branches qualify (the errno fold only matters when none
/// does): a first-found policy probes branches only up to the one it picks.
fn filter_upto(
    cat: Category,
    branches: &[BranchInfo],
    rel: &[u8],
    probe: &dyn Probe,
    path: Path,
    space: bool,
    max: usize,
) -> (Cands, ErrnoFold) {
    let mut fold = ErrnoFold::new();
    let mut out = Cands::new();
    for (idx, b) in branches.iter().enumerate() {
        if out.len() >= max {
            break;
        }
        // Existence first: a path missing everywhere is ENOENT even when RO branches exist
        // (mergerfs checks the mode first, but the guest kernel's lookup hides that case).
        if path == Path::Existing && !probe.exists(idx, rel) {
            fold.err(libc::ENOENT);
            continue;
        }
        if !cat.allows(b.mode) {
            fold.err(libc::EROFS);
            continue;
        }
        let (mut avail, mut total) = (0, 0);
        if space || cat == Category::Create {
            match probe.space(idx) {
                Some(s) if s.readonly && cat != Category::Search => {
                    fold.err(libc::EROFS);
                    continue;
                }
                Some(s) => (avail, total) = (s.avail, s.total),
                None => {
                    fold.err(libc::ENOENT);
                    continue;
                }
            }
            if cat == Category::Create && avail < b.min_free {
                fold.err(libc::ENOSPC);
                continue;
            }
        }
        out.push(Cand { idx, avail, total });
    }
    (out, fold)
}

/// How a policy picks among qualifying branches.
#[derive(Clone, Copy)]
pub(super) enum Pick {
    /// Every one, in branch order.
    All,
    /// The first in branch order.
    First,
    /// Least available space.
    LeastFree,
    /// Least used space.
    LeastUsed,
    /// Least used percentage of its size.
    LeastUsedPct,
    /// Most available space.
    MostFree,
    /// Random, weighted by available space.
    PercentFreeRandom,
    /// Uniformly random.
    Random,
}

/// Applies `pick` to the candidates; the folded errno when there are none. Ties go to the
/// earlier branch.
pub(super) fn pick(
    cands: Cands,
    fold: ErrnoFold,
    how: Pick,
    probe: &dyn Probe,
) -> Result<Chosen, i32> {
    if cands.is_empty() {
        return Err(fold.errno());
    }
    let one = |c: &Cand| Ok(smallvec::smallvec![c.idx]);
    match how {
        Pick::All => Ok(cands.iter().map(|c| c.idx).collect()),
        Pick::First => one(&cands[0]),
        Pick::LeastFree => one(min_by(&cands, |c| c.avail as u128)),
        Pick::LeastUsed => one(min_by(&cands, |c| c.used() as u128)),
        Pick::LeastUsedPct => one(min_by(&cands, |c| {
            // used/total as a fixed-point fraction; an empty-sized branch counts as full.
            ((c.used() as u128) << 64) / u128::from(c.total.max(1))
        })),
        Pick::MostFree => one(min_by(&cands, |c| u128::from(u64::MAX - c.avail))),
        Pick::PercentFreeRandom => {
            let sum: u128 = cands.iter().map(|c| c.avail as u128).sum();
            if sum == 0 {
                return one(&cands[0]);
            }
            let mut at = (probe.random(u64::MAX) as u128 * sum) >> 64;
            for c in &cands {
                if at < c.avail as u128 {
                    return one(c);
                }
                at -= c.avail as u128;
            }
            one(cands.last().expect("non-empty"))
        }
        Pick::Random => one(&cands[probe.random(cands.len() as u64) as usize]),
    }
}

fn min_by(cands: &[Cand], key: impl Fn(&Cand) -> u128) -> &Cand {
    let mut best = &cands[0];
    for c in &cands[1..] {
        if key(c) < key(best) {
            best = c;
        }
    }
    best
}

/// Filter then pick: the body of most policies.
pub(super) fn select(
    cat: Category,
    branches: &[BranchInfo],
    rel: &[u8],
    probe: &dyn Probe,
    path: Path,
    how: Pick,
) -> Result<Chosen, i32> {
    let space = !matches!(how, Pick::All | Pick::First | Pick::Random);
    let max = if matches!(how, Pick::First) {
        1
    } else {
        usize::MAX
    };
    let (cands, fold) = filter_upto(cat, branches, rel, probe, path, space, max);
    pick(cands, fold, how, probe)
}

/// Most-shared-path create: try `rel`, then each ancestor up to the root, until some branch
/// qualifies with `how`; the errno of the last attempt otherwise.
pub(super) fn most_shared_path(
    branches: &[BranchInfo],
    rel: &[u8],
    probe: &dyn Probe,
    how: Pick,
) -> Result<Chosen, i32> {
    let mut path = rel;
    loop {
        match select(Category::Create, branches, path, probe, Path::Existing, how) {
            Ok(v) => return Ok(v),
            Err(e) if path == b"." => return Err(e),
            Err(_) => {
                path = match path.iter().rposition(|&c| c == b'/') {
                    Some(i) => &path[..i],
                    None => b".",
                }
            }
        }
    }
}
