//! What the daemon knows of the guest's host-side locks, as plain data: which POSIX byte
//! ranges each lock owner holds on each node (merged and split as POSIX says, so it equals
//! what the host keeps on that owner's description), which handles each owner's requests
//! came through, which handles hold flock locks, and which owners wait for what. From that it answers who blocks a request and whether waiting
//! would close a cycle (EDEADLK). No system calls here: `ops/lock.rs` keeps it in step with
//! the host, under one mutex.

use std::collections::{HashMap, HashSet};

/// A lock's kind as this table keeps it (an unlock is not a kind of lock held).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shared {
    /// F_RDLCK / LOCK_SH.
    Read,
    /// F_WRLCK / LOCK_EX.
    Write,
}

impl Shared {
    fn conflicts(self, other: Shared) -> bool {
        self == Shared::Write || other == Shared::Write
    }
}

/// An inclusive byte range; `end == u64::MAX` reaches the end of the file, however it grows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// First byte.
    pub start: u64,
    /// Last byte (inclusive).
    pub end: u64,
}

impl Span {
    fn overlaps(self, o: Span) -> bool {
        self.start <= o.end && o.start <= self.end
    }

    /// Touching or overlapping (same-kind locks merge across both).
    fn touches(self, o: Span) -> bool {
        self.start <= o.end.saturating_add(1) && o.start <= self.end.saturating_add(1)
    }
}

/// One POSIX lock an owner holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    /// Its bytes.
    pub span: Span,
    /// Shared or exclusive.
    pub kind: Shared,
    /// The guest process that took it (F_GETLK reports it).
    pub pid: u32,
}

/// A POSIX request waiting for its range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Wait {
    node: u64,
    owner: u64,
    span: Span,
    kind: Shared,
    /// The owner closed the file (FLUSH/RELEASE) while this waited: the wait ends.
    revoked: bool,
}

/// Every lock the guest holds through this daemon, and every wait.
#[derive(Default, Debug)]
pub struct LockState {
    /// node → owner → that owner's locks, sorted by start, disjoint, same-kind neighbours
    /// merged.
    posix: HashMap<u64, HashMap<u64, Vec<Held>>>,
    /// node → handle → its flock lock and the pid that took it.
    flock: HashMap<u64, HashMap<u64, (Shared, u32)>>,
    /// (node, owner) → the handles its lock requests came through since it last closed the
    /// file (FLUSH), so that the RELEASE of the last of them can end an owner that never
    /// flushes: an open file description's own (OFD) locks.
    via: HashMap<(u64, u64), Vec<u64>>,
    /// Waiting POSIX requests by wait id.
    waits: HashMap<u64, Wait>,
    next_wait: u64,
}

/// A wait registered with [`LockState::wait`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WaitId(u64);

impl LockState {
    /// Records what a granted F_SETLK did for `owner` on `node`: `kind` None unlocks `span`.
    /// Overlapped parts of the owner's locks are replaced, split where the span cuts them,
    /// and same-kind locks that touch the new one merge with it.
    pub fn posix_apply(
        &mut self,
        node: u64,
        owner: u64,
        span: Span,
        kind: Option<Shared>,
        pid: u32,
    ) {
        let locks = self
            .posix
            .entry(node)
            .or_default()
            .entry(owner)
            .or_default();
        let mut out = Vec::with_capacity(locks.len() + 2);
        let mut new = kind.map(|kind| Held { span, kind, pid });
        for h in locks.drain(..) {
            if let Some(n) = new
                .as_mut()
                .filter(|n| n.kind == h.kind && h.span.touches(n.span))
            {
                n.span = Span {
                    start: n.span.start.min(h.span.start),
                    end: n.span.end.max(h.span.end),
                };
                continue;
            }
            if !h.span.overlaps(span) {
                out.push(h);
                continue;
            }
            if h.span.start < span.start {
                out.push(Held {
                    span: Span {
                        start: h.span.start,
                        end: span.start - 1,
                    },
                    ..h
                });
            }
            if h.span.end > span.end {
                out.push(Held {
                    span: Span {
                        start: span.end + 1,
                        end: h.span.end,
                    },
                    ..h
                });
            }
        }
        out.extend(new);
        out.sort_by_key(|h| h.span.start);
        if out.is_empty() {
            self.forget_posix_owner(node, owner);
        } else {
            *locks = out;
        }
    }

