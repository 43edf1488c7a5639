//! The lookup memo: per directory, which branch position holds the first copy of a name (or
//! that no branch does), and on which branches the directory itself is absent, so that a
//! first-found lookup probes one branch instead of every branch. Pure bookkeeping with the
//! whole trust policy in this file; it never touches a branch (`ops::lookup` probes and fills
//! it) and must never answer for longer than the guest is already promised to cache names.
//!
//! Trust rule (see docs/src/union.md, "Lookups across many branches"):
//! - a fact is used only within the window the guest may cache the same answer: a found name
//!   and a directory's absences for `cache.entry`, a missing name for `cache.negative-entry`
//!   (with `cache.entry` at 0 the memo is off);
//! - every change the daemon makes to a directory's names drops that directory's names at
//!   once ([`LookupMemo::changed_in`]), and a change that can move directories or branch
//!   contents around (rmdir, rename, copy-up, path cloning, xattrs) drops everything
//!   ([`LookupMemo::changed_everywhere`]); a fill whose probes overlapped such a change is
//!   discarded (the change counter moved);
//! - positions are those of one branch set: a shard filled under another view is emptied
//!   before use, so a branch edit (a new view) invalidates everything;
//! - a directory's facts are keyed by its node and checked against its union path, so a
//!   renamed directory or a reused node number never inherits another directory's facts;
//! - memory is bounded by [`BUDGET`] bytes: a shard over its share drops its names (and, if
//!   that is not enough, everything).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::sync::LockRecover;

/// Bytes all memoized names and directories may take together (approximate: the names and
/// paths themselves plus a fixed overhead per entry). A guest naming endless names empties a
/// shard now and then; it never grows the daemon.
pub(crate) const BUDGET: usize = 4 << 20;

/// Shards (separate locks), chosen by the directory's node number.
const SHARDS: usize = 16;

/// The most names one directory's listing can leave in the memo (all of a directory's
/// names share its shard): a longer listing's tail is not worth collecting.
pub(crate) const LISTED_NAMES: usize = BUDGET / SHARDS / NAME_OVERHEAD;

/// What a name costs beyond its bytes (hash slot, hint, expiry, box header).
const NAME_OVERHEAD: usize = 48;

/// What a directory costs beyond its path (its map, facts, hash slot).
const DIR_OVERHEAD: usize = 160;

/// Scans without a memoized answer a directory sees before its absences are worth finding
/// (one probe of the directory per branch, once per window): a directory looked up in only
/// once pays nothing extra.
const SCANS_BEFORE_FACTS: u32 = 2;

/// Branch positions (bit `p` set: position `p`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Positions(smallvec::SmallVec<[u64; 2]>);

impl Positions {
    /// Whether `pos` is in the set.
    pub(crate) fn contains(&self, pos: usize) -> bool {
        self.0
            .get(pos / 64)
            .is_some_and(|w| w & (1 << (pos % 64)) != 0)
    }

    /// Adds `pos`.
    pub(crate) fn insert(&mut self, pos: usize) {
        if self.0.len() <= pos / 64 {
            self.0.resize(pos / 64 + 1, 0);
        }
        self.0[pos / 64] |= 1 << (pos % 64);
    }

    fn cost(&self) -> usize {
        self.0.len() * 8
    }
}

/// What the memo says of a name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hint {
    /// The first copy is at this branch position.
    At(usize),
    /// No branch has it.
    Nowhere,
}

/// How long facts may be trusted: the guest's own cache windows under the current options.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Windows {
    /// A found name and a directory's absences (`cache.entry`).
    pub found: Duration,
    /// A missing name (`cache.negative-entry`).
    pub missing: Duration,
}

impl Windows {
    /// Whether the memo is used at all.
    pub(crate) fn active(&self) -> bool {
        !self.found.is_zero()
    }
}

/// When a fill began (a fill is kept only if no change was made since), and until when the
/// facts it rests on hold.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ticket {
    seq: u64,
    now: u64,
    /// When the memoized facts the answer used expire (`u64::MAX`: it used none, only
    /// probes): what it records expires no later, and the guest is told no later.
    basis: u64,
}

