//! The link count of a directory with copies on several branches: 2 plus its distinct
//! subdirectories in the union, found without reading the copies whenever their own link
//! counts settle it, and otherwise counted from their listings and remembered while nothing
//! that could change it moved. Pure bookkeeping: it never touches a branch (`resolve.rs`
//! stats and lists the copies) and holds the whole trust rule for the count.
//!
//! Trust rule:
//! - a copy whose link count is at least 2 has that count less 2 subdirectories (ext4, xfs,
//!   tmpfs, f2fs keep it so); one under 2 (btrfs, a directory of more than 65,000 on ext4)
//!   says nothing, and its copies are listed;
//! - when at most one copy has subdirectories, the union has exactly that copy's: no listing;
//! - a count from listings is reused only while every copy is the same directory (device,
//!   inode) with the same link count, the daemon renamed nothing since (any rename: it does
//!   not stop to ask whether a directory moved), and within the attribute window the guest
//!   is promised anyway (`cache.attr`): creating or removing a subdirectory changes a link
//!   count, renaming one does not, so a rename on the host shows in the count once the
//!   window ends (a rename through the daemon at once).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::sync::LockRecover;

/// Directories whose counts are remembered at once; the table is emptied when full.
const KEPT: usize = 4096;

/// What the count rests on for one copy of the directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CopyStamp {
    /// The copy's device and inode: the same directory.
    pub dev: u64,
    /// See `dev`.
    pub ino: u64,
    /// Its own link count.
    pub nlink: u64,
}

/// The union's link count from the copies' own link counts, when they settle it: every copy
/// counts its subdirectories and at most one has any.
pub(crate) fn from_copies(copies: &[CopyStamp]) -> Option<u64> {
    if copies.iter().any(|c| c.nlink < 2) {
        return None;
    }
    let mut with_subdirs = copies.iter().filter(|c| c.nlink > 2);
    match (with_subdirs.next(), with_subdirs.next()) {
        (None, _) => Some(2),
        (Some(c), None) => Some(c.nlink),
        (Some(_), Some(_)) => None,
    }
}

/// Counts made from listings, by union path.
#[derive(Default)]
pub(crate) struct DirLinks {
    counts: Mutex<HashMap<Box<[u8]>, Counted>>,
    /// Moved by every rename the daemon makes (before and after it): a count made across one
    /// is not kept.
    epoch: AtomicU64,
}

struct Counted {
    copies: smallvec::SmallVec<[CopyStamp; 4]>,
    nlink: u64,
    until: Instant,
}

/// Taken before the listings a count is made from; [`DirLinks::keep`] keeps the count only
/// if no rename began or ended meanwhile.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Epoch(u64);

impl DirLinks {
    /// The remembered count of the directory at union path `rel` whose copies are now
    /// `copies` (in branch order), if it still holds at `now`.
    pub(crate) fn get(&self, rel: &[u8], copies: &[CopyStamp], now: Instant) -> Option<u64> {
        let counts = self.counts.locked();
        let c = counts.get(rel)?;
        (now < c.until && c.copies.as_slice() == copies).then_some(c.nlink)
    }

    /// For a count about to be made.
    pub(crate) fn epoch(&self) -> Epoch {
        Epoch(self.epoch.load(Ordering::Acquire))
    }

    /// Keeps `nlink`, counted from the listings of `copies` taken after `at`, for `window`
    /// from `now` (not at all with a zero window, or if a rename moved the epoch).
    pub(crate) fn keep(
        &self,
        rel: &[u8],
        copies: &[CopyStamp],
        nlink: u64,
        (at, now, window): (Epoch, Instant, Duration),
    ) {
        if window.is_zero() {
            return;
        }
        let mut counts = self.counts.locked();
        if self.epoch.load(Ordering::Acquire) != at.0 {
            return;
        }
        if counts.len() >= KEPT && !counts.contains_key(rel) {
            counts.clear();
        }
        counts.insert(
            rel.into(),
            Counted {
                copies: copies.into(),
                nlink,
                until: now + window,
            },
        );
    }

    /// A guard for a rename (of anything: a subdirectory may change name without changing a
    /// link count): no count made across it is kept, and every count is forgotten when it
    /// ends.
    pub(crate) fn renaming(&self) -> Renaming<'_> {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        Renaming(self)
    }
}

