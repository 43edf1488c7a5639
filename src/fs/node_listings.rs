//! The listings of directories the guest reads without opening them. Once its kernel stops
//! sending OPENDIR (FUSE_NO_OPENDIR_SUPPORT, `ops::readdir::opendir`), a READDIR carries no
//! handle to hold a listing between two pages of it: only the offset of the last entry the
//! reader has. So the offsets say where a reading stands by the entries' names, not by their
//! places in one listing: each listing is served in the order of its names' keys (a fixed
//! hash), an entry's offset is its key, and a reading goes on with the entries whose keys are
//! above its offset, in whatever listing of the directory is at hand. The latest listing of
//! each directory is kept (at most [`KEPT`]), so that paging through a directory does not read
//! it again per page; a reading whose listing was dropped, or a daemon that took over the
//! session, builds a new one and goes on at the same key. An entry that stays in the
//! directory while it is read is served exactly once whatever was added or removed meanwhile
//! (POSIX's promise for `readdir`); by places in a listing, a rebuilt listing of a directory
//! that lost entries meanwhile (`rm -rf` reading it) would skip as many as it lost. Pure
//! bookkeeping: listings are built by `ops::readdir`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::fs::readdir_snapshot::DirSnapshot;
use crate::sync::LockRecover;

/// Listings kept at most (a walk reads one directory at a time per reader).
pub(crate) const KEPT: usize = 64;

/// The offsets of `.` and `..`, served first.
const DOT: u64 = 1;
const DOTDOT: u64 = 2;

/// Bits of an offset that number the names of one key (names whose hashes agree in their
/// top 58 bits: up to 16 are told apart).
const RUN_BITS: u32 = 4;

/// A listing in the order its offsets give, with those offsets.
pub(crate) struct Keyed {
    /// The entries, `.` and `..` first, then by key.
    pub snapshot: DirSnapshot,
    /// Entry `i`'s offset (increasing; strictly but past the 16th name of one key).
    cookies: Vec<u64>,
}

impl Keyed {
    /// `snapshot` put in key order.
    pub(crate) fn new(snapshot: DirSnapshot) -> Keyed {
        let mut order: Vec<(u64, usize)> = (0..snapshot.len())
            .filter_map(|i| Some((key(snapshot.get(i)?.name), i)))
            .collect();
        order.sort_unstable_by(|a, b| {
            let name = |i| snapshot.get(i).map(|e| e.name);
            a.0.cmp(&b.0).then_with(|| name(a.1).cmp(&name(b.1)))
        });
        let cookies = offsets(order.iter().map(|&(k, _)| k));
        let order: Vec<usize> = order.into_iter().map(|(_, i)| i).collect();
        Keyed {
            snapshot: snapshot.reordered(&order),
            cookies,
        }
    }

    /// The offset handed out with entry `index`: the next READDIR starts after it.
    pub(crate) fn cookie(&self, index: usize) -> u64 {
        self.cookies[index]
    }

    /// The index of the first entry after `offset` (an offset from [`Keyed::cookie`] of any
    /// listing of the same directory, or 0 for the start).
    pub(crate) fn index_after(&self, offset: u64) -> usize {
        self.cookies.partition_point(|&c| c <= offset)
    }
}

/// The offsets of entries whose keys come in ascending order: each key, with its place among
/// the equal keys before it in the [`RUN_BITS`] (the 16th and later of one key share one).
fn offsets(sorted_keys: impl Iterator<Item = u64>) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::with_capacity(sorted_keys.size_hint().0);
    let mut run = 0;
    let mut last = None;
    for k in sorted_keys {
        run = match last {
            Some(l) if l == k => (run + 1).min((1 << RUN_BITS) - 1),
            _ => 0,
        };
        last = Some(k);
        out.push(k | run);
    }
    out
}

