//! A merged directory listing: every branch's entries, names de-duplicated with the first
//! branch winning, preceded by `.` and `..`. Pure data; built by `ops::readdir`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// One entry of a merged listing, as read back from a [`DirSnapshot`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MergedEntry<'a> {
    /// The name.
    pub name: &'a [u8],
    /// The union inode number the guest will also see from getattr.
    pub ino: u64,
    /// The `DT_*` type.
    pub dtype: u32,
}

/// Where one entry's name ends in the snapshot's name buffer, and its number and type.
#[derive(Clone, Copy, Debug)]
struct Slot {
    ino: u64,
    end: u32,
    dtype: u8,
}

/// A listing being built: entries appended in the order they will be served. Names go into
/// one buffer (no allocation per entry: a 10,000-entry directory is two buffers, not 10,000).
#[derive(Debug, Default)]
pub struct Listing {
    names: Vec<u8>,
    slots: Vec<Slot>,
}

impl Listing {
    /// An empty listing with room for about `entries` entries.
    pub fn with_capacity(entries: usize) -> Self {
        Listing {
            names: Vec::with_capacity(entries * 16),
            slots: Vec::with_capacity(entries),
        }
    }

    /// Appends an entry. ENOMEM past 4 GiB of names (no host directory gets there).
    pub fn push(&mut self, name: &[u8], ino: u64, dtype: u32) -> std::io::Result<()> {
        let end = u32::try_from(self.names.len() + name.len())
            .map_err(|_| std::io::Error::from_raw_os_error(libc::ENOMEM))?;
        self.names.extend_from_slice(name);
        self.slots.push(Slot {
            ino,
            end,
            dtype: dtype as u8,
        });
        Ok(())
    }

    /// Entries so far.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    fn get(&self, i: usize) -> Option<MergedEntry<'_>> {
        let slot = self.slots.get(i)?;
        let start = match i {
            0 => 0,
            _ => self.slots[i - 1].end as usize,
        };
        Some(MergedEntry {
            name: &self.names[start..slot.end as usize],
            ino: slot.ino,
            dtype: u32::from(slot.dtype),
        })
    }
}

/// The listing served to one open directory handle. Its entries count against the budget it
/// was charged to (see [`ListingBudget`]) until it is dropped.
#[derive(Debug, Default)]
pub struct DirSnapshot {
    listing: Listing,
    charged: Option<Arc<AtomicUsize>>,
}

impl DirSnapshot {
    /// Entries in the listing; offsets are index + 1.
    pub fn len(&self) -> usize {
        self.listing.len()
    }

    /// Entry `i` (offset `i + 1`), if the listing has it.
    pub fn get(&self, i: usize) -> Option<MergedEntry<'_>> {
        self.listing.get(i)
    }

    /// The same entries in the order of `order` (a permutation of the indices), charged to
    /// the budget this one was charged to (not twice).
    pub fn reordered(mut self, order: &[usize]) -> DirSnapshot {
        let mut listing = Listing {
            names: Vec::with_capacity(self.listing.names.len()),
            slots: Vec::with_capacity(order.len()),
        };
        for e in order.iter().filter_map(|&i| self.listing.get(i)) {
            // No longer than the listing it comes from: it fits.
            let _ = listing.push(e.name, e.ino, e.dtype);
        }
        // What this one was charged for moves with the new one (the same length for a
        // permutation; what a caller's bug adds or leaves out is charged as it is).
        let charged = self.charged.take();
        if let Some(held) = &charged {
            let (was, is) = (self.listing.len(), listing.len());
            if is < was {
                held.fetch_sub(was - is, Ordering::AcqRel);
            } else {
                held.fetch_add(is - was, Ordering::AcqRel);
            }
        }
        DirSnapshot { listing, charged }
    }

    /// The entries from index `from` on, with their indices, in the order served.
    pub fn entries_from(&self, from: usize) -> impl Iterator<Item = (usize, MergedEntry<'_>)> {
        (from..self.len()).filter_map(move |i| Some((i, self.get(i)?)))
    }
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

    /// Charges `listing` as a snapshot, or ENOMEM if that would exceed the budget.
    pub fn charge(&self, listing: Listing) -> std::io::Result<DirSnapshot> {
        let n = listing.len();
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
            listing,
            charged: Some(self.held.clone()),
        })
    }
}

impl Drop for DirSnapshot {
    fn drop(&mut self) {
        if let Some(held) = &self.charged {
            held.fetch_sub(self.listing.len(), Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(n: usize) -> Listing {
        let mut l = Listing::default();
        for i in 0..n {
            l.push(i.to_string().as_bytes(), i as u64 + 2, 8).unwrap();
        }
        l
    }

    #[test]
    fn entries_read_back_as_pushed() {
        let mut l = Listing::with_capacity(2);
        let names: [&[u8]; 5] = [b".", b"..", b"", b"a-longer-name", b"x"];
        for (i, n) in names.iter().enumerate() {
            l.push(n, 100 + i as u64, i as u32 + 1).unwrap();
        }
        let snap = ListingBudget::new(10).charge(l).unwrap();
        assert_eq!(snap.len(), 5);
        for (i, n) in names.iter().enumerate() {
            let e = snap.get(i).unwrap();
            assert_eq!((e.name, e.ino, e.dtype), (*n, 100 + i as u64, i as u32 + 1));
        }
        assert_eq!(snap.get(5), None);
        let tail: Vec<_> = snap.entries_from(3).map(|(i, e)| (i, e.name)).collect();
        assert_eq!(tail, vec![(3, &b"a-longer-name"[..]), (4, &b"x"[..])]);
        assert_eq!(snap.entries_from(9).count(), 0);
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