/// See [`DirLinks::renaming`].
pub(crate) struct Renaming<'a>(&'a DirLinks);

impl Drop for Renaming<'_> {
    fn drop(&mut self) {
        let mut counts = self.0.counts.locked();
        self.0.epoch.fetch_add(1, Ordering::AcqRel);
        counts.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(ino: u64, nlink: u64) -> CopyStamp {
        CopyStamp { dev: 1, ino, nlink }
    }

    #[test]
    fn copies_without_subdirectories_make_two() {
        assert_eq!(from_copies(&[copy(1, 2), copy(2, 2), copy(3, 2)]), Some(2));
    }

    #[test]
    fn one_copy_with_subdirectories_gives_its_count() {
        assert_eq!(from_copies(&[copy(1, 2), copy(2, 7), copy(3, 2)]), Some(7));
    }

    #[test]
    fn two_copies_with_subdirectories_need_their_names() {
        // Both could hold the same three names (5) or six different ones (8).
        assert_eq!(from_copies(&[copy(1, 5), copy(2, 5)]), None);
    }

    #[test]
    fn a_copy_that_does_not_count_needs_the_names() {
        // btrfs: every directory has one link.
        assert_eq!(from_copies(&[copy(1, 1), copy(2, 2)]), None);
    }

    #[test]
    fn a_count_holds_for_the_same_copies_within_its_window() {
        let d = DirLinks::default();
        let t = Instant::now();
        let copies = [copy(1, 4), copy(2, 3)];
        d.keep(b"a", &copies, 4, (d.epoch(), t, Duration::from_secs(1)));
        assert_eq!(d.get(b"a", &copies, t), Some(4));
        assert_eq!(d.get(b"b", &copies, t), None, "another directory");
        assert_eq!(
            d.get(b"a", &copies, t + Duration::from_secs(1)),
            None,
            "expired"
        );
        assert_eq!(
            d.get(b"a", &[copy(1, 5), copy(2, 3)], t),
            None,
            "a subdirectory made"
        );
        assert_eq!(
            d.get(b"a", &[copy(9, 4), copy(2, 3)], t),
            None,
            "another directory"
        );
        assert_eq!(d.get(b"a", &copies[..1], t), None, "a copy gone");
    }

    #[test]
    fn no_window_no_count_kept() {
        let d = DirLinks::default();
        let t = Instant::now();
        let copies = [copy(1, 4), copy(2, 3)];
        d.keep(b"a", &copies, 4, (d.epoch(), t, Duration::ZERO));
        assert_eq!(d.get(b"a", &copies, t), None);
    }

    #[test]
    fn a_rename_forgets_counts_and_refuses_those_made_across_it() {
        let d = DirLinks::default();
        let t = Instant::now();
        let w = Duration::from_secs(60);
        let copies = [copy(1, 4), copy(2, 3)];
        d.keep(b"a", &copies, 4, (d.epoch(), t, w));
        let before = d.epoch();
        {
            let _r = d.renaming();
            let during = d.epoch();
            d.keep(b"b", &copies, 4, (before, t, w));
            assert_eq!(
                d.get(b"b", &copies, t),
                None,
                "counted before the rename began"
            );
            d.keep(b"c", &copies, 4, (during, t, w));
            assert_eq!(
                d.get(b"c", &copies, t),
                Some(4),
                "kept until the rename ends"
            );
        }
        assert_eq!(d.get(b"a", &copies, t), None);
        assert_eq!(d.get(b"c", &copies, t), None);
        d.keep(b"a", &copies, 4, (before, t, w));
        assert_eq!(d.get(b"a", &copies, t), None, "counted across the rename");
        d.keep(b"a", &copies, 4, (d.epoch(), t, w));
        assert_eq!(d.get(b"a", &copies, t), Some(4));
    }

    #[test]
    fn the_table_stays_bounded() {
        let d = DirLinks::default();
        let t = Instant::now();
        let w = Duration::from_secs(60);
        let copies = [copy(1, 4), copy(2, 3)];
        for i in 0..KEPT + 10 {
            d.keep(i.to_string().as_bytes(), &copies, 4, (d.epoch(), t, w));
        }
        assert!(d.counts.locked().len() <= KEPT);
    }
}