    /// Removes `owner`'s (possibly empty) entry on `node`. Whether it held any lock.
    fn forget_posix_owner(&mut self, node: u64, owner: u64) -> bool {
        let Some(m) = self.posix.get_mut(&node) else {
            return false;
        };
        let had = m.remove(&owner).is_some_and(|l| !l.is_empty());
        if m.is_empty() {
            self.posix.remove(&node);
        }
        had
    }

    /// The locks `owner` holds on `node`.
    #[cfg(test)]
    pub fn posix_held(&self, node: u64, owner: u64) -> &[Held] {
        self.posix
            .get(&node)
            .and_then(|m| m.get(&owner))
            .map_or(&[], Vec::as_slice)
    }

    /// Forgets `owner`'s locks on `node` (its description was closed: FLUSH, RELEASE) and ends
    /// its waits there. Whether it held any.
    pub fn drop_posix_owner(&mut self, node: u64, owner: u64) -> bool {
        for w in self.waits.values_mut() {
            if w.node == node && w.owner == owner {
                w.revoked = true;
            }
        }
        self.via.remove(&(node, owner));
        self.forget_posix_owner(node, owner)
    }

    /// Notes that a request of `owner` on `node` came through handle `fh`.
    pub fn note_handle(&mut self, node: u64, owner: u64, fh: u64) {
        let hs = self.via.entry((node, owner)).or_default();
        if !hs.contains(&fh) {
            hs.push(fh);
        }
    }

    /// Handle `fh` of `node` is released (the guest closed the last descriptor of that open
    /// file description): every owner whose requests came through it since its last FLUSH is
    /// dropped, as [`LockState::drop_posix_owner`] does. An OFD lock's owner is the
    /// description itself, which never flushes, so this is where its locks end; a process's
    /// (POSIX) owner removed the descriptor from its table first, and that close flushed it
    /// already, so none is left here that should live on. The owners dropped, sorted.
    pub fn release_handle(&mut self, node: u64, fh: u64) -> Vec<u64> {
        let mut gone: Vec<u64> = self
            .via
            .iter()
            .filter(|((n, _), hs)| *n == node && hs.contains(&fh))
            .map(|((_, o), _)| *o)
            .collect();
        gone.sort_unstable();
        for o in &gone {
            self.drop_posix_owner(node, *o);
        }
        gone
    }

