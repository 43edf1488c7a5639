//! Requests waiting without bound (SETLKW), by FUSE unique id, so that FUSE_INTERRUPT and the
//! end of a session can wake them. A waiter registers its thread; an interrupt marks it and
//! signals that thread until it has left (a signal sent just before the thread blocks would
//! be lost, so it is repeated until the waiter deregisters).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::sys::thread;

struct Waiter {
    thread: libc::pthread_t,
    cancelled: Arc<AtomicBool>,
}

/// The waiting requests.
#[derive(Default)]
pub(crate) struct Waiters {
    inner: Mutex<Inner>,
}

/// Both under one lock: a registration and an interrupt of the same request must see each
/// other, whichever comes first.
#[derive(Default)]
struct Inner {
    map: HashMap<u64, Waiter>,
    /// Interrupts that came before their request registered (the request runs on another
    /// thread and may not have started): the request is cancelled when it does.
    early: std::collections::VecDeque<u64>,
}

/// How many early interrupts are remembered (a guest that interrupts requests it never sent
/// cannot grow this).
const EARLY: usize = 256;

/// A registered wait; deregisters on drop.
pub(crate) struct Registration<'a> {
    waiters: &'a Waiters,
    unique: u64,
    cancelled: Arc<AtomicBool>,
}

impl Registration<'_> {
    /// Whether the wait was interrupted.
    pub(crate) fn cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.waiters.lock().map.remove(&self.unique);
    }
}

/// How often, and how long, an interrupt re-signals a waiter that has not left yet.
const RESIGNAL: Duration = Duration::from_millis(1);
const RESIGNAL_TRIES: u32 = 5000;

impl Waiters {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers the calling thread as waiting for request `unique`.
    pub(crate) fn register(&self, unique: u64) -> Registration<'_> {
        let mut inner = self.lock();
        let early = inner
            .early
            .iter()
            .position(|&u| u == unique)
            .map(|i| inner.early.remove(i))
            .is_some();
        let cancelled = Arc::new(AtomicBool::new(early));
        inner.map.insert(
            unique,
            Waiter {
                thread: thread::current(),
                cancelled: cancelled.clone(),
            },
        );
        drop(inner);
        Registration {
            waiters: self,
            unique,
            cancelled,
        }
    }

    /// Interrupts request `unique`: wakes it if it waits, or cancels it before it starts
    /// waiting. Whether it was waiting.
    pub(crate) fn interrupt(&self, unique: u64) -> bool {
        let mut found = false;
        for _ in 0..RESIGNAL_TRIES {
            {
                let mut inner = self.lock();
                let Some(w) = inner.map.get(&unique) else {
                    if !found {
                        if inner.early.len() == EARLY {
                            inner.early.pop_front();
                        }
                        inner.early.push_back(unique);
                    }
                    return found;
                };
                found = true;
                w.cancelled.store(true, Ordering::Release);
                // Registered, so its thread is alive: it deregisters (under this lock) first.
                thread::wake(w.thread);
            }
            std::thread::sleep(RESIGNAL);
        }
        found
    }

    /// Interrupts every waiter (the session is over).
    pub(crate) fn interrupt_all(&self) {
        let ids: Vec<u64> = self.lock().map.keys().copied().collect();
        for id in ids {
            self.interrupt(id);
        }
    }
}
