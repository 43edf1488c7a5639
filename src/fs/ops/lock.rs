//! Host-side locks (FUSE_POSIX_LOCKS, FUSE_FLOCK_LOCKS): a guest's locks are real locks on the
//! host file, so another guest (through another daemon over the same branches) and host
//! processes see them.
//!
//! POSIX record locks belong to a lock owner (a guest process's file table; for the guest's
//! OFD locks, its open file description), not to an open file. Each (node, owner) gets its own
//! open file description on the host, on which the owner's locks are open-file-description
//! locks (`F_OFD_*`): the same owner never conflicts with itself, ranges merge and split as
//! POSIX says, and they conflict with every other owner's, and with host processes' classic
//! POSIX locks. Closing that description releases the owner's locks: on the owner's FLUSH (a
//! process's close, POSIX's rule), on the RELEASE of a handle its requests came through (the
//! guest's OFD locks, which the guest never unlocks on close), and at DESTROY. flock locks
//! belong to the open file, so they are `flock(2)` on the handle's own descriptor.
//!
//! Every host lock call is non-blocking and made under one mutex together with the update of
//! [`LockState`], so that table is exactly what the host holds for the guest. A request that
//! must wait (SETLKW) waits on a condition variable, not in the host kernel: the guest's
//! virtio-fs driver never interrupts a request, so a wait must end by the daemon's word.
//! A POSIX wait ends when the lock is granted; with EDEADLK at once when waiting would close
//! a cycle of the guest's lock owners (the kernel's rule for local POSIX locks; OFD locks
//! have none), and with EDEADLK once the same holders have blocked it for `lock-timeout`
//! seconds, for the deadlocks no lock table shows (a holder waiting for the waiter to exit, as stress-ng's lockf stressor does; another
//! guest; a host process). A flock wait ends when granted, or with ENOLCK when only locks
//! held outside the guest have blocked it for `lock-wait-external` seconds. Both end with
//! EBADF when the owner closes the file meanwhile, and with EINTR on FUSE_INTERRUPT or the
//! end of the session (EINTR only then: the guest turns it into a restart of the call,
//! which without a pending signal would reach the program as errno 512). A wait still going
//! when the front-end stops the rings (a migration, a snapshot, a pause) ends as a timed-out
//! one would (EDEADLK; ENOLCK for flock): its reply must be in guest memory before the ring's
//! position is read. Locks held outside the daemon are polled for, since nothing tells it
//! when they go. For a migration the source lets go of the host locks once its session is
//! saved and the destination takes them again (`Locks::release_host`, `Locks::import`);
//! should the rings start again on the source, it takes them back (`Locks::retake_host`).

use crate::fs::call::Call;
use crate::sync::LockRecover;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use fuse_backend_rs::abi::fuse_abi::FileLock;
use rustix::fs::OFlags;

use crate::fs::errno;
use crate::fs::lockstate::{LockState, Shared, Span, WaitId};
use crate::fuse::Cancel;
use crate::sys::beneath;
use crate::sys::lock::{self, Kind, Range};

/// The session's locks: the table of what the guest holds and the host descriptions that
/// carry each owner's POSIX locks, under one mutex, and the condition waiting requests sleep
/// on.
#[derive(Default)]
pub struct Locks {
    inner: Mutex<Inner>,
    changed: Condvar,
}

#[derive(Default)]
struct Inner {
    state: LockState,
    /// (node, owner) → the description carrying that owner's POSIX locks.
    fds: HashMap<(u64, u64), OwnedFd>,
    /// Requests sleeping on `changed` (a release wakes them only when there are some).
    sleepers: usize,
}

/// Polling for a lock held outside the daemon: the first retry after this, then doubling.
const POLL_FIRST: Duration = Duration::from_millis(1);
/// ... up to this.
const POLL_MAX: Duration = Duration::from_millis(100);
/// A wait blocked by the guest's own locks is woken by their release; it also retries this
/// often, in case a lock it counted as the guest's went through a path that does not wake it.
const RECHECK: Duration = Duration::from_secs(1);