    /// Every owner with a lock, or a request noted, on `node`, sorted.
    pub fn owners_of(&self, node: u64) -> Vec<u64> {
        let mut out: Vec<u64> = self
            .posix
            .get(&node)
            .into_iter()
            .flat_map(|m| m.keys().copied())
            .chain(self.via.keys().filter(|(n, _)| *n == node).map(|(_, o)| *o))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The handles each owner's requests came through (kept across [`LockState::clear`] by
    /// a retake of the same session's locks).
    pub fn handles_noted(&self) -> HashMap<(u64, u64), Vec<u64>> {
        self.via.clone()
    }

    /// Restores what [`LockState::handles_noted`] returned.
    pub fn restore_handles(&mut self, via: HashMap<(u64, u64), Vec<u64>>) {
        self.via = via;
    }

    /// The first lock of another owner than `owner` on `node` that conflicts with `kind` on
    /// `span`, with its owner.
    #[cfg(test)]
    pub fn posix_conflict(
        &self,
        node: u64,
        owner: u64,
        span: Span,
        kind: Shared,
    ) -> Option<(u64, Held)> {
        self.posix_conflicts(node, owner, span, kind).next()
    }

    /// A lock of another owner than `owner` on `node` of exactly `span` and `kind` (the one
    /// the host reported as conflicting, when it is the guest's).
    pub fn posix_holder(&self, node: u64, owner: u64, span: Span, kind: Shared) -> Option<Held> {
        self.posix
            .get(&node)?
            .iter()
            .filter(|(o, _)| **o != owner)
            .flat_map(|(_, locks)| locks.iter())
            .find(|h| h.span == span && h.kind == kind)
            .copied()
    }

    /// The owners other than `owner` whose locks on `node` conflict with `kind` on `span`,
    /// sorted, each once.
    pub fn posix_blockers(&self, node: u64, owner: u64, span: Span, kind: Shared) -> Vec<u64> {
        let mut by: Vec<u64> = self
            .posix_conflicts(node, owner, span, kind)
            .map(|(o, _)| o)
            .collect();
        by.sort_unstable();
        by.dedup();
        by
    }

    fn posix_conflicts(
        &self,
        node: u64,
        owner: u64,
        span: Span,
        kind: Shared,
    ) -> impl Iterator<Item = (u64, Held)> + '_ {
        self.posix
            .get(&node)
            .into_iter()
            .flatten()
            .filter(move |(o, _)| **o != owner)
            .flat_map(|(o, locks)| locks.iter().map(move |h| (*o, *h)))
            .filter(move |(_, h)| h.span.overlaps(span) && h.kind.conflicts(kind))
    }

    /// Whether `owner` waiting for `kind` on `span` of `node` would close a cycle of owners
    /// each waiting for a lock the next holds. Only locks and waits this table knows are
    /// followed (a host process's or another daemon's are not).
    pub fn would_deadlock(&self, node: u64, owner: u64, span: Span, kind: Shared) -> bool {
        let mut todo: Vec<u64> = self
            .posix_conflicts(node, owner, span, kind)
            .map(|(o, _)| o)
            .collect();
        let mut seen = HashSet::new();
        while let Some(o) = todo.pop() {
            if o == owner {
                return true;
            }
            if !seen.insert(o) {
                continue;
            }
            for w in self.waits.values().filter(|w| w.owner == o && !w.revoked) {
                todo.extend(
                    self.posix_conflicts(w.node, w.owner, w.span, w.kind)
                        .map(|(b, _)| b),
                );
            }
        }
        false
    }

    /// Registers `owner`'s request as waiting (other owners' deadlock checks follow it).
    pub fn wait(&mut self, node: u64, owner: u64, span: Span, kind: Shared) -> WaitId {
        self.next_wait += 1;
        self.waits.insert(
            self.next_wait,
            Wait {
                node,
                owner,
                span,
                kind,
                revoked: false,
            },
        );
        WaitId(self.next_wait)
    }

    /// Whether the wait's owner closed the file since it began.
    pub fn revoked(&self, id: WaitId) -> bool {
        self.waits.get(&id.0).is_some_and(|w| w.revoked)
    }

    /// The wait is over (granted, refused or cancelled).
    pub fn unwait(&mut self, id: WaitId) {
        self.waits.remove(&id.0);
    }

    /// Records handle `fh`'s flock lock on `node` (`kind` None: it has none any more).
    pub fn flock_set(&mut self, node: u64, fh: u64, kind: Option<Shared>, pid: u32) {
        match kind {
            Some(k) => {
                self.flock.entry(node).or_default().insert(fh, (k, pid));
            }
            None => {
                if let Some(m) = self.flock.get_mut(&node) {
                    m.remove(&fh);
                    if m.is_empty() {
                        self.flock.remove(&node);
                    }
                }
            }
        }
    }

    /// The flock lock handle `fh` holds on `node`.
    pub fn flock_held(&self, node: u64, fh: u64) -> Option<Shared> {
        self.flock.get(&node)?.get(&fh).map(|(k, _)| *k)
    }

