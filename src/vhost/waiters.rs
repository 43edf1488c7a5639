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
    map: Mutex<HashMap<u64, Waiter>>,
    /// Interrupts that came before their request registered (the request runs on another
    /// thread and may not have started): the request is cancelled when it does.
    early: Mutex<std::collections::VecDeque<u64>>,
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
        self.waiters.lock().remove(&self.unique);
    }
}

/// How often, and how long, an interrupt re-signals a waiter that has not left yet.
const RESIGNAL: Duration = Duration::from_millis(1);
const RESIGNAL_TRIES: u32 = 5000;

impl Waiters {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Waiter>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers the calling thread as waiting for request `unique`.
    pub(crate) fn register(&self, unique: u64) -> Registration<'_> {
        let early = {
            let mut e = self.early.lock().unwrap_or_else(|e| e.into_inner());
            e.iter()
                .position(|&u| u == unique)
                .map(|i| e.remove(i))
                .is_some()
        };
        let cancelled = Arc::new(AtomicBool::new(early));
        self.lock().insert(
            unique,
            Waiter {
                thread: thread::current(),
                cancelled: cancelled.clone(),
            },
        );
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
                let map = self.lock();
                let Some(w) = map.get(&unique) else {
                    if !found {
                        let mut e = self.early.lock().unwrap_or_else(|e| e.into_inner());
                        if e.len() == EARLY {
                            e.pop_front();
                        }
                        e.push_back(unique);
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
        let ids: Vec<u64> = self.lock().keys().copied().collect();
        for id in ids {
            self.interrupt(id);
        }
    }
}