impl Locks {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.locked()
    }

    /// Wakes every waiting request to look at its lock and its cancellation again.
    pub fn wake(&self) {
        self.wake_sleepers(&self.lock());
    }

    /// Wakes the requests sleeping on `changed`, if any (`g`: the held table, so that no wake
    /// falls between a waiter's look and its sleep).
    fn wake_sleepers(&self, g: &Inner) {
        if g.sleepers > 0 {
            self.changed.notify_all();
        }
    }

    /// Forgets every owner and lock (DESTROY, device reset): closing the descriptions releases
    /// the host locks, and waiting requests end. How many locks the guest held.
    pub fn clear(&self) -> usize {
        let mut g = self.lock();
        let n = g.state.count();
        g.state.clear();
        g.fds.clear();
        self.wake_sleepers(&g);
        n
    }

    /// Number of owners holding a description (they count against the descriptor budget).
    pub fn len(&self) -> usize {
        self.lock().fds.len()
    }
}

/// What a FUSE lock type asks for (F_RDLCK, F_WRLCK, F_UNLCK), or EINVAL.
fn kind(t: u32) -> io::Result<Option<Shared>> {
    match t as i32 {
        libc::F_RDLCK => Ok(Some(Shared::Read)),
        libc::F_WRLCK => Ok(Some(Shared::Write)),
        libc::F_UNLCK => Ok(None),
        _ => Err(errno(libc::EINVAL)),
    }
}

fn host_kind(k: Option<Shared>) -> Kind {
    match k {
        Some(Shared::Read) => Kind::Read,
        Some(Shared::Write) => Kind::Write,
        None => Kind::Unlock,
    }
}

/// The byte range of a FUSE lock (`end` inclusive; OFFSET_MAX or above: to the end of the
/// file, however it grows).
fn span(lk: &FileLock) -> io::Result<Span> {
    if lk.start > i64::MAX as u64 || lk.end < lk.start {
        return Err(errno(libc::EINVAL));
    }
    let end = if lk.end >= i64::MAX as u64 {
        u64::MAX
    } else {
        lk.end
    };
    Ok(Span {
        start: lk.start,
        end,
    })
}

fn host_range(s: Span) -> Range {
    Range {
        start: s.start,
        len: if s.end == u64::MAX {
            0
        } else {
            s.end - s.start + 1
        },
    }
}

/// The FUSE end of a span (OFFSET_MAX for "to the end of the file").
fn fuse_end(s: Span) -> u64 {
    s.end.min(i64::MAX as u64)
}

/// The description carrying `owner`'s locks on `inode`, opened from handle `fh` the first time
/// (read-write where the host allows, else with the handle's own access mode).
fn owner_fd<'a>(
    fs: &Call<'_>,
    g: &'a mut Inner,
    inode: u64,
    fh: u64,
    owner: u64,
) -> io::Result<&'a OwnedFd> {
    if !g.fds.contains_key(&(inode, owner)) {
        let h = fs.handles.file(fh, inode)?;
        let f = h.as_file()?;
        fs.check_room(g.fds.len())?;
        let opened = beneath::reopen(f.fd.as_fd(), OFlags::RDWR)
            .or_else(|_| beneath::reopen(f.fd.as_fd(), f.flags & OFlags::RWMODE))?;
        g.fds.insert((inode, owner), opened);
    }
    g.state.note_handle(inode, owner, fh);
    Ok(&g.fds[&(inode, owner)])
}

/// GETLK: the first lock that would conflict with `lk` for `owner` (type F_UNLCK if none).
/// A lock of another guest process reports that process; one held outside the guest (a host
/// process, another guest) reports pid 0, since host pids mean nothing to the guest.
pub fn getlk(fs: &Call<'_>, inode: u64, fh: u64, owner: u64, lk: FileLock) -> io::Result<FileLock> {
    let Some(want) = kind(lk.type_)? else {
        return Err(errno(libc::EINVAL));
    };
    let sp = span(&lk)?;
    let mut g = fs.locks.lock();
    let fd = owner_fd(fs, &mut g, inode, fh, owner)?;
    let Some((k, r)) = lock::test(fd.as_fd(), host_kind(Some(want)), host_range(sp))? else {
        return Ok(FileLock {
            type_: libc::F_UNLCK as u32,
            ..lk
        });
    };
    // The host's first conflicting lock, as the host reports it; when it is one of the
    // guest's (same range and kind for another owner in the table), with that owner's pid,
    // which means something to the guest; else a lock held outside the guest: pid 0.
    let end = if r.len == 0 {
        u64::MAX
    } else {
        r.start + r.len - 1
    };
    let kind = if k == Kind::Read {
        Shared::Read
    } else {
        Shared::Write
    };
    let held = Span {
        start: r.start,
        end,
    };
    let pid = g
        .state
        .posix_holder(inode, owner, held, kind)
        .map_or(0, |h| h.pid);
    Ok(FileLock {
        start: held.start,
        end: fuse_end(held),
        type_: match kind {
            Shared::Read => libc::F_RDLCK as u32,
            Shared::Write => libc::F_WRLCK as u32,
        },
        pid,
    })
}

