//! A virtqueue that knows which of its requests are still being served. The front-end stops
//! a ring with GET_VRING_BASE (before a migration's last memory pass, a snapshot, a pause)
//! and takes its avail index as where the next daemon starts: a request popped before that
//! and answered after it would be lost, or land in guest memory after the last copy. So a
//! ring being stopped first ends the requests that may wait without bound (the stop hook),
//! then waits until every request popped from it has been answered. Knows rings, not files.

use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use vhost_user_backend::{VringRwLock, VringStateGuard, VringStateMutGuard, VringT};
use virtio_queue::Error as QueueError;

use crate::sync::LockRecover;

use super::chain::GuestMem;

/// How long a stopping ring waits for its requests before it gives up (and logs which
/// count it left behind): a request the host blocks this long (a hung NFS branch) must not
/// hang the front-end's stop for ever.
const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// What a ring's stop does before it waits (end the waits that would not end by themselves,
/// lock waits, so that their replies are written before the ring stops), or what its start
/// does.
pub type Hook = Box<dyn Fn() + Send + Sync>;

/// Requests popped from one ring and not yet answered. Counting costs an atomic add per
/// request; the lock and condition variable are only for a stop waiting on them.
#[derive(Default)]
pub struct InFlight {
    count: AtomicUsize,
    /// Stops waiting for the count to reach zero.
    waiting: AtomicUsize,
    lock: Mutex<()>,
    done: Condvar,
    hooks: OnceLock<(Hook, Hook)>,
    /// Something to run once, when the next request is answered (an upgraded daemon tells
    /// the old one it serves).
    armed: AtomicBool,
    on_end: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

thread_local! {
    /// The rings made on this thread, for the daemon that made them to take (the vhost-user
    /// handler makes them and keeps them to itself).
    static MADE: RefCell<Vec<FsVring>> = const { RefCell::new(Vec::new()) };
}

/// The rings made on this thread since the last call (those of the daemon just created).
pub fn take_made() -> Vec<FsVring> {
    MADE.with(|m| std::mem::take(&mut *m.borrow_mut()))
}

impl InFlight {
    /// One more request being served.
    pub fn begin(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
    }

    /// A request answered (its used entry written).
    pub fn end(&self) {
        let before = self
            .count
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_sub(1))
            })
            .unwrap_or(0);
        // The waiter checks the count under the lock after saying it waits: either it sees
        // zero, or this notification reaches it.
        if before <= 1 && self.waiting.load(Ordering::SeqCst) > 0 {
            let _g = self.lock.locked();
            self.done.notify_all();
        }
        if self.armed.load(Ordering::Acquire) {
            self.armed.store(false, Ordering::Release);
            if let Some(f) = self.on_end.locked().take() {
                f();
            }
        }
    }

    /// Runs `f` once, when the next request of this ring is answered.
    pub fn on_next_end(&self, f: Box<dyn FnOnce() + Send>) {
        *self.on_end.locked() = Some(f);
        self.armed.store(true, Ordering::Release);
    }

    /// Waits until no request of this ring is being served, at most until `deadline`;
    /// whether none is.
    pub fn wait_idle(&self, deadline: Instant) -> bool {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let mut g = self.lock.locked();
        let idle = loop {
            if self.count() == 0 {
                break true;
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break false;
            };
            g = crate::sync::recover(self.done.wait_timeout(g, left)).0;
        };
        drop(g);
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        idle
    }

    /// Requests being served now.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Sets what a stop runs first and what a start runs (once: `hooks` is called only the
    /// first time).
    pub fn set_hooks(&self, hooks: impl FnOnce() -> (Hook, Hook)) {
        if self.hooks.get().is_none() {
            let _ = self.hooks.set(hooks());
        }
    }

    /// Runs the stop hook, then waits (bounded) until no request is being served.
    fn drain(&self) {
        if self.count() == 0 {
            return;
        }
        if let Some((stop, _)) = self.hooks.get() {
            stop();
        }
        if !self.wait_idle(Instant::now() + DRAIN_LIMIT) {
            log::error!(
                "ring stopped with {} requests still being served",
                self.count()
            );
        }
    }
}

/// A vhost-user ring (vhost-user-backend's `VringRwLock`) that drains before it stops.
#[derive(Clone)]
pub struct FsVring {
    ring: VringRwLock<GuestMem>,
    flight: Arc<InFlight>,
}

