//! Finding entries on branches: runs the category's policy with a probe that opens paths
//! beneath each branch root (`probe.rs`), and turns host attributes into the union's (stable
//! inode numbers unique across branches).

use crate::fs::BranchId;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::Instant;

use fuse_backend_rs::abi::fuse_abi::stat64;
use fuse_backend_rs::api::filesystem::Entry;

use super::branches::Root;
use super::dir_links::{self, CopyStamp};
use super::errno;
pub(crate) use super::found::{check_name, join, present, split_parent, DirFd, Found, Founds};
pub(crate) use super::ino::ino_for;
use super::inode::Rebind;
use super::probe::OpeningProbe;
use crate::fs::call::Call;
use crate::fs::options::{FollowSymlinks, Func, InodeCalc};
use crate::sys::beneath;

impl Call<'_> {
    /// The root of `branch` (its `O_PATH` descriptor); ESTALE once the branch was removed.
    pub(crate) fn root(&self, branch: BranchId) -> io::Result<Arc<Root>> {
        self.with_root(branch, Arc::clone)
    }

    /// `f` of the root of `branch` (no reference kept); ESTALE once the branch was removed.
    pub(crate) fn with_root<T>(
        &self,
        branch: BranchId,
        f: impl FnOnce(&Arc<Root>) -> T,
    ) -> io::Result<T> {
        self.with_view(|v| v.branches.root(branch).map(f))
            .ok_or_else(|| errno(libc::ESTALE))
    }

    /// Runs `func`'s policy on `rel`, returning what the probe opened for each chosen branch.
    fn select(&self, func: Func, rel: &CStr) -> io::Result<Founds> {
        let view = self.view();
        let policy = view.opts.policies.get(func);
        let cat = func.category();
        // (A first-found search never gets here: `search` stops at the first copy itself.)
        if policy.every_existing(cat) {
            // The default action policy (epall): every branch holding `rel` that `cat` may
            // use, in order, as the policy would choose them, with no probe set up.
            let mut out = Founds::new();
            let mut fold = crate::union::ErrnoFold::new();
            let mut failure = None;
            for (pos, info) in view.branches.infos().iter().enumerate() {
                match self.lookup_on(view.branches.id_at(pos), rel) {
                    Ok(Some(f)) if cat.allows(info.mode) => out.push(f),
                    Ok(Some(_)) => fold.err(libc::EROFS),
                    Ok(None) => fold.err(libc::ENOENT),
                    Err(e) => {
                        failure.get_or_insert(e);
                        fold.err(libc::ENOENT);
                    }
                }
            }
            if out.is_empty() {
                // As the probe reports it: a real failure rather than "not there".
                return Err(match (fold.errno(), failure) {
                    (libc::ENOENT, Some(e)) => e,
                    (e, _) => errno(e),
                });
            }
            return Ok(out);
        }
        let probe = OpeningProbe::new(self, rel);
        let chosen = policy
            .select(func.category(), probe.infos(), rel.to_bytes(), &probe)
            .map_err(|e| probe.failure(errno(e)))?;
        chosen.into_iter().map(|b| probe.take(b)).collect()
    }

    /// The node's union path, or an empty path for a node without a name (an open file that
    /// was unlinked): only path-based inode numbers and symlinkify read it.
    pub(crate) fn node_rel(&self, inode: u64) -> CString {
        self.inodes.path(inode).unwrap_or_default()
    }

    /// Whether the attributes shown for `st` depend on the node's path: path-based inode
    /// numbers, symlinkify (a symlink's size is its host path's length) and merged directories
    /// (their times come from every branch).
    pub(crate) fn attr_needs_path(&self, st: &stat64) -> bool {
        let o = &self.view().opts;
        let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
        o.symlinkify
            || (is_dir && self.view().branches.len() > 1)
            || match o.inodecalc {
                InodeCalc::PathHash | InodeCalc::PathHash32 => true,
                InodeCalc::HybridHash | InodeCalc::HybridHash32 => is_dir,
                _ => false,
            }
    }

    /// The attributes of a directory present on several branches, as one directory would have
    /// them: the latest mtime and ctime of any copy (creating or removing an entry in any copy
    /// updates the directory's times, as POSIX requires) and a link count of 2 plus the number
    /// of distinct subdirectories in the union. `bound` is the copy `st` came from; a directory
    /// on one branch keeps the host's own values.
    pub(crate) fn merge_dir_attrs(&self, st: &mut stat64, rel: &CStr, bound: &Found) {
        if self.view().branches.len() < 2
            || st.st_mode & libc::S_IFMT != libc::S_IFDIR
            || rel.is_empty()
        {
            return;
        }
        let mut copies = Vec::new();
        let mut stamps = smallvec::SmallVec::<[CopyStamp; 4]>::new();
        stamps.push(CopyStamp {
            dev: st.st_dev,
            ino: st.st_ino,
            nlink: st.st_nlink,
        });
        for b in self
            .view()
            .branches
            .indices()
            .filter(|&b| b != bound.branch)
        {
            let Ok(fd) = self.open_on(b, rel) else {
                continue;
            };
            let Ok(o) = beneath::stat_fd(fd.as_fd()) else {
                continue;
            };
            if o.st_mode & libc::S_IFMT != libc::S_IFDIR {
                continue;
            }
            if (o.st_mtime, o.st_mtime_nsec) > (st.st_mtime, st.st_mtime_nsec) {
                (st.st_mtime, st.st_mtime_nsec) = (o.st_mtime, o.st_mtime_nsec);
            }
            if (o.st_ctime, o.st_ctime_nsec) > (st.st_ctime, st.st_ctime_nsec) {
                (st.st_ctime, st.st_ctime_nsec) = (o.st_ctime, o.st_ctime_nsec);
            }
            stamps.push(CopyStamp {
                dev: o.st_dev,
                ino: o.st_ino,
                nlink: o.st_nlink,
            });
            copies.push(fd);
        }
        if copies.is_empty() {
            return;
        }
        if let Some(n) = dir_links::from_copies(&stamps) {
            st.st_nlink = n;
            return;
        }
        let now = Instant::now();
        if let Some(n) = self.dir_links.get(rel.to_bytes(), &stamps, now) {
            st.st_nlink = n;
            return;
        }
        let epoch = self.dir_links.epoch();
        let dirs = std::iter::once(bound.fd.as_fd()).chain(copies.iter().map(|d| d.as_fd()));
        let Some(subdirs) = distinct_subdirs(dirs) else {
            return;
        };
        st.st_nlink = 2 + subdirs;
        let window = self.view().opts.cache_attr;
        self.dir_links
            .keep(rel.to_bytes(), &stamps, st.st_nlink, (epoch, now, window));
    }

    /// The entry at `rel` as `func`'s (search) policy finds it.
    pub(crate) fn search(&self, func: Func, rel: &CStr) -> io::Result<Found> {
        let view = self.view();
        if !view.opts.policies.get(func).first_existing(func.category()) {
            let mut v = self.select(func, rel)?;
            return Ok(v.swap_remove(0));
        }
        // The default (`ff`): the first branch that has it, as the policy would choose, with
        // no probe set up; a real failure on a branch before it is reported over ENOENT.
        let mut failure = None;
        for pos in 0..view.branches.len() {
            match self.lookup_on(view.branches.id_at(pos), rel) {
                Ok(Some(f)) => return Ok(f),
                Ok(None) => {}
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        Err(failure.unwrap_or_else(|| errno(libc::ENOENT)))
    }

    /// Every copy of `rel` that `func`'s (action) policy chooses to change (EROFS if only RO
    /// copies exist).
    pub(crate) fn action(&self, func: Func, rel: &CStr) -> io::Result<Founds> {
        match self.select(func, rel) {
            // Copy-on-write: only RO copies, so the visible one is copied up and changed there.
            Err(e) if self.view().opts.cow && e.raw_os_error() == Some(libc::EROFS) => {
                let f = self.search(Func::Getattr, rel)?;
                self.copy_up(rel, &f)?;
                self.select(func, rel)
            }
            r => r,
        }
    }

    /// The branches on which `func` (a create) makes a new entry in directory `parent_rel`,
    /// each with the `O_PATH` descriptor of that parent there. A policy that is not
    /// path-preserving may choose a branch lacking the parent: its path is cloned there first.
    pub(crate) fn create_targets(&self, func: Func, parent_rel: &CStr) -> io::Result<Founds> {
        let policy = self.view().opts.policies.get(func);
        let probe = OpeningProbe::new(self, parent_rel);
        let chosen = policy
            .select(
                func.category(),
                probe.infos(),
                parent_rel.to_bytes(),
                &probe,
            )
            .map_err(|e| probe.failure(errno(e)))?;
        let mut out = Founds::with_capacity(chosen.len());
        for b in chosen {
            let f = match probe.take(b) {
                Ok(f) => f,
                Err(_) => {
                    let from = self.search(Func::Getattr, parent_rel)?;
                    self.clone_path(from.branch, probe.id(b), parent_rel)?;
                    probe.open(b).ok_or_else(|| errno(libc::ENOENT))?
                }
            };
            if f.st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                return Err(errno(libc::ENOTDIR));
            }
            out.push(f);
        }
        Ok(out)
    }

    /// Whether `rel` exists on any branch.
    pub(crate) fn exists_anywhere(&self, rel: &CStr) -> bool {
        if self.view().opts.cow {
            return self
                .view()
                .branches
                .indices()
                .any(|b| self.find_on(b, rel).is_some());
        }
        self.view()
            .branches
            .indices()
            .any(|b| self.open_on(b, rel).is_ok())
    }

    /// `rel` on `branch` as an `O_PATH` descriptor, never following its last component.
    /// Earlier components follow symlinks (inside the branch) only when `follow-symlinks`
    /// covers directories; otherwise no symlink is ever followed.
    pub(crate) fn open_on(&self, branch: BranchId, rel: &CStr) -> io::Result<OwnedFd> {
        self.with_root(branch, |r| {
            beneath::open_path_with(r.as_fd(), rel, self.resolve, false)
        })?
    }

    /// `rel` on `branch` as lookups see it: a symlink whose target kind `follow-symlinks`
    /// covers is shown as its target (resolved inside the branch).
    pub(crate) fn find_on(&self, branch: BranchId, rel: &CStr) -> Option<Found> {
        self.lookup_on(branch, rel).ok().flatten()
    }

    /// [`UnionFs::find_on`] keeping the cause of a failure: `Ok(None)` only when the entry is
    /// not there, an error when looking failed (EMFILE must never read as ENOENT).
    pub(crate) fn lookup_on(&self, branch: BranchId, rel: &CStr) -> io::Result<Option<Found>> {
        let Some(fd) = present(self.open_on(branch, rel))? else {
            return Ok(None);
        };
        let st = beneath::stat_fd(fd.as_fd())?;
        let (cow, follow_symlinks) = self.with_view(|v| (v.opts.cow, v.opts.follow_symlinks));
        // Copy-on-write layers: whiteouts are never shown, nor what a layer above hides.
        if cow && (super::cow::is_whiteout(&st) || self.cow_masked(branch, rel)?) {
            return Ok(None);
        }
        if st.st_mode & libc::S_IFMT == libc::S_IFLNK && follow_symlinks != FollowSymlinks::Never {
            let followed = beneath::open_path_with(
                self.root(branch)?.as_fd(),
                rel,
                beneath::RESOLVE_IN_ROOT,
                true,
            )
            .ok()
            .and_then(|t| Some((beneath::stat_fd(t.as_fd()).ok()?, t)));
            if let Some((tst, t)) = followed {
                let kind = tst.st_mode & libc::S_IFMT;
                let follow = match self.view().opts.follow_symlinks {
                    FollowSymlinks::Never => false,
                    FollowSymlinks::Directory => kind == libc::S_IFDIR,
                    FollowSymlinks::Regular => kind == libc::S_IFREG,
                    FollowSymlinks::All => kind == libc::S_IFDIR || kind == libc::S_IFREG,
                };
                if follow {
                    return Ok(Some(Found {
                        branch,
                        fd: Arc::new(t),
                        st: tst,
                    }));
                }
            }
        }
        let found = Found {
            branch,
            fd: Arc::new(fd),
            st,
        };
        // Copy-on-write: another name of this base file was copied up; this name is linked
        // to that copy too, so that every name shows (and keeps, on disk) the one file.
        if cow && self.view().branches.is_ro(branch) && self.has_copied_alias(&found) {
            return self.copy_up(rel, &found).map(Some);
        }
        Ok(Some(found))
    }

    /// The `O_PATH` descriptor of directory `rel` on `branch` (a followed symlink counts):
    /// the root's own for `.`, otherwise one opened (one system call where no symlink is
    /// involved).
    pub(crate) fn dir_on(&self, branch: BranchId, rel: &CStr) -> io::Result<DirFd> {
        if rel.to_bytes() == b"." {
            return self.root(branch).map(DirFd::Root);
        }
        // Without copy-on-write layers, a directory opened by its path is all a lookup would
        // find; a symlink to follow (ENOTDIR, ELOOP) or another failure takes the lookup's
        // way, but a missing path is missing there too.
        if !self.with_view(|v| v.opts.cow) {
            let opened = self.with_root(branch, |r| {
                beneath::open_dir_path_with(r.as_fd(), rel, self.resolve)
            })?;
            match opened {
                Ok(fd) => return Ok(DirFd::Opened(fd)),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Err(e),
                Err(_) => {}
            }
        }
        let Some(Found { fd, st, .. }) = self.find_on(branch, rel) else {
            return Err(errno(libc::ENOENT));
        };
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(errno(libc::ENOTDIR));
        }
        // Freshly opened, so this is the only reference.
        Arc::try_unwrap(fd)
            .or_else(|fd| fd.try_clone())
            .map(DirFd::Opened)
    }

    /// The union inode number for a host entry: directories (which merge across branches) by
    /// their union path, everything else by host device and inode (mergerfs's hybrid-hash).
    pub(crate) fn union_ino(&self, st: &stat64, rel: &[u8]) -> u64 {
        let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
        ino_for(
            self.with_view(|v| v.opts.inodecalc),
            is_dir,
            rel,
            st.st_dev,
            st.st_ino,
        )
    }

    /// Whether `symlinkify` shows `f` as a symlink: a regular file without write bits whose
    /// mtime and ctime are both older than `symlinkify_timeout` (mergerfs's rule).
    pub(crate) fn symlinkified(&self, f: &Found) -> bool {
        let Some(timeout) =
            self.with_view(|v| v.opts.symlinkify.then_some(v.opts.symlinkify_timeout))
        else {
            return false;
        };
        if f.st.st_mode & libc::S_IFMT != libc::S_IFREG || f.st.st_mode & 0o222 != 0 {
            return false;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let limit = timeout.as_secs() as i64;
        now - f.st.st_mtime > limit && now - f.st.st_ctime > limit
    }

    /// The guest's path of union path `rel`, under `mountpoint` (for the abs-*symlink modes).
    pub(crate) fn pool_path(&self, rel: &[u8]) -> Vec<u8> {
        let mut p = self
            .view()
            .opts
            .mountpoint
            .trim_end_matches('/')
            .as_bytes()
            .to_vec();
        p.push(b'/');
        p.extend_from_slice(rel);
        p
    }

    /// The host path of `rel` on `branch` (what a symlinkified file points to).
    pub(crate) fn host_path(&self, branch: BranchId, rel: &CStr) -> Vec<u8> {
        let mut p = match self.root(branch) {
            Ok(r) => r.path.as_os_str().as_encoded_bytes().to_vec(),
            Err(_) => Vec::new(),
        };
        p.push(b'/');
        p.extend_from_slice(rel.to_bytes());
        p
    }

    /// The attributes the guest is shown for `f` found at `rel` (before inode mapping):
    /// a symlinkified file becomes a symlink to its host path.
    pub(crate) fn shown(&self, f: &Found, rel: &CStr) -> stat64 {
        let mut st = f.st;
        if self.symlinkified(f) {
            st.st_mode = (st.st_mode & !libc::S_IFMT) | libc::S_IFLNK;
            st.st_size = self.host_path(f.branch, rel).len() as i64;
        }
        st
    }

    /// Host attributes as the guest sees them.
    pub(crate) fn union_attr(&self, mut st: stat64, rel: &[u8]) -> stat64 {
        st.st_ino = self.union_ino(&st, rel);
        st
    }

    /// Records a guest lookup of `parent/name` found as `f` (at union path `rel`) and builds
    /// the FUSE entry: the node of `f`'s host object (shared by its hard links), bound to it,
    /// with the windows its standing allows (`fs/static_cache.rs`).
    pub(crate) fn entry_for(
        &self,
        parent: u64,
        name: &CStr,
        rel: &CStr,
        f: &Found,
        rebind: Rebind,
    ) -> io::Result<Entry> {
        let st = self.shown(f, rel);
        let key = (f.st.st_dev, f.st.st_ino);
        // A name the table already gives this object needs no binding (no file handle made):
        // the usual case of a guest revalidating or relisting, its node open or closed.
        let inode = match self
            .inodes
            .lookup_known(parent, name, key, (f.branch, &f.fd), rebind)
        {
            Some(id) => id,
            None => self
                .inodes
                .lookup(parent, name, self.bind_of(f), rebind, self.node_room())?,
        };
        // A mount point inside the branch: the guest mounts it apart (its own st_dev).
        let submount = self.submounts_active()
            && st.st_mode & libc::S_IFMT == libc::S_IFDIR
            && crate::sys::beneath::is_mount_root(f.fd.as_fd()).unwrap_or(false);
        let standing = self.standing(f.branch, rel);
        let (attr_timeout, entry_timeout) = self.with_view(|v| {
            (
                standing.window(v.opts.cache_attr),
                standing.window(v.opts.cache_entry),
            )
        });
        Ok(Entry {
            inode,
            generation: 0,
            attr: self.union_attr(st, rel.to_bytes()),
            attr_flags: if submount {
                fuse_backend_rs::abi::fuse_abi::ATTR_SUBMOUNT
            } else {
                0
            },
            attr_timeout,
            entry_timeout,
        })
    }
}

