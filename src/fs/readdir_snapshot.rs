//! A merged directory listing: every branch's entries, names de-duplicated with the first
//! branch winning, preceded by `.` and `..`. Pure data; built by `ops::readdir`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// One entry of a merged listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergedEntry {
    /// The name.
    pub name: Vec<u8>,
    /// The union inode number the guest will also see from getattr.
    pub ino: u64,
    /// The `DT_*` type.
    pub dtype: u32,
}

/// The listing served to one open directory handle. Its entries count against the budget it
/// was charged to (see [`ListingBudget`]) until it is dropped.
#[derive(Debug, Default)]
pub struct DirSnapshot {
    /// Entries in the order served; offsets are index + 1.
    pub entries: Vec<MergedEntry>,
    charged: Option<Arc<AtomicUsize>>,
}

/// How many listing entries all open directory handles may hold together, so that a guest
/// opening directories without end cannot grow the daemon's memory without bound.
#[derive(Debug)]
pub struct ListingBudget {
    held: Arc<AtomicUsize>,
    max: usize,
}

impl ListingBudget {
    /// A budget of `max` entries.
    pub fn new(max: usize) -> Self {
        ListingBudget {
            held: Arc::default(),
            max,
        }
    }

    /// Entries held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Charges `entries` as a snapshot, or ENOMEM if that would exceed the budget.
    pub fn charge(&self, entries: Vec<MergedEntry>) -> std::io::Result<DirSnapshot> {
        let n = entries.len();
        let fits = self
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                h.checked_add(n).filter(|t| *t <= self.max)
            })
            .is_ok();
        if !fits {
            return Err(std::io::Error::from_raw_os_error(libc::ENOMEM));
        }
        Ok(DirSnapshot {
            entries,
            charged: Some(self.held.clone()),
        })
    }
}

impl Drop for DirSnapshot {
    fn drop(&mut self) {
        if let Some(held) = &self.charged {
            held.fetch_sub(self.entries.len(), Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(n: usize) -> Vec<MergedEntry> {
        (0..n)
            .map(|i| MergedEntry {
                name: i.to_string().into_bytes(),
                ino: i as u64 + 2,
                dtype: 8,
            })
            .collect()
    }

    #[test]
    fn listings_are_charged_until_dropped() {
        let b = ListingBudget::new(10);
        let a = b.charge(entries(6)).unwrap();
        assert_eq!(b.held(), 6);
        let e = b.charge(entries(5)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOMEM));
        assert_eq!(b.held(), 6, "a refused charge holds nothing");
        drop(a);
        assert_eq!(b.held(), 0);
        let _c = b.charge(entries(10)).unwrap();
        assert_eq!(b.held(), 10);
    }
}
