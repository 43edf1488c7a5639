//! Letting go of the guest memory the daemon has touched (`--release-guest-memory`).
//!
//! Every page of guest memory a request's buffers cover is mapped into this process the first
//! time the daemon reads or writes it, and stays mapped: the daemon's RSS (and its page
//! tables) grow with every page the guest's kernel ever used for a request (its page cache,
//! each new process's buffers), towards the guest's whole RAM. Those pages are the VM's, held
//! by it either way; counted in the daemon's RSS they mislead whoever reads it (a monitor,
//! the OOM killer, whose score for the daemon counts them though killing it frees none).
//!
//! While requests flow, a thread of its own drops those mappings once per interval, and once
//! more after the flow stops; the next request that needs a page faults it back in from the
//! shared memory, contents unchanged. The queue threads only look at a flag per request; the
//! thread starts with the first request and sleeps while none come.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use log::{debug, warn};
use vm_memory::{GuestAddressSpace, GuestMemory};

use super::chain::GuestMem;
use crate::sync::{recover, LockRecover, RwRecover};

/// Drops the daemon's mappings of guest memory once per `interval` while requests flow. The
/// thread stops when this is dropped.
pub struct Release(Arc<Shared>);

struct Shared {
    interval: Duration,
    /// The guest memory as the front-end last set it (shared with the backend).
    mem: Arc<RwLock<Option<GuestMem>>>,
    /// A request came since the last release: the only thing the queue threads touch.
    active: AtomicBool,
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    started: bool,
    stop: bool,
}

impl Release {
    /// Releases every `interval` (not zero) the memory in `mem`.
    pub fn new(interval: Duration, mem: Arc<RwLock<Option<GuestMem>>>) -> Self {
        Release(Arc::new(Shared {
            interval,
            mem,
            active: AtomicBool::new(false),
            state: Mutex::default(),
            wake: Condvar::new(),
        }))
    }

    /// A request is about to touch guest memory: one load while the releasing thread knows
    /// (already armed), a wake-up when it sleeps.
    #[inline]
    pub fn note(&self) {
        if !self.0.active.load(Ordering::Relaxed) {
            self.arm();
        }
    }

    #[cold]
    fn arm(&self) {
        if self.0.active.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut state = self.0.state.locked();
        if !state.started && !state.stop {
            let shared = self.0.clone();
            match std::thread::Builder::new()
                .name("guest-mem-release".into())
                .spawn(move || shared.run())
            {
                Ok(_) => state.started = true,
                Err(e) => warn!("cannot start the thread releasing guest memory: {e}"),
            }
        }
        self.0.wake.notify_one();
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        self.0.state.locked().stop = true;
        self.0.wake.notify_one();
    }
}

impl Shared {
    fn run(&self) {
        let mut state = self.state.locked();
        loop {
            while !self.active.load(Ordering::Acquire) && !state.stop {
                state = recover(self.wake.wait(state));
            }
            // Requests came: release one interval later, whether or not they go on.
            let deadline = Instant::now() + self.interval;
            while !state.stop {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                state = recover(self.wake.wait_timeout(state, left)).0;
            }
            if state.stop {
                return;
            }
            // Before releasing: a request from now on arms the next round, so that what it
            // touches after this release goes at the next.
            self.active.store(false, Ordering::Release);
            drop(state);
            if !self.release() {
                return;
            }
            state = self.state.locked();
        }
    }

    /// Drops the mappings of every region; false (after saying why) if the kernel refuses,
    /// which it will every time (a locked or hugetlb mapping it cannot zap).
    fn release(&self) -> bool {
        let Some(mem) = self.mem.reading().clone() else {
            return true;
        };
        let mem = mem.memory();
        let mut pages = 0;
        for region in mem.iter() {
            match crate::sys::mem::unmap_shared_pages(region) {
                Ok(true) => pages += region.size() / 4096,
                Ok(false) => {}
                Err(e) => {
                    warn!("cannot release the guest memory this daemon has touched: {e}; it stays mapped");
                    return false;
                }
            }
        }
        debug!("dropped the mappings of guest memory (regions of {pages} pages in all)");
        true
    }
}