/// One SETLK or SETLKW request.
struct Request {
    inode: u64,
    fh: u64,
    owner: u64,
    span: Span,
    kind: Option<Shared>,
    pid: u32,
    flock: bool,
}

/// What one non-blocking try found.
enum Tried {
    Done,
    /// Held by someone: the guest's lock owners (POSIX) or handles (flock) that block it,
    /// none when only locks held outside the guest do.
    Blocked {
        by: Vec<u64>,
    },
}

/// One non-blocking attempt on the host, and the table updated to match.
fn try_once(fs: &Call<'_>, g: &mut Inner, req: &Request) -> io::Result<Tried> {
    let blocked = |by| Ok(Tried::Blocked { by });
    if req.flock {
        let h = fs.handles.file(req.fh, req.inode)?;
        let had = g.state.flock_held(req.inode, req.fh);
        match lock::flock(h.as_file()?.fd.as_fd(), host_kind(req.kind)) {
            Ok(()) => {
                g.state.flock_set(req.inode, req.fh, req.kind, req.pid);
                Ok(Tried::Done)
            }
            Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => {
                // A conversion that cannot be granted at once has lost the old lock
                // (flock(2): converting is not atomic).
                if had.is_some() && had != req.kind {
                    g.state.flock_set(req.inode, req.fh, None, req.pid);
                }
                let want = req.kind.unwrap_or(Shared::Read);
                blocked(g.state.flock_blockers(req.inode, req.fh, want))
            }
            Err(e) => Err(e),
        }
    } else {
        let fd = owner_fd(fs, g, req.inode, req.fh, req.owner)?;
        match lock::set(fd.as_fd(), host_kind(req.kind), host_range(req.span)) {
            Ok(()) => {
                g.state
                    .posix_apply(req.inode, req.owner, req.span, req.kind, req.pid);
                Ok(Tried::Done)
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => {
                let want = req.kind.unwrap_or(Shared::Read);
                blocked(g.state.posix_blockers(req.inode, req.owner, req.span, want))
            }
            Err(e) => Err(e),
        }
    }
}

/// SETLK/SETLKW: takes or releases `lk` for `owner` (POSIX) or for the handle (`flock`).
/// With `wait`, waits until granted or until the wait must end (see the module's doc);
/// `cancelled` says whether FUSE_INTERRUPT or the session's end cancelled the request (its
/// canceller calls [`Locks::wake`]).
#[allow(clippy::too_many_arguments)]
pub fn setlk(
    fs: &Call<'_>,
    inode: u64,
    fh: u64,
    owner: u64,
    lk: FileLock,
    flock: bool,
    wait: bool,
    cancelled: &dyn Fn() -> Option<Cancel>,
) -> io::Result<()> {
    let req = Request {
        inode,
        fh,
        owner,
        span: span(&lk)?,
        kind: kind(lk.type_)?,
        pid: lk.pid,
        flock,
    };
    let locks = &fs.locks;
    let mut g = locks.lock();
    let mut w = Waiting {
        id: None,
        blockers: None,
        since: Instant::now(),
        announced: false,
        poll: POLL_FIRST,
    };
    let r = loop {
        match step(fs, &mut g, &req, wait, cancelled, &mut w) {
            Step::Answer(r) => break r,
            Step::Sleep(nap) => {
                if !std::mem::replace(&mut w.announced, true) {
                    log::debug!(
                        "SETLKW node {inode} owner {owner:#x} {:?} {:?} flock {flock}: waits",
                        req.kind,
                        req.span
                    );
                }
                g.sleepers += 1;
                g = crate::sync::recover(locks.changed.wait_timeout(g, nap)).0;
                g.sleepers -= 1;
            }
        }
    };
    if let Some(id) = w.id {
        g.state.unwait(id);
    }
    log::debug!(
        "{} node {inode} owner {owner:#x} {:?} {:?} flock {flock}: {:?}",
        if wait { "SETLKW" } else { "SETLK" },
        req.kind,
        req.span,
        r.as_ref().map_err(|e| e.raw_os_error())
    );
    // Anything but a new lock may let a waiting request through.
    if r.is_ok() {
        locks.wake_sleepers(&g);
    }
    r
}

/// Where a waiting request stands.
struct Waiting {
    /// Its registration in the table (POSIX locks, for the others' deadlock checks).
    id: Option<WaitId>,
    /// Who blocked it at the last try (see [`Tried::Blocked`]), and since when exactly they
    /// have: a wait that keeps changing hands is making way, one whose holders stay is not.
    blockers: Option<Vec<u64>>,
    since: Instant,
    /// Whether its wait was logged.
    announced: bool,
    /// The next poll interval for locks held outside the guest.
    poll: Duration,
}

/// What a request does next.
enum Step {
    /// Answer the guest.
    Answer(io::Result<()>),
    /// Sleep until woken, or for at most this long, then try again.
    Sleep(Duration),
}

/// What is left of `bound` (zero: no bound) after `since`, or None when it has run out.
fn left(bound: Duration, since: Instant) -> Option<Duration> {
    if bound.is_zero() {
        return Some(Duration::MAX);
    }
    bound.checked_sub(since.elapsed()).filter(|d| !d.is_zero())
}

/// One try of a SETLK/SETLKW and what follows from it.
fn step(
    fs: &Call<'_>,
    g: &mut Inner,
    req: &Request,
    wait: bool,
    cancelled: &dyn Fn() -> Option<Cancel>,
    w: &mut Waiting,
) -> Step {
    let answer = |e| Step::Answer(Err(errno(e)));
    match cancelled().filter(|_| wait) {
        None => {}
        Some(Cancel::Interrupt) => return answer(libc::EINTR),
        Some(Cancel::RingStop) if req.flock => return answer(libc::ENOLCK),
        Some(Cancel::RingStop) => return answer(libc::EDEADLK),
    }
    if w.id.is_some_and(|id| g.state.revoked(id)) {
        // The owner closed the file (or the session ended) while this waited: a lock
        // granted now would outlive the close that was to release it. The kernel answers
        // EBADF to a wait whose descriptor was closed meanwhile.
        return answer(libc::EBADF);
    }
    let by = match try_once(fs, g, req) {
        Err(e) => return Step::Answer(Err(e)),
        Ok(Tried::Done) => return Step::Answer(Ok(())),
        Ok(Tried::Blocked { .. }) if !wait => return answer(libc::EAGAIN),
        Ok(Tried::Blocked { by }) => by,
    };
    let inside = !by.is_empty();
    if w.blockers.as_ref() != Some(&by) {
        w.blockers = Some(by);
        w.since = Instant::now();
        w.poll = POLL_FIRST;
    }
    let opts = &fs.view().opts;
    let mut nap = if inside {
        RECHECK
    } else {
        let nap = w.poll;
        w.poll = (w.poll * 2).min(POLL_MAX);
        nap
    };
    if req.flock {
        // flock has no deadlocks to detect; a wait for the guest's own open files lasts
        // until they let go, one for a lock held outside the guest is bounded.
        if !inside {
            match left(opts.lock_wait_external, w.since) {
                Some(l) => nap = nap.min(l),
                None => return answer(libc::ENOLCK),
            }
        }
        return Step::Sleep(nap);
    }
    let want = req.kind.unwrap_or(Shared::Read);
    if g.state.would_deadlock(req.inode, req.owner, req.span, want) {
        return answer(libc::EDEADLK);
    }
    // A deadlock this table cannot see (a holder that waits for the waiter to exit, another
    // guest, a host process): the same holders have blocked the wait for lock-timeout. Linux's
    // own detection also answers EDEADLK where it guesses.
    match left(opts.lock_timeout, w.since) {
        Some(l) => nap = nap.min(l),
        None => return answer(libc::EDEADLK),
    }
    if w.id.is_none() {
        w.id = Some(g.state.wait(req.inode, req.owner, req.span, want));
    }
    Step::Sleep(nap)
}

/// FLUSH or RELEASE by `owner`: POSIX says closing any descriptor of a file releases all of
/// the closing process's locks on it. The owner's waits on the file end too.
pub fn release_owner(fs: &Call<'_>, inode: u64, owner: u64) {
    let mut g = fs.locks.lock();
    g.fds.remove(&(inode, owner));
    g.state.drop_posix_owner(inode, owner);
    fs.locks.wake_sleepers(&g);
}

/// RELEASE of handle `fh` (after it left the handle table): the guest closed the last
/// descriptor of that open file description. Its flock lock is gone, and so is every lock
/// owner whose requests came through it since its last FLUSH: the description's own OFD
/// locks, whose owner is the description and which nothing else ends, since the guest's
/// kernel keeps no record of a lock it passed to the daemon and so sends no unlock for it on
/// close (see [`LockState::release_handle`]). When no open handle of the node is left, no
/// guest lock on it can be either (each needs an open description), so every owner left on
/// the node goes too: those a session image brought carry no handle.
pub fn release_handle(fs: &Call<'_>, inode: u64, fh: u64) {
    let mut g = fs.locks.lock();
    let mut changed = false;
    if g.state.flock_held(inode, fh).is_some() {
        g.state.flock_set(inode, fh, None, 0);
        changed = true;
    }
    let mut gone = g.state.release_handle(inode, fh);
    let mut rest = g.state.owners_of(inode);
    rest.extend(g.fds.keys().filter(|(n, _)| *n == inode).map(|(_, o)| *o));
    rest.retain(|o| !gone.contains(o));
    if !rest.is_empty() && !fs.handles.any_file_of(inode) {
        for o in rest {
            g.state.drop_posix_owner(inode, o);
            gone.push(o);
        }
    }
    for o in &gone {
        changed |= g.fds.remove(&(inode, *o)).is_some();
    }
    if !gone.is_empty() {
        log::debug!("RELEASE node {inode} fh {fh}: owners {gone:x?} end");
    }
    if changed || !gone.is_empty() {
        fs.locks.wake_sleepers(&g);
    }
}

/// One lock to take on the host again (a retake after a move that did not happen, or an
/// import).
enum Retake {
    Posix(u64, u64, crate::fs::lockstate::Held),
    Flock(u64, u64, Shared, u32),
}

/// A description for `owner`'s POSIX locks on `inode`, opened from the node's object:
/// read-write where the host allows, else with the access the locks need.
fn description(fs: &Call<'_>, inode: u64, write: bool) -> io::Result<OwnedFd> {
    let (_, fd) = fs.node_fd(inode)?.ok_or_else(|| errno(libc::EINVAL))?;
    if beneath::stat_fd(fd.as_fd())?.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(errno(libc::EINVAL));
    }
    let fallback = if write {
        OFlags::WRONLY
    } else {
        OFlags::RDONLY
    };
    beneath::reopen(fd.as_fd(), OFlags::RDWR).or_else(|_| beneath::reopen(fd.as_fd(), fallback))
}