impl Ticket {
    /// How much longer the answer may be trusted, if it rests on memoized facts.
    pub(crate) fn left(&self) -> Option<Duration> {
        (self.basis != u64::MAX).then(|| Duration::from_nanos(self.basis - self.now))
    }
}

/// What a lookup should do, from [`LookupMemo::consult`].
#[derive(Debug)]
pub(crate) struct Advice {
    /// What is known of the name, if anything, and for how much longer.
    pub hint: Option<(Hint, Duration)>,
    /// Positions where the directory itself is absent (so is the name): never probed.
    pub absent: Option<Positions>,
    /// Whether the caller should find the directory's absences now (and note them).
    pub want_facts: bool,
    /// For the fill that follows.
    pub ticket: Ticket,
}

/// One directory's facts.
#[derive(Debug)]
struct DirMemo {
    /// The directory's union path (with a trailing `/`; empty for the root) when filled.
    path: Box<[u8]>,
    /// Where the directory is absent, until when that holds, and whether every other
    /// position was checked (`false`: learnt from the lookup of the directory itself, which
    /// stopped at its first copy).
    absent: Option<(Positions, u64, bool)>,
    /// Scans with no usable answer since the absences were last found.
    scans: u32,
    /// Each name's hint and until when it holds.
    names: hashbrown::HashMap<Box<[u8]>, (Hint, u64), foldhash::fast::RandomState>,
    /// What the whole entry is charged.
    bytes: usize,
}

impl DirMemo {
    fn new(path: &[u8]) -> Self {
        DirMemo {
            path: path.into(),
            absent: None,
            scans: 0,
            names: Default::default(),
            bytes: path.len() + DIR_OVERHEAD,
        }
    }

    fn clear_names(&mut self) -> usize {
        let freed: usize = self.names.keys().map(|k| k.len() + NAME_OVERHEAD).sum();
        self.names.clear();
        self.scans = 0;
        self.bytes -= freed;
        freed
    }
}

/// The directories of one shard, all filled under one view (`owner`).
struct Shard<V> {
    owner: Weak<V>,
    dirs: hashbrown::HashMap<u64, DirMemo, foldhash::fast::RandomState>,
    bytes: usize,
}

impl<V> Default for Shard<V> {
    fn default() -> Self {
        Shard {
            owner: Weak::new(),
            dirs: Default::default(),
            bytes: 0,
        }
    }
}

impl<V> Shard<V> {
    fn owned_by(&self, view: &Arc<V>) -> bool {
        std::ptr::eq(self.owner.as_ptr(), Arc::as_ptr(view))
    }

    fn clear(&mut self) {
        self.dirs.clear();
        self.bytes = 0;
    }

    /// Makes the shard `view`'s, emptying it if it held another view's positions.
    fn adopt(&mut self, view: &Arc<V>) {
        if !self.owned_by(view) {
            self.clear();
            self.owner = Arc::downgrade(view);
        }
    }

    /// The directory's entry if it is the one at `path`; a stale one (another path: the
    /// node was renamed or its number reused) is dropped.
    fn dir(&mut self, parent: u64, path: &[u8]) -> Option<&mut DirMemo> {
        if self.dirs.get(&parent).is_some_and(|d| *d.path != *path) {
            self.forget(parent);
        }
        self.dirs.get_mut(&parent)
    }

    fn forget(&mut self, parent: u64) {
        if let Some(d) = self.dirs.remove(&parent) {
            self.bytes -= d.bytes;
        }
    }

    /// Room for `cost` more bytes within `cap`: with `evict`, names are dropped (the
    /// directories' absences, small and the most useful, stay) and, if that is not enough,
    /// the shard is emptied; without, `false` when there is no room.
    fn room(&mut self, cost: usize, cap: usize, evict: bool) -> bool {
        if self.bytes + cost <= cap {
            return true;
        }
        if !evict {
            return false;
        }
        for d in self.dirs.values_mut() {
            self.bytes -= d.clear_names();
        }
        if self.bytes + cost > cap {
            self.clear();
        }
        true
    }

