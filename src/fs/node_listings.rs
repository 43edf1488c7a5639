//! The listings of directories the guest reads without opening them. Once its kernel stops
//! sending OPENDIR (FUSE_NO_OPENDIR_SUPPORT, `ops::readdir::opendir`), a READDIR carries no
//! handle to hold a listing between two pages of it. Each listing built at offset 0 is kept
//! here under a generation that the offsets handed out with it carry (in their high bits), so
//! a reader paging through a directory goes on in the listing it started, even when another
//! reader of the same directory started a newer one meanwhile. At most [`KEPT`] listings are
//! kept, the oldest dropped first: a reader whose listing was dropped gets a new one, resumed
//! at the same index. Pure bookkeeping: listings are built by `ops::readdir`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::fs::readdir_snapshot::DirSnapshot;
use crate::sync::LockRecover;

/// Listings kept at most (a walk reads one directory at a time per reader).
pub(crate) const KEPT: usize = 64;

/// Bits of an offset that hold the index after the entry (the low ones).
const INDEX_BITS: u32 = 32;

/// Generations fit 31 bits: with the index below them, an offset stays a positive `loff_t`
/// for the guest's `lseek` and `seekdir`.
const GENERATIONS: u64 = 1 << 31;

/// Kept listings by directory node, newest last.
#[derive(Default)]
pub(crate) struct NodeListings {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// The last generation given (0 before any: no offset carries generation 0).
    last: u64,
    kept: VecDeque<(u64, u64, Arc<DirSnapshot>)>,
}

/// Where a READDIR without a handle goes on: the listing and its generation (the next entry
/// is at [`index_after`] its offset).
pub(crate) struct Resumed {
    /// The listing.
    pub snapshot: Arc<DirSnapshot>,
    /// Its generation (what [`cookie`] puts in the offsets).
    pub generation: u64,
}

/// The offset handed out with entry `index` of the listing of generation `generation`: the
/// next READDIR starts after it.
pub(crate) fn cookie(generation: u64, index: usize) -> u64 {
    (generation << INDEX_BITS) | (index as u64 + 1)
}

/// The index of the entry after `offset` (an offset from [`cookie`]) in its listing.
pub(crate) fn index_after(offset: u64) -> usize {
    (offset & ((1 << INDEX_BITS) - 1)) as usize
}

impl NodeListings {
    /// The kept listing of directory `node` that `offset` (nonzero) continues, if it is kept.
    pub(crate) fn resume(&self, node: u64, offset: u64) -> Option<Resumed> {
        let generation = offset >> INDEX_BITS;
        let inner = self.inner.locked();
        inner
            .kept
            .iter()
            .rev()
            .find(|(n, g, _)| *n == node && *g == generation)
            .map(|(_, g, s)| Resumed {
                snapshot: s.clone(),
                generation: *g,
            })
    }

    /// Keeps `snapshot` as a listing of directory `node`: its generation. The oldest listing
    /// goes when [`KEPT`] are kept.
    pub(crate) fn keep(&self, node: u64, snapshot: Arc<DirSnapshot>) -> u64 {
        let mut inner = self.inner.locked();
        inner.last = inner.last % (GENERATIONS - 1) + 1;
        let generation = inner.last;
        if inner.kept.len() == KEPT {
            inner.kept.pop_front();
        }
        inner.kept.push_back((node, generation, snapshot));
        generation
    }

    /// Drops every kept listing (their entries leave the listing budget); how many there were.
    pub(crate) fn clear(&self) -> usize {
        let dropped = std::mem::take(&mut self.inner.locked().kept);
        dropped.len()
    }

    /// Listings kept now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.locked().kept.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::readdir_snapshot::{Listing, ListingBudget};

    fn listing(budget: &ListingBudget, names: &[&str]) -> Arc<DirSnapshot> {
        let mut l = Listing::default();
        for (i, n) in names.iter().enumerate() {
            l.push(n.as_bytes(), i as u64 + 10, 8).unwrap();
        }
        Arc::new(budget.charge(l).unwrap())
    }

    #[test]
    fn offsets_carry_the_generation_and_the_index() {
        for (g, i) in [(1, 0), (7, 41), (GENERATIONS - 1, u32::MAX as usize - 1)] {
            let off = cookie(g, i);
            assert_eq!((off >> INDEX_BITS, index_after(off)), (g, i + 1));
            assert!(i64::try_from(off).is_ok(), "a positive loff_t: {off:#x}");
        }
    }

    #[test]
    fn a_reader_goes_on_in_its_own_listing() {
        let b = ListingBudget::new(100);
        let l = NodeListings::default();
        let first = l.keep(5, listing(&b, &["a", "b"]));
        // Another reader of the same directory starts over, after the directory changed.
        let second = l.keep(5, listing(&b, &["a", "new", "b"]));
        assert_ne!(first, second);
        let r = l.resume(5, cookie(first, 0)).unwrap();
        assert_eq!(r.generation, first);
        assert_eq!(r.snapshot.get(1).unwrap().name, b"b");
        let r = l.resume(5, cookie(second, 0)).unwrap();
        assert_eq!(r.snapshot.get(1).unwrap().name, b"new");
        // Another directory's offsets, generation 0 (a handle's), or one never given: none.
        assert!(l.resume(6, cookie(first, 0)).is_none());
        assert!(l.resume(5, 1).is_none());
        assert!(l.resume(5, cookie(second + 1, 0)).is_none());
    }

    #[test]
    fn the_oldest_listing_goes_first_and_leaves_the_budget() {
        let b = ListingBudget::new(1_000);
        let l = NodeListings::default();
        let gens: Vec<u64> = (0..KEPT as u64 + 1)
            .map(|n| l.keep(n, listing(&b, &["x"])))
            .collect();
        assert_eq!(l.len(), KEPT);
        assert_eq!(b.held(), KEPT);
        assert!(l.resume(0, cookie(gens[0], 0)).is_none(), "the first went");
        assert!(l.resume(1, cookie(gens[1], 0)).is_some());
        assert_eq!(l.clear(), KEPT);
        assert_eq!(b.held(), 0);
    }

    #[test]
    fn generations_wrap_past_zero() {
        let l = NodeListings::default();
        l.inner.locked().last = GENERATIONS - 1;
        let b = ListingBudget::new(10);
        assert_eq!(l.keep(1, listing(&b, &["x"])), 1);
    }
}