impl Locks {
    /// Every lock the guest holds, for a session image.
    pub fn export(&self) -> Vec<crate::fs::session::LockImage> {
        use crate::fs::session::LockImage;
        let g = self.lock();
        let posix = g
            .state
            .posix_all()
            .into_iter()
            .map(|(inode, owner, h)| LockImage::Posix {
                inode,
                owner,
                start: h.span.start,
                end: h.span.end,
                write: h.kind == Shared::Write,
                pid: h.pid,
            });
        let flock = g
            .state
            .flock_all()
            .into_iter()
            .map(|(inode, fh, k, pid)| LockImage::Flock {
                inode,
                fh,
                write: k == Shared::Write,
                pid,
            });
        posix.chain(flock).collect()
    }

    /// Lets go of every host lock and keeps the table: the session is moving to another
    /// daemon, which takes them again (on this host, it could not while they are held here).
    /// How many locks were let go.
    pub fn release_host(&self, fs: &Call<'_>) -> usize {
        let mut g = self.lock();
        g.fds.clear();
        for (inode, fh, _, _) in g.state.flock_all() {
            if let Ok(h) = fs.handles.file(fh, inode) {
                if let Ok(f) = h.as_file() {
                    let _ = lock::flock(f.fd.as_fd(), Kind::Unlock);
                }
            }
        }
        g.state.count()
    }