    /// The directory's entry, made if missing (charged; the shard emptied if over `cap`).
    fn dir_or_new(&mut self, parent: u64, path: &[u8], cap: usize) -> &mut DirMemo {
        if self.dir(parent, path).is_none() {
            let d = DirMemo::new(path);
            self.room(d.bytes, cap, true);
            self.bytes += d.bytes;
            self.dirs.insert(parent, d);
        }
        self.dirs.get_mut(&parent).expect("just made")
    }
}

/// The memo itself (see the module header for the rules). `V` is the view whose branch
/// positions the hints use.
pub(crate) struct LookupMemo<V> {
    shards: Box<[Mutex<Shard<V>>]>,
    /// Counts the daemon's changes; a fill that began before one is dropped.
    seq: AtomicU64,
    /// The memo's clock starts here.
    base: Instant,
    /// Added to the clock (tests move time forward with it).
    skew: AtomicU64,
    /// Bytes per shard.
    cap: usize,
}

impl<V> Default for LookupMemo<V> {
    fn default() -> Self {
        Self::with_budget(BUDGET)
    }
}

/// `now + window` on the memo's clock, saturating.
fn until(now: u64, window: Duration) -> u64 {
    now.saturating_add(u64::try_from(window.as_nanos()).unwrap_or(u64::MAX))
}

impl<V> LookupMemo<V> {
    /// A memo of about `budget` bytes.
    pub(crate) fn with_budget(budget: usize) -> Self {
        LookupMemo {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            seq: AtomicU64::new(0),
            base: Instant::now(),
            skew: AtomicU64::new(0),
            cap: budget / SHARDS,
        }
    }

    fn shard(&self, parent: u64) -> &Mutex<Shard<V>> {
        &self.shards[(parent ^ (parent >> 16)) as usize % SHARDS]
    }

    /// Nanoseconds on the memo's clock.
    fn now(&self) -> u64 {
        let real = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        real.saturating_add(self.skew.load(Ordering::Relaxed))
    }

    /// Moves the memo's clock forward by `d` (tests: expiry without sleeping).
    pub(crate) fn advance(&self, d: Duration) {
        let n = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.skew.fetch_add(n, Ordering::Relaxed);
    }

    /// A ticket for a fill that is not preceded by [`LookupMemo::consult`] (a listing).
    pub(crate) fn ticket(&self) -> Ticket {
        Ticket {
            seq: self.seq.load(Ordering::Acquire),
            now: self.now(),
            basis: u64::MAX,
        }
    }

    /// What is known of `name` in directory `parent` (union path `dir`, with a trailing
    /// `/`, empty for the root) under `view`. Counts a scan when nothing usable is known.
    pub(crate) fn consult(&self, view: &Arc<V>, parent: u64, dir: &[u8], name: &[u8]) -> Advice {
        let ticket = self.ticket();
        let now = ticket.now;
        let mut advice = Advice {
            hint: None,
            absent: None,
            want_facts: false,
            ticket,
        };
        let mut shard = self.shard(parent).locked();
        // Another view's positions mean nothing under this one: the shard starts over (only
        // while requests of an old and a new view overlap do they take it in turns).
        shard.adopt(view);
        let Some(d) = shard.dir(parent, dir) else {
            // Even a first scan counts: the second one finds the absences.
            if !dir.is_empty() {
                let cap = self.cap;
                shard.dir_or_new(parent, dir, cap).scans = 1;
            }
            return advice;
        };
        advice.hint = d
            .names
            .get(name)
            .filter(|(_, until)| now < *until)
            .map(|(h, until)| (*h, Duration::from_nanos(until - now)));
        let facts = d.absent.as_ref().filter(|(_, until, _)| now < *until);
        if advice.hint.is_none() && !facts.is_some_and(|(_, _, complete)| *complete) {
            d.scans += 1;
            // (The caller finds them afresh, resting on nothing memoized.)
            advice.want_facts = d.scans >= SCANS_BEFORE_FACTS && !dir.is_empty();
        }
        if let Some((p, until, _)) = facts.filter(|_| !advice.want_facts) {
            advice.absent = Some(p.clone());
            advice.ticket.basis = *until;
        }
        advice
    }