/// How many names are subdirectories in at least one of `dirs` (`O_PATH` descriptors of a
/// directory's copies); `None` if one cannot be read.
fn distinct_subdirs<'a>(dirs: impl Iterator<Item = BorrowedFd<'a>>) -> Option<u64> {
    let mut subdirs = std::collections::HashSet::new();
    for dir in dirs {
        let entries = beneath::list_dir(dir).ok()?;
        for e in entries {
            let is_dir = match e.dtype {
                t if t == u32::from(libc::DT_DIR) => true,
                t if t == u32::from(libc::DT_UNKNOWN) => CString::new(e.name.clone())
                    .ok()
                    .and_then(|n| beneath::stat_at(dir, &n).ok())
                    .is_some_and(|s| s.st_mode & libc::S_IFMT == libc::S_IFDIR),
                _ => false,
            };
            if is_dir {
                subdirs.insert(e.name);
            }
        }
    }
    Some(subdirs.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_parents() {
        assert!(check_name(c"ok").is_ok());
        for bad in [c"", c".", c"..", c"a/b", c"/"] {
            assert_eq!(
                check_name(bad).unwrap_err().raw_os_error(),
                Some(libc::EINVAL)
            );
        }
        let long = CString::new(vec![b'x'; 256]).unwrap();
        assert_eq!(
            check_name(&long).unwrap_err().raw_os_error(),
            Some(libc::ENAMETOOLONG)
        );
        let (p, n) = split_parent(c"a/b/c");
        assert_eq!((p.as_bytes(), n.as_bytes()), (&b"a/b"[..], &b"c"[..]));
        let (p, n) = split_parent(c"c");
        assert_eq!((p.as_bytes(), n.as_bytes()), (&b"."[..], &b"c"[..]));
    }
}