    /// Takes the table's locks on the host again after [`Locks::release_host`] (the move did
    /// not happen). A lock someone else took meanwhile is lost, and logged. How many were.
    pub fn retake_host(&self, fs: &Call<'_>) -> usize {
        let mut g = self.lock();
        let mut todo: Vec<Retake> = g
            .state
            .posix_all()
            .into_iter()
            .map(|(n, o, h)| Retake::Posix(n, o, h))
            .collect();
        todo.extend(
            g.state
                .flock_all()
                .into_iter()
                .map(|(n, fh, k, p)| Retake::Flock(n, fh, k, p)),
        );
        let via = g.state.handles_noted();
        g.state.clear();
        let lost = take_all(fs, &mut g, todo);
        g.state.restore_handles(via);
        for e in &lost {
            log::error!("a guest lock is lost: {e}");
        }
        self.wake_sleepers(&g);
        lost.len()
    }

    /// Takes the locks of a session image on the host and records them (the table must be
    /// empty). What could not be taken, each as a message.
    pub fn import(&self, fs: &Call<'_>, locks: &[crate::fs::session::LockImage]) -> Vec<String> {
        use crate::fs::lockstate::Held;
        use crate::fs::session::LockImage;
        let kind = |w: bool| if w { Shared::Write } else { Shared::Read };
        let todo = locks
            .iter()
            .map(|l| match *l {
                LockImage::Posix {
                    inode,
                    owner,
                    start,
                    end,
                    write,
                    pid,
                } => Retake::Posix(
                    inode,
                    owner,
                    Held {
                        span: Span { start, end },
                        kind: kind(write),
                        pid,
                    },
                ),
                LockImage::Flock {
                    inode,
                    fh,
                    write,
                    pid,
                } => Retake::Flock(inode, fh, kind(write), pid),
            })
            .collect();
        let mut g = self.lock();
        take_all(fs, &mut g, todo)
    }
}

