//! Requests that may wait without bound (SETLKW), by FUSE unique id, so that FUSE_INTERRUPT
//! and the end of a session can cancel them. A waiter registers; an interrupt marks it, and
//! the caller then wakes the filesystem's waits (`Filesystem::wake_waits`), which look at the mark
//! under their own lock, so a wake can never fall between a look and a sleep.

use crate::sync::LockRecover;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU8, Ordering};

use super::filesystem::Cancel;
use std::sync::{Arc, Mutex};

/// The waiting requests.
#[derive(Default)]
pub(crate) struct Waiters {
    inner: Mutex<Inner>,
}

/// Both under one lock: a registration and an interrupt of the same request must see each
/// other, whichever comes first.
#[derive(Default)]
struct Inner {
    map: HashMap<u64, Arc<AtomicU8>>,
    /// Interrupts that came before their request registered (the request runs on another
    /// thread and may not have started): the request is cancelled when it does.
    early: VecDeque<u64>,
}

/// How many early interrupts are remembered (a guest that interrupts requests it never sent
/// cannot grow this).
const EARLY: usize = 256;

/// A registration's mark: not cancelled, interrupted, its ring stopping.
const NOT: u8 = 0;
const INTERRUPTED: u8 = 1;
const STOPPED: u8 = 2;

/// A registered wait; deregisters on drop.
pub(crate) struct Registration<'a> {
    waiters: &'a Waiters,
    unique: u64,
    cancelled: Arc<AtomicU8>,
}

impl Registration<'_> {
    /// Whether (and why) the wait was cancelled.
    pub(crate) fn cancelled(&self) -> Option<Cancel> {
        match self.cancelled.load(Ordering::Acquire) {
            NOT => None,
            INTERRUPTED => Some(Cancel::Interrupt),
            _ => Some(Cancel::RingStop),
        }
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.waiters.lock().map.remove(&self.unique);
    }
}

impl Waiters {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.locked()
    }

    /// Registers request `unique` as waiting.
    pub(crate) fn register(&self, unique: u64) -> Registration<'_> {
        let mut inner = self.lock();
        let early = inner
            .early
            .iter()
            .position(|&u| u == unique)
            .map(|i| inner.early.remove(i))
            .is_some();
        let cancelled = Arc::new(AtomicU8::new(if early { INTERRUPTED } else { NOT }));
        inner.map.insert(unique, cancelled.clone());
        drop(inner);
        Registration {
            waiters: self,
            unique,
            cancelled,
        }
    }

    /// Cancels request `unique`: marks it if it waits, or remembers it for when it starts
    /// waiting. Whether it was waiting. The caller then wakes the waits.
    pub(crate) fn interrupt(&self, unique: u64) -> bool {
        let mut inner = self.lock();
        if let Some(c) = inner.map.get(&unique) {
            c.store(INTERRUPTED, Ordering::Release);
            return true;
        }
        if inner.early.len() == EARLY {
            inner.early.pop_front();
        }
        inner.early.push_back(unique);
        false
    }

    /// Cancels every waiting request (the session is over). The caller then wakes the waits.
    pub(crate) fn interrupt_all(&self) {
        for c in self.lock().map.values() {
            c.store(INTERRUPTED, Ordering::Release);
        }
    }

    /// Ends every waiting request because the rings stop (see [`Cancel::RingStop`]); how many
    /// there were. The caller then wakes the waits.
    pub(crate) fn stop_all(&self) -> usize {
        let inner = self.lock();
        for c in inner.map.values() {
            let _ = c.compare_exchange(NOT, STOPPED, Ordering::AcqRel, Ordering::Acquire);
        }
        inner.map.len()
    }
}
