//! The one policy for lock poisoning: a lock whose holder panicked is used as it was left. A
//! panic in one request's handler answers that request EIO (the dispatcher catches it); the
//! tables it held stay usable, so the session keeps serving every later request instead of
//! answering EIO to all of them. The first recovery is logged, once per process.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LockResult, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

static LOGGED: AtomicBool = AtomicBool::new(false);

/// `r`'s guard, recovered (and the first recovery logged) if a holder panicked.
pub(crate) fn recover<G>(r: LockResult<G>) -> G {
    r.unwrap_or_else(|poisoned| {
        if !LOGGED.swap(true, Ordering::Relaxed) {
            log::warn!("a request panicked while holding a lock; its data is used as it was left");
        }
        poisoned.into_inner()
    })
}

/// [`Mutex::lock`] that recovers from poisoning.
pub trait LockRecover<T> {
    /// The guard, whether or not a holder panicked.
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T> LockRecover<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        recover(self.lock())
    }
}

/// [`RwLock::read`] and [`RwLock::write`] that recover from poisoning.
pub trait RwRecover<T> {
    /// The read guard, whether or not a holder panicked.
    fn reading(&self) -> RwLockReadGuard<'_, T>;
    /// The write guard, whether or not a holder panicked.
    fn writing(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T> RwRecover<T> for RwLock<T> {
    fn reading(&self) -> RwLockReadGuard<'_, T> {
        recover(self.read())
    }

    fn writing(&self) -> RwLockWriteGuard<'_, T> {
        recover(self.write())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_is_used_as_it_was_left() {
        let m = Mutex::new(1);
        let rw = RwLock::new(2);
        let _ = std::panic::catch_unwind(|| {
            let (mut a, mut b) = (m.lock().unwrap(), rw.write().unwrap());
            (*a, *b) = (10, 20);
            panic!("a handler panics holding both");
        });
        assert!(m.is_poisoned() && rw.is_poisoned());
        assert_eq!(*m.locked(), 10);
        assert_eq!(*rw.reading(), 20);
        *rw.writing() = 21;
        assert_eq!(*rw.reading(), 21);
    }
}
