//! First-fit range allocator for the data area of guest memory; knows nothing about rings.

use std::collections::BTreeMap;

/// Allocation granularity; keeps buffers cache-line aligned.
const ALIGN: u64 = 64;

/// Free ranges keyed by start, coalesced on free.
#[derive(Debug)]
pub struct RangeAlloc {
    free: BTreeMap<u64, u64>,
}

impl RangeAlloc {
    /// Manage `[start, start + len)`.
    pub fn new(start: u64, len: u64) -> Self {
        let mut free = BTreeMap::new();
        let start = start.next_multiple_of(ALIGN);
        if len > ALIGN {
            free.insert(start, len - ALIGN);
        }
        RangeAlloc { free }
    }

    /// Rounded size actually reserved for a request of `len` bytes (at least one unit).
    pub fn rounded(len: u64) -> u64 {
        len.max(1).next_multiple_of(ALIGN)
    }

    /// Reserve `len` bytes; `None` when no free range is large enough.
    pub fn alloc(&mut self, len: u64) -> Option<u64> {
        let len = Self::rounded(len);
        let (&start, &flen) = self.free.iter().find(|(_, &l)| l >= len)?;
        self.free.remove(&start);
        if flen > len {
            self.free.insert(start + len, flen - len);
        }
        Some(start)
    }

    /// Return a range obtained from `alloc(len)`.
    pub fn free(&mut self, start: u64, len: u64) {
        let mut start = start;
        let mut len = Self::rounded(len);
        if let Some((&next, &nlen)) = self.free.range(start + len..).next() {
            if next == start + len {
                self.free.remove(&next);
                len += nlen;
            }
        }
        if let Some((&prev, &plen)) = self.free.range(..start).next_back() {
            if prev + plen == start {
                self.free.remove(&prev);
                start = prev;
                len += plen;
            }
        }
        self.free.insert(start, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_free_coalesces() {
        let mut a = RangeAlloc::new(0, 1024 + ALIGN);
        let x = a.alloc(100).unwrap();
        let y = a.alloc(500).unwrap();
        let z = a.alloc(300).unwrap();
        assert!(a.alloc(200).is_none());
        a.free(y, 500);
        a.free(x, 100);
        a.free(z, 300);
        assert_eq!(a.alloc(1024), Some(0));
    }
}
