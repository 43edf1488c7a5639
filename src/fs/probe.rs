//! The probe a policy runs against the real branches for one path: it opens the path beneath
//! each branch root it is asked about, remembers what it opened (so the chosen branch is not
//! opened twice) and keeps the first real failure (so a failure is never reported as "no
//! such entry").

use crate::fs::BranchId;
use std::cell::RefCell;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::AsFd;

use super::call::Call;
use super::errno;
use super::found::{present, Found};
use crate::sys::beneath;
use crate::union::policy::Space;
use crate::union::Probe;

/// A probe over the real branches that remembers what it opened for one path.
pub(crate) struct OpeningProbe<'a> {
    fs: Call<'a>,
    /// The request's view: the policies' branch positions are its branch order.
    view: &'a super::view::View,
    rel: &'a CStr,
    cache: RefCell<smallvec::SmallVec<[Option<Option<Found>>; 4]>>,
    /// The first failure that was not "no such entry" (EMFILE, ENOMEM, EIO…): a probe that
    /// hit it must not report the entry missing.
    error: RefCell<Option<io::Error>>,
}

impl<'a> OpeningProbe<'a> {
    pub(crate) fn new(fs: &Call<'a>, rel: &'a CStr) -> Self {
        let (fs, view) = (*fs, fs.view());
        let cache = RefCell::new(view.branches.indices().map(|_| None).collect());
        OpeningProbe {
            fs,
            view,
            rel,
            cache,
            error: RefCell::new(None),
        }
    }

    /// Keeps `r`'s error if it is a real failure; answers whether something was found.
    fn note<T>(&self, r: io::Result<Option<T>>) -> Option<T> {
        match r {
            Ok(v) => v,
            Err(e) => {
                self.error.borrow_mut().get_or_insert(e);
                None
            }
        }
    }

    /// What is at the probe's path on the branch at `pos` in branch order.
    pub(crate) fn open(&self, pos: usize) -> Option<Found> {
        self.note(self.fs.lookup_on(self.id(pos), self.rel))
    }

    /// The id of the branch at `pos` in branch order.
    pub(crate) fn id(&self, pos: usize) -> BranchId {
        self.view.branches.id_at(pos)
    }

    /// Where branch `id` stands in the probe's branch order.
    pub(crate) fn position(&self, id: BranchId) -> Option<usize> {
        self.view.branches.position(id)
    }

    /// Mode and floor of each branch, in the probe's branch order.
    pub(crate) fn infos(&self) -> &[crate::union::policy::BranchInfo] {
        self.view.branches.infos()
    }

    pub(crate) fn take(&self, pos: usize) -> io::Result<Found> {
        let cached = self.cache.borrow_mut()[pos].take().flatten();
        match cached.or_else(|| self.open(pos)) {
            Some(f) => Ok(f),
            None => Err(self.failure(errno(libc::ENOENT))),
        }
    }

    /// `e`, unless it is ENOENT and a real failure was seen: then that failure.
    pub(crate) fn failure(&self, e: io::Error) -> io::Error {
        if e.raw_os_error() == Some(libc::ENOENT) {
            if let Some(real) = self.error.borrow_mut().take() {
                return real;
            }
        }
        e
    }
}

impl Probe for OpeningProbe<'_> {
    fn space(&self, branch: usize) -> Option<Space> {
        let st = rustix::fs::fstatvfs(self.fs.root(self.id(branch)).ok()?.as_fd()).ok()?;
        Some(Space {
            avail: st.f_bavail.saturating_mul(st.f_frsize),
            total: st.f_blocks.saturating_mul(st.f_frsize),
            readonly: st.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY),
        })
    }

    fn mtime(&self, branch: usize, rel: &[u8]) -> Option<i64> {
        let st = if rel == self.rel.to_bytes() && self.exists(branch, rel) {
            self.cache.borrow()[branch].as_ref()?.as_ref()?.st
        } else {
            let r = CString::new(rel).ok()?;
            let fd = self.note(present(self.fs.open_on(self.id(branch), &r)))?;
            beneath::stat_fd(fd.as_fd()).ok()?
        };
        Some(st.st_mtime)
    }

    fn random(&self, bound: u64) -> u64 {
        fastrand::u64(0..bound.max(1))
    }

    fn exists(&self, branch: usize, rel: &[u8]) -> bool {
        if rel != self.rel.to_bytes() {
            let Ok(r) = CString::new(rel) else {
                return false;
            };
            return self
                .note(present(self.fs.open_on(self.id(branch), &r)))
                .is_some();
        }
        let mut cache = self.cache.borrow_mut();
        cache[branch]
            .get_or_insert_with(|| self.open(branch))
            .is_some()
    }
}
