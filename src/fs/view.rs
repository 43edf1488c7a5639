//! What one request sees of a union whose branches and options the host may change while the
//! guest runs: a [`View`] (the branch set and the options) is replaced whole by a control
//! change, never edited in place, and each request is served from the one view that was
//! current when it began ([`UnionFs::pin_view`]), however long it runs.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::branches::Branches;
use super::options::UnionOptions;
use super::UnionFs;

/// The branch set and the options, as one snapshot.
pub(crate) struct View {
    /// The branches.
    pub(crate) branches: Branches,
    /// The behaviour options.
    pub(crate) opts: UnionOptions,
}

thread_local! {
    /// The view this thread's current request was pinned to, with its filesystem's number.
    static PINNED: RefCell<Option<(usize, Arc<View>)>> = const { RefCell::new(None) };
}

/// Numbers filesystems, so that a pinned view is only ever used by its own.
static NEXT_FS: AtomicUsize = AtomicUsize::new(1);

/// A new filesystem's number.
pub(crate) fn next_fs_number() -> usize {
    NEXT_FS.fetch_add(1, Ordering::Relaxed)
}

/// While it lives, the requests of this thread see the view pinned when it was made.
pub struct ViewScope {
    prev: Option<(usize, Arc<View>)>,
}

impl Drop for ViewScope {
    fn drop(&mut self) {
        let prev = self.prev.take();
        PINNED.with(|p| *p.borrow_mut() = prev);
    }
}

impl UnionFs {
    /// Pins the current view for the request this thread is about to serve.
    pub fn pin_view(&self) -> ViewScope {
        let v = self.current.load_full();
        let prev = PINNED.with(|p| p.borrow_mut().replace((self.number, v)));
        ViewScope { prev }
    }

    /// The view of the request being served (the current one outside a request).
    pub(crate) fn view(&self) -> Arc<View> {
        let pinned = PINNED.with(|p| match &*p.borrow() {
            Some((n, v)) if *n == self.number => Some(v.clone()),
            _ => None,
        });
        pinned.unwrap_or_else(|| self.current.load_full())
    }
}