    /// The handles other than `fh` whose flock lock on `node` conflicts with `kind`, sorted.
    pub fn flock_blockers(&self, node: u64, fh: u64, kind: Shared) -> Vec<u64> {
        let mut by: Vec<u64> = self
            .flock
            .get(&node)
            .into_iter()
            .flatten()
            .filter(|(h, (k, _))| **h != fh && k.conflicts(kind))
            .map(|(h, _)| *h)
            .collect();
        by.sort_unstable();
        by
    }

    /// Every POSIX lock: (node, owner, lock), sorted (for a session image).
    pub fn posix_all(&self) -> Vec<(u64, u64, Held)> {
        let mut out: Vec<(u64, u64, Held)> = self
            .posix
            .iter()
            .flat_map(|(n, m)| {
                m.iter()
                    .flat_map(move |(o, l)| l.iter().map(move |h| (*n, *o, *h)))
            })
            .collect();
        out.sort_unstable_by_key(|(n, o, h)| (*n, *o, h.span.start));
        out
    }

    /// Every flock lock: (node, handle, kind, pid), sorted (for a session image).
    pub fn flock_all(&self) -> Vec<(u64, u64, Shared, u32)> {
        let mut out: Vec<_> = self
            .flock
            .iter()
            .flat_map(|(n, m)| m.iter().map(move |(h, (k, p))| (*n, *h, *k, *p)))
            .collect();
        out.sort_unstable_by_key(|(n, h, ..)| (*n, *h));
        out
    }

    /// Every POSIX lock and flock lock this table holds, counted (for the session-end log).
    pub fn count(&self) -> usize {
        let posix: usize = self
            .posix
            .values()
            .flat_map(|m| m.values())
            .map(Vec::len)
            .sum();
        posix + self.flock.values().map(HashMap::len).sum::<usize>()
    }