/// Takes each lock of `todo` on the host without waiting and records it in the table; what
/// could not be taken, as messages.
fn take_all(fs: &Call<'_>, g: &mut Inner, todo: Vec<Retake>) -> Vec<String> {
    let mut failed = Vec::new();
    for t in todo {
        let r = match &t {
            Retake::Posix(inode, owner, h) => (|| {
                if h.span.start > h.span.end || h.span.start > i64::MAX as u64 {
                    return Err(errno(libc::EINVAL));
                }
                let fd: &OwnedFd = match g.fds.entry((*inode, *owner)) {
                    std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(description(fs, *inode, h.kind == Shared::Write)?)
                    }
                };
                let fd = fd.as_fd();
                lock::set(fd, host_kind(Some(h.kind)), host_range(h.span))?;
                g.state
                    .posix_apply(*inode, *owner, h.span, Some(h.kind), h.pid);
                Ok(())
            })(),
            Retake::Flock(inode, fh, k, pid) => (|| {
                let h = fs.handles.file(*fh, *inode)?;
                lock::flock(h.as_file()?.fd.as_fd(), host_kind(Some(*k)))?;
                g.state.flock_set(*inode, *fh, Some(*k), *pid);
                Ok(())
            })(),
        };
        if let Err(e) = r {
            let e: io::Error = e;
            let e = if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) {
                "held by another process now".to_owned()
            } else {
                e.to_string()
            };
            failed.push(match t {
                Retake::Posix(n, o, h) => format!(
                    "POSIX lock of owner {o:#x} on node {n} bytes {}..={}: {e}",
                    h.span.start, h.span.end
                ),
                Retake::Flock(n, fh, _, _) => format!("flock of handle {fh} on node {n}: {e}"),
            });
        }
    }
    // An owner whose locks all failed keeps no description.
    let held: std::collections::HashSet<(u64, u64)> = g
        .state
        .posix_all()
        .into_iter()
        .map(|(n, o, _)| (n, o))
        .collect();
    g.fds.retain(|k, _| held.contains(k));
    failed
}