impl FsVring {
    /// The ring's in-flight count and stop hook.
    pub fn flight(&self) -> &Arc<InFlight> {
        &self.flight
    }
}

impl<'a> VringStateGuard<'a, GuestMem> for FsVring {
    type G = <VringRwLock<GuestMem> as VringStateGuard<'a, GuestMem>>::G;
}

impl<'a> VringStateMutGuard<'a, GuestMem> for FsVring {
    type G = <VringRwLock<GuestMem> as VringStateMutGuard<'a, GuestMem>>::G;
}

impl VringT<GuestMem> for FsVring {
    fn new(mem: GuestMem, max_queue_size: u16) -> Result<Self, QueueError> {
        let ring = FsVring {
            ring: VringRwLock::new(mem, max_queue_size)?,
            flight: Arc::default(),
        };
        MADE.with(|m| m.borrow_mut().push(ring.clone()));
        Ok(ring)
    }

    fn get_ref(&self) -> <Self as VringStateGuard<'_, GuestMem>>::G {
        self.ring.get_ref()
    }

    fn get_mut(&self) -> <Self as VringStateMutGuard<'_, GuestMem>>::G {
        self.ring.get_mut()
    }

    fn add_used(&self, desc_index: u16, len: u32) -> Result<(), QueueError> {
        self.ring.add_used(desc_index, len)
    }

    fn signal_used_queue(&self) -> io::Result<()> {
        self.ring.signal_used_queue()
    }

    fn enable_notification(&self) -> Result<bool, QueueError> {
        self.ring.enable_notification()
    }

    fn disable_notification(&self) -> Result<(), QueueError> {
        self.ring.disable_notification()
    }

    fn needs_notification(&self) -> Result<bool, QueueError> {
        self.ring.needs_notification()
    }

    fn set_enabled(&self, enabled: bool) {
        self.ring.set_enabled(enabled)
    }

    fn set_queue_info(&self, desc: u64, avail: u64, used: u64) -> Result<(), QueueError> {
        self.ring.set_queue_info(desc, avail, used)
    }

    fn queue_next_avail(&self) -> u16 {
        self.ring.queue_next_avail()
    }

    fn set_queue_next_avail(&self, base: u16) {
        self.ring.set_queue_next_avail(base)
    }

    fn set_queue_next_used(&self, idx: u16) {
        self.ring.set_queue_next_used(idx)
    }

    fn queue_used_idx(&self) -> Result<u16, QueueError> {
        self.ring.queue_used_idx()
    }

    fn set_queue_size(&self, num: u16) {
        self.ring.set_queue_size(num)
    }

    fn set_queue_event_idx(&self, enabled: bool) {
        self.ring.set_queue_event_idx(enabled)
    }

    fn set_queue_ready(&self, ready: bool) {
        // GET_VRING_BASE stops the ring this way, then reads the avail index: every request
        // popped before it must have been answered by then.
        if !ready {
            self.flight.drain();
        }
        self.ring.set_queue_ready(ready);
        if ready {
            if let Some((_, start)) = self.flight.hooks.get() {
                start();
            }
        }
    }

    fn set_kick(&self, file: Option<File>) {
        self.ring.set_kick(file)
    }

    fn read_kick(&self) -> io::Result<bool> {
        self.ring.read_kick()
    }

    fn set_call(&self, file: Option<File>) {
        self.ring.set_call(file)
    }

    fn set_err(&self, file: Option<File>) {
        self.ring.set_err(file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_waits_for_every_request_and_no_longer() {
        let f = Arc::new(InFlight::default());
        assert!(f.wait_idle(Instant::now()));
        for _ in 0..3 {
            f.begin();
        }
        assert!(!f.wait_idle(Instant::now() + Duration::from_millis(5)));
        let ender = f.clone();
        let t = std::thread::spawn(move || {
            for _ in 0..3 {
                ender.end();
            }
        });
        let waited = Instant::now();
        assert!(f.wait_idle(Instant::now() + Duration::from_secs(30)));
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "the last end woke the stop"
        );
        t.join().unwrap();
        assert_eq!(f.count(), 0);
        // An end without a begin never wraps the count.
        f.end();
        assert_eq!(f.count(), 0);
    }
}
