//! A node's host object, however the node table holds it: [`UnionFs::search_node`] finds it
//! as an operation's policy sees it, [`UnionFs::node_fd`] gives the
//! descriptor an operation needs, reopening a node the table closed (by its file handle, or by
//! its path on its branch) and checking that it is still the same object (ESTALE, never
//! another file). [`UnionFs::bind_of`] makes what a lookup binds a node to, with a file handle
//! where `--inode-file-handles` asks for one and the filesystem makes one.

use crate::fs::BranchId;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use rustix::fs::OFlags;

use super::branches::{HandleMount, Root};
use super::errno;
use super::inode::{Bind, Bound, Key};
use super::resolve::Found;
use crate::fs::call::Call;
use crate::fs::options::{FileHandles, Func};
use crate::sys::beneath;
use crate::sys::handle::{self, FileHandle};

impl Call<'_> {
    /// The host object of node `inode` as `func` sees it. A node is bound to the object its
    /// lookup found, and acts through that object's descriptor (one `fstat`, no path walk), so
    /// it keeps working after a rename or after its last name is gone. Only when `func` has a
    /// search policy of its own (not the getattr policy) and the node still has a name is the
    /// policy run on the node's path; an unbound node (the root) is found by its path too.
    pub(crate) fn search_node(&self, func: Func, inode: u64) -> io::Result<Found> {
        if let Some((branch, fd, sx)) = self.bound_for(func, inode)? {
            // A descriptor just reopened was checked with a statx: no second call.
            let st = match sx {
                Some(sx) => crate::sys::file::stat_of(&sx),
                None => beneath::stat_fd(fd.as_fd())?,
            };
            return Ok(Found { branch, fd, st });
        }
        self.search_node_by_path(func, inode)
    }

    /// The copy [`UnionFs::search_node`] finds, read with statx(2) instead of fstat: the
    /// attributes and what only statx gives (birth time, attribute flags), in one call.
    pub(crate) fn search_node_statx(
        &self,
        func: Func,
        inode: u64,
    ) -> io::Result<(Found, libc::statx)> {
        if let Some((branch, fd, sx)) = self.bound_for(func, inode)? {
            let sx = match sx {
                Some(sx) => sx,
                None => crate::sys::file::statx_fd(fd.as_fd())?,
            };
            let st = crate::sys::file::stat_of(&sx);
            return Ok((Found { branch, fd, st }, sx));
        }
        let f = self.search_node_by_path(func, inode)?;
        let sx = crate::sys::file::statx_fd(f.fd.as_fd())?;
        Ok((f, sx))
    }

    /// The branch and descriptor [`UnionFs::search_node`] finds, without the attributes it
    /// reads (for the operations that need only the descriptor: one system call less).
    pub(crate) fn search_node_fd(
        &self,
        func: Func,
        inode: u64,
    ) -> io::Result<(BranchId, Arc<OwnedFd>)> {
        if let Some((branch, fd, _)) = self.bound_for(func, inode)? {
            return Ok((branch, fd));
        }
        let f = self.search_node_by_path(func, inode)?;
        Ok((f.branch, f.fd))
    }

    /// The node's bound copy when `func`'s policy is getattr's (or the node has no name),
    /// with its attributes when they were read to reopen it: `None` when the policy must
    /// search by path.
    fn bound_for(&self, func: Func, inode: u64) -> io::Result<Option<Reopened>> {
        if !self.own_policy(func) || !self.inodes.linked(inode) {
            match self.node_fd_stat(inode) {
                Ok(Some(bound)) => return Ok(Some(bound)),
                Ok(None) => {}
                // A union directory is its path: when the copy its node was bound to is gone,
                // the policy finds the directory again. Anything else answers ESTALE.
                Err(e) if self.inodes.is_dir(inode) && self.inodes.linked(inode) => {
                    log::debug!("node {inode}: {e}, found again by its path");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// [`UnionFs::search_node`] once the node's bound copy did not answer: `func`'s policy
    /// searches the node's path (and getattr's result binds the node).
    fn search_node_by_path(&self, func: Func, inode: u64) -> io::Result<Found> {
        let rel = self.inodes.path(inode)?;
        let f = self.search(func, &rel)?;
        if !self.own_policy(func) {
            self.inodes.bind(inode, self.bind_of(&f));
        }
        Ok(f)
    }

    /// Whether `func` searches with a policy of its own rather than getattr's (whose result a
    /// node is bound to).
    fn own_policy(&self, func: Func) -> bool {
        let policies = &self.view().opts.policies;
        policies.get(func) != policies.get(Func::Getattr)
    }

    /// What a lookup that found `f` binds its node to.
    pub(crate) fn bind_of(&self, f: &Found) -> Bind {
        Bind {
            branch: f.branch,
            fd: f.fd.clone(),
            key: (f.st.st_dev, f.st.st_ino),
            is_dir: f.st.st_mode & libc::S_IFMT == libc::S_IFDIR,
            handle: self.handle_of(f.branch, f.fd.as_fd()),
        }
    }

    /// The file handle of `fd` on `branch`, when nodes use handles there and the object is on
    /// the branch root's own filesystem (a handle only means something with its mount).
    pub(crate) fn handle_of(
        &self,
        branch: BranchId,
        fd: std::os::fd::BorrowedFd<'_>,
    ) -> Option<Arc<FileHandle>> {
        let mount = self.handle_mount(branch)?;
        match handle::name_to_handle(fd) {
            Ok((h, m)) if m == mount.id => Some(Arc::new(h)),
            _ => None,
        }
    }

    /// The mount id of `branch`'s root when its nodes use file handles: worked out once per
    /// branch, in the serving process (after the sandbox, whose mounts have ids of their
    /// own, and which may have taken the capability to open handles).
    fn handle_mount(&self, branch: BranchId) -> Option<Mounted> {
        let view = self.view();
        let handles = view.opts.file_handles;
        if handles == FileHandles::Never {
            return None;
        }
        let root = view.branches.root(branch)?.clone();
        view.branches
            .handle_mount(branch, |root| match probe_handles(root) {
                Ok(m) => {
                    log::info!("branch {branch}: nodes use file handles");
                    Some(m)
                }
                Err(e) => {
                    let level = if handles == FileHandles::Mandatory {
                        log::Level::Error
                    } else {
                        log::Level::Warn
                    };
                    log::log!(
                        level,
                        "branch {branch}: no file handles ({e}): its nodes are reopened by path"
                    );
                    None
                }
            })?;
        Some(Mounted(root))
    }

    /// Works out (and logs) whether each branch's nodes use file handles.
    pub(crate) fn probe_branches(&self) {
        for b in self.view().branches.indices() {
            self.handle_mount(b);
        }
    }

    /// The branch and descriptor of node `inode`'s object, reopened if the table closed it;
    /// None for a node bound to nothing (the root). ESTALE when the object is gone or its
    /// path now leads to another one.
    pub(crate) fn node_fd(&self, inode: u64) -> io::Result<Option<(BranchId, Arc<OwnedFd>)>> {
        Ok(self
            .node_fd_stat(inode)?
            .map(|(branch, fd, _)| (branch, fd)))
    }

    /// [`UnionFs::node_fd`], with the attributes read to check a descriptor it had to
    /// reopen (`None` for one the table held open).
    fn node_fd_stat(&self, inode: u64) -> io::Result<Option<Reopened>> {
        let (branch, handle, key) = match self.inodes.bound(inode) {
            None => return Ok(None),
            Some(Bound::Lost) => return Err(errno(libc::EIO)),
            // A removed branch's nodes are stale, never another branch's objects; but a
            // directory is one union directory across branches, found again by its path.
            Some(Bound::Open(branch, _) | Bound::Closed { branch, .. })
                if !self.with_view(|v| v.branches.is_live(branch)) =>
            {
                return self.dir_elsewhere(inode).map(Some);
            }
            Some(Bound::Open(branch, fd)) => return Ok(Some((branch, fd, None))),
            Some(Bound::Closed {
                branch,
                handle,
                key,
            }) => (branch, handle, key),
        };
        let mount = handle
            .as_ref()
            .and_then(|h| Some((h, self.handle_mount(branch)?)));
        let fd = match mount {
            Some((h, mount)) => handle::open_by_handle(mount.fd.as_fd(), h, OFlags::PATH)
                .map_err(|e| stale(&e).unwrap_or(e))?,
            None => {
                let rel = self.inodes.path(inode).map_err(|_| errno(libc::ESTALE))?;
                self.open_on(branch, &rel)
                    .map_err(|e| stale(&e).unwrap_or(e))?
            }
        };
        let sx = check_key(&fd, key)?;
        Ok(Some((
            branch,
            self.inodes.reopened(inode, key, Arc::new(fd)),
            Some(sx),
        )))
    }
}

/// A node's branch and descriptor, and its attributes if they were just read (statx(2) with
/// the basic fields and the birth time, so a STATX reply needs no second call either).
type Reopened = (BranchId, Arc<OwnedFd>, Option<libc::statx>);

impl Call<'_> {
    /// Directory node `inode`, whose branch was removed, bound again to its directory on
    /// the first branch that still has one; ESTALE for anything else.
    fn dir_elsewhere(&self, inode: u64) -> io::Result<Reopened> {
        let stale = || errno(libc::ESTALE);
        if !self.inodes.is_dir(inode) {
            return Err(stale());
        }
        let rel = self.inodes.path(inode).map_err(|_| stale())?;
        let f = self
            .search(crate::fs::options::Func::Getattr, &rel)
            .map_err(|_| stale())?;
        if f.st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(stale());
        }
        self.inodes.bind(inode, self.bind_of(&f));
        // Rare (a removed branch): the caller reads the attributes it needs.
        Ok((f.branch, f.fd, None))
    }
}

/// A branch root whose nodes use file handles: its [`HandleMount`].
pub(crate) struct Mounted(Arc<Root>);

impl std::ops::Deref for Mounted {
    type Target = HandleMount;
    fn deref(&self) -> &HandleMount {
        self.0
            .handle_mount
            .get()
            .and_then(Option::as_ref)
            .expect("made only for a root with a handle mount")
    }
}

/// Whether nodes under `root` can use file handles: a handle of the root is made and opened
/// again. Where to open them, or why not (EOPNOTSUPP: the filesystem makes none; EPERM: no
/// CAP_DAC_READ_SEARCH in the initial user namespace).
pub(crate) fn probe_handles(root: std::os::fd::BorrowedFd<'_>) -> io::Result<HandleMount> {
    let (h, id) = handle::name_to_handle(root)?;
    let fd = rustix::fs::openat(
        root,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    handle::open_by_handle(fd.as_fd(), &h, OFlags::PATH)?;
    Ok(HandleMount { fd, id })
}

/// A node's descriptor kept across a change that may take its last name (see
/// [`UnionFs::keep_open`]).
pub(crate) struct Kept(Option<(u64, Key, Arc<OwnedFd>)>);

impl Call<'_> {
    /// Before a change that may take the last name of the node at `parent/name` (unlink,
    /// rename over it): the node gets its descriptor back, so that it stays usable after
    /// (an open-unlinked file), when neither its path nor, on some filesystems, its handle
    /// can find its object. Hand the result to [`UnionFs::kept_open`] after the change.
    pub(crate) fn keep_open(&self, parent: u64, name: &std::ffi::CStr) -> Kept {
        self.keep_open_found(parent, name, &[])
    }

    /// [`UnionFs::keep_open`], taking the descriptor from `found` (what the change's policy
    /// just opened) when one of them is the node's object: no reopening of a closed node.
    pub(crate) fn keep_open_found(
        &self,
        parent: u64,
        name: &std::ffi::CStr,
        found: &[super::resolve::Found],
    ) -> Kept {
        let Some((id, key)) = self.inodes.child(parent, name) else {
            return Kept(None);
        };
        let fd = found
            .iter()
            .find(|f| (f.st.st_dev, f.st.st_ino) == key)
            .map(|f| f.fd.clone())
            .or_else(|| self.node_fd(id).ok().flatten().map(|(_, fd)| fd));
        Kept(fd.map(|fd| (id, key, fd)))
    }

    /// After the change: the node holds the descriptor kept for it (the table may have
    /// closed it meanwhile, while the node still had its name).
    pub(crate) fn kept_open(&self, kept: Kept) {
        if let Kept(Some((id, key, fd))) = kept {
            self.inodes.reopened(id, key, fd);
        }
    }

    /// After an unlink or rmdir of `parent/name`: the name goes from the node table and the
    /// node holds the descriptor kept for it, in one pass over the table.
    pub(crate) fn unlinked(&self, parent: u64, name: &std::ffi::CStr, kept: Kept) {
        self.inodes.unlink_keeping(parent, name, kept.0);
    }
}

/// ESTALE for an error that means the object is not where the node left it.
fn stale(e: &io::Error) -> Option<io::Error> {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT | libc::ESTALE | libc::ENOTDIR | libc::ELOOP | libc::EXDEV)
    )
    .then(|| errno(libc::ESTALE))
}

/// ESTALE unless `fd` is the object `key`; its attributes (statx) when it is.
fn check_key(fd: &OwnedFd, key: Key) -> io::Result<libc::statx> {
    let sx = crate::sys::file::statx_fd(fd.as_fd())?;
    if (
        libc::makedev(sx.stx_dev_major, sx.stx_dev_minor),
        sx.stx_ino,
    ) != key
    {
        return Err(errno(libc::ESTALE));
    }
    Ok(sx)
}