    /// Runs `f` on the directory's entry if nothing changed since `t` (under the shard's
    /// lock, so a change either is seen or comes after and clears what `f` wrote).
    fn fill(
        &self,
        t: &Ticket,
        view: &Arc<V>,
        parent: u64,
        f: impl FnOnce(&mut Shard<V>, u64, usize),
    ) {
        let mut shard = self.shard(parent).locked();
        if self.seq.load(Ordering::Acquire) != t.seq {
            return;
        }
        shard.adopt(view);
        f(&mut shard, t.now, self.cap);
    }

    /// Records where `name` was found (or that it was found nowhere), for `w`'s window.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn note_name(
        &self,
        t: &Ticket,
        view: &Arc<V>,
        parent: u64,
        dir: &[u8],
        name: &[u8],
        hint: Hint,
        w: Windows,
    ) {
        let window = match hint {
            Hint::At(_) => w.found,
            Hint::Nowhere => w.missing,
        };
        if window.is_zero() {
            return;
        }
        self.fill(t, view, parent, |shard, now, cap| {
            let cost = name.len() + NAME_OVERHEAD;
            let known = shard
                .dir(parent, dir)
                .is_some_and(|d| d.names.contains_key(name));
            if !known {
                // Room for the name and, should the shard be emptied, its directory again.
                shard.room(cost + dir.len() + DIR_OVERHEAD, cap, true);
            }
            let d = shard.dir_or_new(parent, dir, cap);
            if put(d, name, hint, until(now, window).min(t.basis)) {
                shard.bytes += cost;
            }
        });
    }

    /// Records the positions where directory `dir` is absent; `complete` when every other
    /// one was checked.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn note_dir(
        &self,
        t: &Ticket,
        view: &Arc<V>,
        parent: u64,
        dir: &[u8],
        absent: &Positions,
        complete: bool,
        w: Windows,
    ) {
        self.fill(t, view, parent, |shard, now, cap| {
            // Partial facts never replace complete ones that still hold.
            let better = shard.dir(parent, dir).and_then(|d| d.absent.as_ref());
            if !complete && better.is_some_and(|(_, until, all)| *all && now < *until) {
                return;
            }
            let end = until(now, w.found).min(t.basis);
            set_absent(shard, parent, dir, (absent, complete), end, cap);
        });
    }

    /// Records a listing of directory `dir`: its absences, and for each listed name the
    /// position of its first copy. Names are kept only while the shard has room (a huge
    /// listing does not empty the memo).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn note_listing<'a>(
        &self,
        t: &Ticket,
        view: &Arc<V>,
        parent: u64,
        dir: &[u8],
        absent: &Positions,
        names: impl Iterator<Item = (&'a [u8], usize)>,
        w: Windows,
    ) {
        self.fill(t, view, parent, |shard, now, cap| {
            let end = until(now, w.found).min(t.basis);
            set_absent(shard, parent, dir, (absent, true), end, cap);
            for (name, pos) in names {
                let cost = name.len() + NAME_OVERHEAD;
                if !shard.room(cost, cap, false) {
                    break;
                }
                let d = shard.dir_or_new(parent, dir, cap);
                if put(d, name, Hint::At(pos), end) {
                    shard.bytes += cost;
                }
            }
        });
    }

    /// The daemon changed names in directory `parent`: its names are dropped (its absences
    /// stay: a change inside a directory never adds a copy of the directory itself).
    pub(crate) fn changed_in(&self, parent: u64) {
        self.seq.fetch_add(1, Ordering::AcqRel);
        let mut shard = self.shard(parent).locked();
        if let Some(d) = shard.dirs.get_mut(&parent) {
            let freed = d.clear_names();
            shard.bytes -= freed;
        }
    }

    /// Node `node` may now be a directory other than the one its facts describe (it was
    /// just made): its facts are dropped.
    pub(crate) fn forget_dir(&self, node: u64) {
        self.seq.fetch_add(1, Ordering::AcqRel);
        self.shard(node).locked().forget(node);
    }

    /// The daemon made a change that can move directories or copies between branches:
    /// everything is dropped.
    pub(crate) fn changed_everywhere(&self) {
        self.seq.fetch_add(1, Ordering::AcqRel);
        for s in self.shards.iter() {
            s.locked().clear();
        }
    }

    /// A guard for a change in directory `parent`: [`LookupMemo::changed_in`] when dropped
    /// (after the change, whichever way the operation returns).
    pub(crate) fn changing_in(&self, parent: u64) -> Changing<'_, V> {
        Changing {
            memo: self,
            scope: Some(parent),
        }
    }

    /// A guard for a change anywhere: [`LookupMemo::changed_everywhere`] when dropped.
    pub(crate) fn changing_everywhere(&self) -> Changing<'_, V> {
        Changing {
            memo: self,
            scope: None,
        }
    }

    /// Bytes charged now.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.shards.iter().map(|s| s.locked().bytes).sum()
    }
}

