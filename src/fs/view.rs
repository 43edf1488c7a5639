//! What one request sees of a union whose branches and options the host may change while the
//! guest runs: a [`View`] (the branch set and the options) is replaced whole by a control
//! change, never edited in place, and each request is served from the one view that was
//! current when it began (the request carries it: `call.rs`), however long it runs.

use std::sync::Arc;

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use super::branches::{Branches, Root};
use super::errno;
use super::options::UnionOptions;
use super::UnionFs;

/// The branch set and the options, as one snapshot.
pub struct View {
    /// The branches.
    pub(crate) branches: Branches,
    /// The behaviour options.
    pub(crate) opts: UnionOptions,
}

impl View {
    /// Whether the guest keeps every directory's listing across opens (FOPEN_CACHE_DIR and
    /// FOPEN_KEEP_CACHE on every OPENDIR): `cache.readdir`, or only static branches.
    pub(crate) fn keeps_every_listing(&self) -> bool {
        self.opts.cache_readdir || self.branches.all_static()
    }
}

/// The view requests see now, replaced whole by a change (one change at a time).
pub(crate) struct Views {
    current: arc_swap::ArcSwap<View>,
    /// Serializes changes (each derives the next view from the current one).
    changing: std::sync::Mutex<()>,
}

impl Views {
    /// Views starting with `view`.
    pub(crate) fn new(view: View) -> Self {
        Views {
            current: arc_swap::ArcSwap::from_pointee(view),
            changing: Default::default(),
        }
    }

    /// The view a request beginning now sees.
    pub(crate) fn now(&self) -> Arc<View> {
        self.current.load_full()
    }

    /// Runs `f` on the view of now without taking a reference to it (an option or two).
    pub(crate) fn peek<R>(&self, f: impl FnOnce(&View) -> R) -> R {
        f(&self.current.load())
    }

    /// One change: `f` derives the next view from the current one (with what to report), or
    /// refuses and nothing changes. Changes never interleave.
    pub(crate) fn change<T, E>(
        &self,
        f: impl FnOnce(&Arc<View>) -> Result<(View, T), E>,
    ) -> Result<T, E> {
        let _one = crate::sync::LockRecover::locked(&self.changing);
        let (next, out) = f(&self.current.load_full())?;
        self.current.store(Arc::new(next));
        Ok(out)
    }
}

/// The branch roots as the sandbox needs them: handed out before it, replaced inside it.
impl UnionFs {
    /// The `O_PATH` descriptors of the branch roots, in branch order (for the sandbox to
    /// bind-mount).
    pub fn root_fds(&self) -> Vec<(OwnedFd, PathBuf)> {
        self.now()
            .branches
            .roots()
            .filter_map(|(_, r)| Some((r.fd.try_clone().ok()?, r.path.clone())))
            .collect()
    }

    /// Replaces the branch root descriptors with `fds` (the same directories, opened again
    /// from inside the sandbox); EXDEV if one is not on its branch's filesystem.
    pub fn replace_roots(&mut self, fds: Vec<OwnedFd>) -> io::Result<()> {
        let old = self.now();
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
        let next = View {
            branches: Branches::new(roots, specs, old.opts.minfreespace),
            opts: old.opts.clone(),
        };
        self.views.change(|_| Ok::<_, io::Error>((next, ())))
    }
}