/// An entry's key: `.` and `..` first, then the top 58 bits of the name's 64-bit FNV-1a
/// hash plus one, above [`RUN_BITS`] zero bits for names with the same key. The function is fixed
/// here (not std's hasher, which may change between Rust releases): a daemon that takes over
/// a session reads the offsets the previous one gave.
fn key(name: &[u8]) -> u64 {
    match name {
        b"." => DOT,
        b".." => DOTDOT,
        _ => {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for &b in name {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
            // 58 bits plus one (past DOTDOT), shifted over the run bits: at most 2^62 + 15
            // with them, a positive loff_t for the guest's lseek and seekdir.
            ((h >> 6) + 1) << RUN_BITS
        }
    }
}

/// The latest listing of each directory node read without a handle, newest last.
#[derive(Default)]
pub(crate) struct NodeListings {
    kept: Mutex<VecDeque<(u64, Arc<Keyed>)>>,
}

impl NodeListings {
    /// The kept listing of directory `node`, if any (it becomes the newest).
    pub(crate) fn latest(&self, node: u64) -> Option<Arc<Keyed>> {
        let mut kept = self.kept.locked();
        let at = kept.iter().position(|(n, _)| *n == node)?;
        let entry = kept.remove(at)?;
        let listing = entry.1.clone();
        kept.push_back(entry);
        Some(listing)
    }

    /// Keeps `listing` as the latest of directory `node`, in place of the one before. The
    /// oldest goes when [`KEPT`] are kept.
    pub(crate) fn keep(&self, node: u64, listing: Arc<Keyed>) {
        let mut kept = self.kept.locked();
        kept.retain(|(n, _)| *n != node);
        if kept.len() == KEPT {
            kept.pop_front();
        }
        kept.push_back((node, listing));
    }

    /// Drops every kept listing (their entries leave the listing budget); how many there were.
    pub(crate) fn clear(&self) -> usize {
        std::mem::take(&mut *self.kept.locked()).len()
    }

    /// Listings kept now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.kept.locked().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::readdir_snapshot::{Listing, ListingBudget};

    fn keyed(budget: &ListingBudget, names: &[&str]) -> Keyed {
        let mut l = Listing::default();
        for (i, n) in [".", ".."].iter().chain(names).enumerate() {
            l.push(n.as_bytes(), i as u64 + 10, 8).unwrap();
        }
        Keyed::new(budget.charge(l).unwrap())
    }

    /// The names a reader gets from `offset` on in `k`, `page` at a time, and the offset
    /// after them.
    fn read(k: &Keyed, offset: u64, page: usize) -> (Vec<String>, u64) {
        let from = k.index_after(offset);
        let names: Vec<String> = k
            .snapshot
            .entries_from(from)
            .take(page)
            .map(|(_, e)| String::from_utf8(e.name.to_vec()).unwrap())
            .collect();
        let last = from + names.len();
        let offset = if last > from {
            k.cookie(last - 1)
        } else {
            offset
        };
        (names, offset)
    }

    #[test]
    fn the_key_function_is_fixed() {
        // FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c; of "" 0xcbf29ce484222325.
        assert_eq!(key(b"a"), ((0xaf63_dc4c_8601_ec8c_u64 >> 6) + 1) << 4);
        assert_eq!(key(b""), ((0xcbf2_9ce4_8422_2325_u64 >> 6) + 1) << 4);
        assert_eq!((key(b"."), key(b"..")), (1, 2));
        for name in [&b"a"[..], b"", &[0xff; 255]] {
            assert!(i64::try_from(key(name) | 0xf).is_ok(), "a positive loff_t");
        }
    }

    #[test]
    fn dots_come_first_and_offsets_rise() {
        let b = ListingBudget::new(100);
        let k = keyed(&b, &["b", "a", "c", "d"]);
        let names: Vec<&[u8]> = k.snapshot.entries_from(0).map(|(_, e)| e.name).collect();
        assert_eq!(&names[..2], [&b"."[..], b".."]);
        assert_eq!(names.len(), 6);
        for i in 1..6 {
            assert!(k.cookie(i) > k.cookie(i - 1));
        }
        assert_eq!(k.index_after(0), 0);
        assert_eq!(k.index_after(k.cookie(5)), 6, "past the end: nothing more");
        // Entries keep their numbers through the reordering.
        let e = k
            .snapshot
            .entries_from(2)
            .find(|(_, e)| e.name == b"b")
            .unwrap()
            .1;
        assert_eq!(e.ino, 12, "b was pushed third");
        assert_eq!(b.held(), 6, "the reordered listing is charged once");
        drop(k);
        assert_eq!(b.held(), 0);
    }

    #[test]
    fn a_reading_goes_on_in_a_new_listing_of_an_emptied_directory_without_a_skip() {
        // rm -rf: reads a page, removes what it read, reads on; the listing it started in
        // was dropped meanwhile, so it goes on in a new one of what is left.
        let b = ListingBudget::new(1_000);
        let names: Vec<String> = (0..100).map(|i| format!("d{i}")).collect();
        let all: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut left = all.clone();
        let mut seen = Vec::new();
        let mut offset = 0;
        loop {
            let k = keyed(&b, &left);
            let (page, next) = read(&k, offset, 7);
            if page.is_empty() {
                break;
            }
            offset = next;
            left.retain(|n| !page.iter().any(|p| p == n));
            seen.extend(page.into_iter().filter(|n| n != "." && n != ".."));
        }
        assert!(left.is_empty(), "never served: {left:?}");
        seen.sort();
        let mut want: Vec<String> = names.clone();
        want.sort();
        assert_eq!(seen, want, "each once");
    }

    #[test]
    fn names_added_or_removed_meanwhile_leave_the_others_served_once() {
        let b = ListingBudget::new(1_000);
        let before: Vec<String> = (0..50).map(|i| format!("f{i}")).collect();
        let first = keyed(&b, &before.iter().map(String::as_str).collect::<Vec<_>>());
        let (mut seen, offset) = read(&first, 0, 20);
        // Meanwhile: f0..f9 removed, n0..n9 added.
        let after: Vec<String> = before[10..]
            .iter()
            .cloned()
            .chain((0..10).map(|i| format!("n{i}")))
            .collect();
        let second = keyed(&b, &after.iter().map(String::as_str).collect::<Vec<_>>());
        let (rest, _) = read(&second, offset, 1_000);
        seen.extend(rest);
        for n in &before[10..] {
            assert_eq!(seen.iter().filter(|s| *s == n).count(), 1, "{n}");
        }
    }

    #[test]
    fn names_of_one_key_are_told_apart() {
        // Three names with one key (a collision) and one after: the run bits keep their
        // offsets apart, so a reader that stops between two goes on with the next.
        let (k, next) = (5 << RUN_BITS, 9 << RUN_BITS);
        let cookies = offsets([1, 2, k, k, k, next].into_iter());
        assert_eq!(cookies, [1, 2, k, k | 1, k | 2, next]);
        let mut l = Listing::default();
        for n in [".", "..", "p", "q", "r", "s"] {
            l.push(n.as_bytes(), 1, 8).unwrap();
        }
        let keyed = Keyed {
            snapshot: ListingBudget::new(10).charge(l).unwrap(),
            cookies,
        };
        assert_eq!(keyed.index_after(k), 3);
        assert_eq!(keyed.index_after(k | 1), 4);
        assert_eq!(keyed.index_after(k | 2), 5);
        // Sixteen and more of one key: the last ones share an offset, none goes backwards.
        let many = offsets(std::iter::repeat_n(k, 20));
        assert!(many.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(many[19], k | 15);
    }

    #[test]
    fn each_node_keeps_its_latest_listing_and_the_oldest_goes_first() {
        let b = ListingBudget::new(1_000);
        let l = NodeListings::default();
        l.keep(5, Arc::new(keyed(&b, &["a"])));
        l.keep(5, Arc::new(keyed(&b, &["a", "b"])));
        assert_eq!(l.len(), 1);
        assert_eq!(l.latest(5).unwrap().snapshot.len(), 4);
        assert!(l.latest(6).is_none());
        for n in 0..KEPT as u64 {
            l.keep(100 + n, Arc::new(keyed(&b, &["x"])));
        }
        assert_eq!(l.len(), KEPT);
        assert!(l.latest(5).is_none(), "the oldest went");
        // Reading one makes it the newest: the next to go is another.
        assert!(l.latest(100).is_some());
        l.keep(999, Arc::new(keyed(&b, &["x"])));
        assert!(l.latest(100).is_some());
        assert!(l.latest(101).is_none());
        assert_eq!(l.clear(), KEPT);
        assert_eq!(b.held(), 0);
    }
}
