//! What one request sees of a union whose branches and options the host may change while the
//! guest runs: a [`View`] (the branch set and the options) is replaced whole by a control
//! change, never edited in place, and each request is served from the one view that was
//! current when it began ([`UnionFs::pin_view`]), however long it runs.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use super::branches::{Branches, Root};
use super::errno;
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

impl ViewScope {
    /// The view this scope pinned, for another thread serving part of the same request.
    pub fn share(&self) -> SharedView {
        SharedView(PINNED.with(|p| p.borrow().clone()))
    }
}

/// A request's pinned view, as another thread takes it ([`ViewScope::share`]).
#[derive(Clone)]
pub struct SharedView(Option<(usize, Arc<View>)>);

impl SharedView {
    /// Pins this view for what the calling thread serves of the request, until the scope
    /// ends.
    pub fn enter(&self) -> ViewScope {
        let prev = PINNED.with(|p| p.replace(self.0.clone()));
        ViewScope { prev }
    }
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

    /// Runs `f` on the view of the request being served (the current one outside a
    /// request) without taking a reference to it: for reading an option or two on a hot
    /// path. `f` must not pin a view itself.
    pub(crate) fn with_view<R>(&self, f: impl FnOnce(&View) -> R) -> R {
        PINNED.with(|p| {
            let pinned = p.borrow();
            match &*pinned {
                Some((n, v)) if *n == self.number => f(v),
                _ => {
                    drop(pinned);
                    f(&self.current.load_full())
                }
            }
        })
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

/// The branch roots as the sandbox needs them: handed out before it, replaced inside it.
impl UnionFs {
    /// The `O_PATH` descriptors of the branch roots, in branch order (for the sandbox to
    /// bind-mount).
    pub fn root_fds(&self) -> Vec<(OwnedFd, PathBuf)> {
        self.view()
            .branches
            .roots()
            .filter_map(|(_, r)| Some((r.fd.try_clone().ok()?, r.path.clone())))
            .collect()
    }

    /// Replaces the branch root descriptors with `fds` (the same directories, opened again
    /// from inside the sandbox); EXDEV if one is not on its branch's filesystem.
    pub fn replace_roots(&mut self, fds: Vec<OwnedFd>) -> io::Result<()> {
        let old = self.view();
        if fds.len() != old.branches.len() {
            return Err(errno(libc::EINVAL));
        }
        let mut roots = Vec::with_capacity(fds.len());
        for ((_, root), fd) in old.branches.roots().zip(fds) {
            let st = crate::sys::beneath::stat_fd(fd.as_fd())?;
            if st.st_dev != root.dev {
                return Err(errno(libc::EXDEV));
            }
            roots.push(Root {
                fd,
                dev: root.dev,
                path: root.path.clone(),
                handle_mount: Default::default(),
            });
        }
        let specs = old.branches.specs().to_vec();
        self.current.store(Arc::new(View {
            branches: Branches::new(roots, specs, old.opts.minfreespace),
            opts: old.opts.clone(),
        }));
        Ok(())
    }
}