    /// The session is over: no lock is held, every wait is revoked.
    pub fn clear(&mut self) {
        self.posix.clear();
        self.flock.clear();
        self.via.clear();
        for w in self.waits.values_mut() {
            w.revoked = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const EOF: u64 = u64::MAX;

    fn sp(start: u64, end: u64) -> Span {
        Span { start, end }
    }

    #[test]
    fn unlock_splits_and_same_kind_merges() {
        let mut s = LockState::default();
        s.posix_apply(1, 7, sp(0, 99), Some(Shared::Write), 10);
        s.posix_apply(1, 7, sp(40, 59), None, 10);
        let spans: Vec<_> = s
            .posix_held(1, 7)
            .iter()
            .map(|h| (h.span.start, h.span.end))
            .collect();
        assert_eq!(spans, [(0, 39), (60, 99)]);
        // Filling the hole merges the three into one.
        s.posix_apply(1, 7, sp(40, 59), Some(Shared::Write), 10);
        assert_eq!(
            s.posix_held(1, 7),
            [Held {
                span: sp(0, 99),
                kind: Shared::Write,
                pid: 10
            }]
        );
        // A read lock inside a write lock splits it into three.
        s.posix_apply(1, 7, sp(10, 19), Some(Shared::Read), 10);
        let kinds: Vec<_> = s
            .posix_held(1, 7)
            .iter()
            .map(|h| (h.span.start, h.kind))
            .collect();
        assert_eq!(
            kinds,
            [(0, Shared::Write), (10, Shared::Read), (20, Shared::Write)]
        );
        // Unlocking everything forgets the owner.
        s.posix_apply(1, 7, sp(0, EOF), None, 10);
        assert!(s.posix_held(1, 7).is_empty());
        assert_eq!(s.count(), 0);
    }

    #[test]
    fn conflicts_are_other_owners_and_a_writer() {
        let mut s = LockState::default();
        s.posix_apply(1, 7, sp(0, 9), Some(Shared::Read), 10);
        assert!(s.posix_conflict(1, 8, sp(5, 5), Shared::Read).is_none());
        assert_eq!(
            s.posix_conflict(1, 8, sp(5, 5), Shared::Write)
                .map(|(o, _)| o),
            Some(7)
        );
        assert!(
            s.posix_conflict(1, 7, sp(5, 5), Shared::Write).is_none(),
            "never itself"
        );
        assert!(
            s.posix_conflict(2, 8, sp(5, 5), Shared::Write).is_none(),
            "another node"
        );
        assert!(s.posix_conflict(1, 8, sp(10, EOF), Shared::Write).is_none());
    }

    #[test]
    fn a_two_owner_cycle_is_a_deadlock() {
        let mut s = LockState::default();
        s.posix_apply(1, 7, sp(0, 0), Some(Shared::Write), 10);
        s.posix_apply(1, 8, sp(1, 1), Some(Shared::Write), 11);
        assert!(!s.would_deadlock(1, 7, sp(1, 1), Shared::Write));
        let w = s.wait(1, 7, sp(1, 1), Shared::Write);
        assert!(s.would_deadlock(1, 8, sp(0, 0), Shared::Write));
        // A request that 7 does not block is no cycle.
        assert!(!s.would_deadlock(1, 8, sp(5, 5), Shared::Write));
        s.unwait(w);
        assert!(!s.would_deadlock(1, 8, sp(0, 0), Shared::Write));
    }

    #[test]
    fn cycles_through_three_owners_and_two_files_are_found() {
        let mut s = LockState::default();
        // 7 holds file 1, 8 holds file 2, 9 holds file 1 byte 5.
        s.posix_apply(1, 7, sp(0, 0), Some(Shared::Write), 10);
        s.posix_apply(2, 8, sp(0, 0), Some(Shared::Write), 11);
        s.posix_apply(1, 9, sp(5, 5), Some(Shared::Read), 12);
        s.wait(2, 7, sp(0, 0), Shared::Read); // 7 waits for 8
        s.wait(1, 8, sp(5, 5), Shared::Write); // 8 waits for 9
        assert!(
            s.would_deadlock(1, 9, sp(0, 0), Shared::Read),
            "9 → 7 → 8 → 9"
        );
        assert!(
            !s.would_deadlock(1, 10, sp(0, 0), Shared::Read),
            "10 holds nothing"
        );
    }

    #[test]
    fn a_closed_owner_wait_is_revoked_and_not_followed() {
        let mut s = LockState::default();
        s.posix_apply(1, 7, sp(0, 0), Some(Shared::Write), 10);
        s.posix_apply(1, 8, sp(1, 1), Some(Shared::Write), 11);
        let w = s.wait(1, 7, sp(1, 1), Shared::Write);
        assert!(s.drop_posix_owner(1, 7));
        assert!(s.revoked(w));
        assert!(!s.would_deadlock(1, 8, sp(0, 0), Shared::Write));
    }

    #[test]
    fn releasing_a_handle_ends_the_owners_that_came_through_it() {
        let mut s = LockState::default();
        // 7: an OFD owner (the description of handle 100); 8: a process's owner that locked
        // through handle 100 and later through 101; 9: one on handle 101 only.
        s.posix_apply(1, 7, sp(0, 9), Some(Shared::Write), 10);
        s.note_handle(1, 7, 100);
        s.posix_apply(1, 8, sp(20, 29), Some(Shared::Read), 11);
        s.note_handle(1, 8, 100);
        s.note_handle(1, 8, 101);
        s.posix_apply(1, 9, sp(40, 49), Some(Shared::Read), 12);
        s.note_handle(1, 9, 101);
        let w = s.wait(1, 7, sp(40, 49), Shared::Write);
        assert_eq!(s.release_handle(1, 100), [7, 8]);
        assert!(s.revoked(w), "its wait ends with it");
        assert!(
            s.posix_conflict(1, 5, sp(0, 99), Shared::Write)
                .map(|(o, _)| o)
                == Some(9)
        );
        assert_eq!(s.owners_of(1), [9]);
        assert!(s.release_handle(2, 101).is_empty(), "another node's handle");
        assert_eq!(s.release_handle(1, 101), [9]);
        assert_eq!(s.count(), 0);
        assert!(s.owners_of(1).is_empty());
    }

    #[test]
    fn a_flush_forgets_the_handles_an_owner_came_through() {
        let mut s = LockState::default();
        // A process locks through handle 100, closes another descriptor of the file (FLUSH:
        // all its locks go), then locks again through handle 101: releasing 100 leaves it.
        s.posix_apply(1, 8, sp(0, 0), Some(Shared::Write), 11);
        s.note_handle(1, 8, 100);
        assert!(s.drop_posix_owner(1, 8));
        s.posix_apply(1, 8, sp(5, 5), Some(Shared::Write), 11);
        s.note_handle(1, 8, 101);
        assert!(s.release_handle(1, 100).is_empty());
        assert_eq!(s.posix_held(1, 8).len(), 1);
        // An owner with no lock left (all unlocked, or GETLK only) is still noted, so that
        // its host description goes with the handle.
        s.note_handle(1, 12, 100);
        assert_eq!(s.owners_of(1), [8, 12]);
        assert_eq!(s.release_handle(1, 100), [12]);
    }

    #[test]
    fn flock_conflicts_between_handles() {
        let mut s = LockState::default();
        s.flock_set(1, 100, Some(Shared::Read), 10);
        assert!(s.flock_blockers(1, 101, Shared::Read).is_empty());
        assert_eq!(s.flock_blockers(1, 101, Shared::Write), [100]);
        assert!(
            s.flock_blockers(1, 100, Shared::Write).is_empty(),
            "its own lock converts"
        );
        s.flock_set(1, 100, None, 10);
        assert!(s.flock_blockers(1, 101, Shared::Write).is_empty());
        assert_eq!(s.count(), 0);
    }

    /// A byte-by-byte model of one owner's locks over the first `N` bytes (the last cell
    /// stands for "from here to the end of the file").
    const N: u64 = 24;

    fn model_apply(m: &mut [Option<Shared>], span: Span, kind: Option<Shared>) {
        let end = span.end.min(N - 1);
        for c in &mut m[span.start as usize..=end as usize] {
            *c = kind;
        }
    }

    fn op() -> impl Strategy<Value = (Span, Option<Shared>)> {
        (0..N - 1, 0..N + 2, 0..3u8).prop_map(|(s, len, k)| {
            // len N+1 and above: to the end of the file.
            let end = if len > N { EOF } else { (s + len).min(N - 2) };
            let kind = match k {
                0 => None,
                1 => Some(Shared::Read),
                _ => Some(Shared::Write),
            };
            (sp(s, end.max(s)), kind)
        })
    }

    proptest! {
        /// Any sequence of locks and unlocks leaves exactly the bytes the model holds, kept
        /// as disjoint, sorted ranges with no two touching ranges of the same kind (what the
        /// kernel keeps for one description).
        #[test]
        fn posix_apply_matches_a_byte_model(ops in proptest::collection::vec(op(), 1..40)) {
            let mut s = LockState::default();
            let mut model = vec![None; N as usize];
            for (span, kind) in ops {
                s.posix_apply(1, 7, span, kind, 1);
                model_apply(&mut model, span, kind);
            }
            let mut got = vec![None; N as usize];
            let held = s.posix_held(1, 7);
            for w in held.windows(2) {
                prop_assert!(w[0].span.end < w[1].span.start, "disjoint and sorted: {held:?}");
                prop_assert!(!(w[0].kind == w[1].kind && w[0].span.touches(w[1].span)), "merged: {held:?}");
            }
            for h in held {
                model_apply(&mut got, h.span, Some(h.kind));
                // Only spans that run to the end of the file reach the last cell.
                prop_assert!(h.span.end < N - 1 || h.span.end == EOF, "{held:?}");
            }
            prop_assert_eq!(got, model);
        }
    }
}