impl super::UnionFs {
    /// Moves the lookup memo's clock forward by `d`, so that a test sees its facts expire
    /// without sleeping. Not for the daemon.
    #[doc(hidden)]
    pub fn advance_lookup_memo_clock(&self, d: Duration) {
        self.lookup_memo.advance(d);
    }
}

/// Drops what a change made while it lived may have made wrong, when it goes (so that a
/// lookup racing the change cannot fill the memo with what it saw before the change).
pub(crate) struct Changing<'a, V> {
    memo: &'a LookupMemo<V>,
    /// The directory changed; `None`: anything.
    scope: Option<u64>,
}

impl<V> Drop for Changing<'_, V> {
    fn drop(&mut self) {
        match self.scope {
            Some(parent) => self.memo.changed_in(parent),
            None => self.memo.changed_everywhere(),
        }
    }
}

/// Sets `name`'s hint; whether it is new (and so was charged to the directory).
fn put(d: &mut DirMemo, name: &[u8], hint: Hint, end: u64) -> bool {
    if let Some(v) = d.names.get_mut(name) {
        *v = (hint, end);
        return false;
    }
    d.names.insert(name.into(), (hint, end));
    d.bytes += name.len() + NAME_OVERHEAD;
    true
}

/// Sets the directory's absences (charging their bits).
fn set_absent<V>(
    shard: &mut Shard<V>,
    parent: u64,
    dir: &[u8],
    (absent, complete): (&Positions, bool),
    end: u64,
    cap: usize,
) {
    let d = shard.dir_or_new(parent, dir, cap);
    let old = d.absent.take().map_or(0, |(p, _, _)| p.cost());
    let new = absent.cost();
    d.absent = Some((absent.clone(), end, complete));
    d.scans = 0;
    d.bytes = d.bytes + new - old;
    shard.bytes = shard.bytes + new - old;
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: Windows = Windows {
        found: Duration::from_secs(1),
        missing: Duration::from_secs(2),
    };

    fn hint(m: &LookupMemo<()>, v: &Arc<()>, parent: u64, dir: &[u8], name: &[u8]) -> Option<Hint> {
        m.consult(v, parent, dir, name).hint.map(|(h, _)| h)
    }

    fn note(m: &LookupMemo<()>, v: &Arc<()>, parent: u64, dir: &[u8], name: &[u8], h: Hint) {
        let t = m.ticket();
        m.note_name(&t, v, parent, dir, name, h, W);
    }

    #[test]
    fn positions_past_one_word() {
        let mut p = Positions::default();
        for i in [0, 5, 63, 64, 130] {
            p.insert(i);
        }
        for i in 0..200 {
            assert_eq!(p.contains(i), [0, 5, 63, 64, 130].contains(&i), "{i}");
        }
    }

    #[test]
    fn hints_hold_for_their_window() {
        let (m, v) = (LookupMemo::default(), Arc::new(()));
        note(&m, &v, 7, b"d/", b"found", Hint::At(3));
        note(&m, &v, 7, b"d/", b"missing", Hint::Nowhere);
        assert_eq!(hint(&m, &v, 7, b"d/", b"found"), Some(Hint::At(3)));
        assert_eq!(hint(&m, &v, 7, b"d/", b"missing"), Some(Hint::Nowhere));
        assert_eq!(hint(&m, &v, 7, b"d/", b"other"), None);
        m.advance(Duration::from_millis(1500));
        assert_eq!(hint(&m, &v, 7, b"d/", b"found"), None, "past cache.entry");
        assert_eq!(hint(&m, &v, 7, b"d/", b"missing"), Some(Hint::Nowhere));
        m.advance(Duration::from_secs(1));
        assert_eq!(
            hint(&m, &v, 7, b"d/", b"missing"),
            None,
            "past the negative window"
        );
    }

    #[test]
    fn what_rests_on_a_directory_s_absences_expires_with_them() {
        let (m, v) = (LookupMemo::default(), Arc::new(()));
        m.note_dir(&m.ticket(), &v, 7, b"d/", &Positions::default(), true, W);
        m.advance(Duration::from_millis(600));
        let a = m.consult(&v, 7, b"d/", b"f");
        assert!(a.absent.is_some());
        let left = a.ticket.left().unwrap();
        assert!(left <= Duration::from_millis(400), "{left:?}");
        m.note_name(&a.ticket, &v, 7, b"d/", b"f", Hint::At(1), W);
        let (h, left) = m.consult(&v, 7, b"d/", b"f").hint.unwrap();
        assert_eq!(h, Hint::At(1));
        assert!(left <= Duration::from_millis(400), "{left:?}");
        m.advance(Duration::from_millis(400));
        let a = m.consult(&v, 7, b"d/", b"f");
        assert_eq!((a.hint, a.absent, a.ticket.left()), (None, None, None));
    }

    #[test]
    fn partial_absences_are_used_and_completed_later() {
        let (m, v) = (LookupMemo::default(), Arc::new(()));
        let mut some = Positions::default();
        some.insert(0);
        m.note_dir(&m.ticket(), &v, 7, b"d/", &some, false, W);
        let a = m.consult(&v, 7, b"d/", b"a");
        assert_eq!((a.absent.as_ref(), a.want_facts), (Some(&some), false));
        let a = m.consult(&v, 7, b"d/", b"b");
        assert_eq!(
            (a.absent, a.want_facts),
            (None, true),
            "found afresh instead"
        );
        let mut all = some.clone();
        all.insert(1);
        m.note_dir(&a.ticket, &v, 7, b"d/", &all, true, W);
        m.note_dir(&m.ticket(), &v, 7, b"d/", &some, false, W);
        let a = m.consult(&v, 7, b"d/", b"c");
        assert_eq!(
            (a.absent, a.want_facts),
            (Some(all), false),
            "complete facts stay"
        );
    }

    #[test]
    fn no_negative_window_no_missing_names() {
        let (m, v) = (LookupMemo::default(), Arc::new(()));
        let t = m.ticket();
        let w = Windows {
            missing: Duration::ZERO,
            ..W
        };
        m.note_name(&t, &v, 7, b"d/", b"m", Hint::Nowhere, w);
        assert_eq!(hint(&m, &v, 7, b"d/", b"m"), None);
    }

    #[test]
    fn changes_drop_what_they_may_have_made_wrong() {
        let (m, v) = (LookupMemo::default(), Arc::new(()));
        let mut absent = Positions::default();
        absent.insert(0);
        m.note_dir(&m.ticket(), &v, 7, b"d/", &absent, true, W);
        note(&m, &v, 7, b"d/", b"f", Hint::At(1));
        note(&m, &v, 8, b"e/", b"g", Hint::At(1));
        m.changed_in(7);
        let a = m.consult(&v, 7, b"d/", b"f");
        assert_eq!(a.hint, None);
        assert_eq!(
            a.absent,
            Some(absent),
            "a change inside keeps the directory's absences"
        );
        assert_eq!(
            hint(&m, &v, 8, b"e/", b"g"),
            Some(Hint::At(1)),
            "other directories stay"
        );
        m.changed_everywhere();
        assert_eq!(m.bytes(), 0, "nothing is charged for what went");
        assert_eq!(hint(&m, &v, 8, b"e/", b"g"), None);
        assert_eq!(m.consult(&v, 7, b"d/", b"f").absent, None);
    }

    #[test]
    fn a_fill_that_overlapped_a_change_is_dropped() {
        let (m, v) = (LookupMemo::default(), Arc::new(()));
        let t = m.ticket();
        drop(m.changing_in(9)); // another directory, even
        m.note_name(&t, &v, 7, b"d/", b"f", Hint::At(1), W);
        assert_eq!(hint(&m, &v, 7, b"d/", b"f"), None);
    }

    #[test]
    fn another_view_sees_nothing_and_replaces_all() {
        let (m, v1, v2) = (LookupMemo::default(), Arc::new(()), Arc::new(()));
        note(&m, &v1, 7, b"d/", b"f", Hint::At(1));
        assert_eq!(hint(&m, &v2, 7, b"d/", b"f"), None);
        assert_eq!(
            hint(&m, &v1, 7, b"d/", b"f"),
            None,
            "gone with the other view"
        );
        note(&m, &v2, 7, b"d/", b"g", Hint::At(0));
        assert_eq!(hint(&m, &v2, 7, b"d/", b"g"), Some(Hint::At(0)));
        assert_eq!(hint(&m, &v1, 7, b"d/", b"g"), None);
    }

    #[test]
    fn a_node_at_another_path_has_no_facts() {
        let (m, v) = (LookupMemo::default(), Arc::new(()));
        note(&m, &v, 7, b"d/", b"f", Hint::At(1));
        assert_eq!(hint(&m, &v, 7, b"renamed/", b"f"), None);
        assert_eq!(hint(&m, &v, 7, b"d/", b"f"), None, "the stale entry went");
        note(&m, &v, 7, b"d/", b"f", Hint::At(1));
        m.forget_dir(7);
        assert_eq!(hint(&m, &v, 7, b"d/", b"f"), None);
    }

    #[test]
    fn absences_are_wanted_from_the_second_scan_and_never_for_the_root() {
        let (m, v) = (LookupMemo::default(), Arc::new(()));
        assert!(!m.consult(&v, 7, b"d/", b"a").want_facts);
        assert!(m.consult(&v, 7, b"d/", b"b").want_facts);
        m.note_dir(&m.ticket(), &v, 7, b"d/", &Positions::default(), true, W);
        assert!(!m.consult(&v, 7, b"d/", b"c").want_facts);
        note(&m, &v, 1, b"", b"f", Hint::At(1));
        for n in [&b"a"[..], b"b", b"c"] {
            assert!(!m.consult(&v, 1, b"", n).want_facts);
        }
    }

    #[test]
    fn memory_stays_within_the_budget() {
        let budget = 64 << 10;
        let (m, v) = (LookupMemo::with_budget(budget), Arc::new(()));
        for i in 0..20_000u64 {
            let name = format!("{i:0>200}");
            note(&m, &v, i % 40, b"some/dir/", name.as_bytes(), Hint::At(1));
            assert!(m.bytes() <= budget, "{i}: {}", m.bytes());
        }
        // A listing fills what room is left and empties nothing.
        m.changed_everywhere();
        note(&m, &v, 7, b"d/", b"kept", Hint::At(0));
        let names: Vec<String> = (0..10_000).map(|i| format!("{i:0>100}")).collect();
        let t = m.ticket();
        let listed = names.iter().map(|n| (n.as_bytes(), 2));
        m.note_listing(&t, &v, 7, b"d/", &Positions::default(), listed, W);
        assert!(m.bytes() <= budget);
        assert_eq!(hint(&m, &v, 7, b"d/", b"kept"), Some(Hint::At(0)));
        assert_eq!(
            hint(&m, &v, 7, b"d/", names[0].as_bytes()),
            Some(Hint::At(2))
        );
        assert_eq!(hint(&m, &v, 7, b"d/", names[9_999].as_bytes()), None);
    }
}
