//! The union as the protocol layer's [`Filesystem`](crate::fuse::Filesystem). Each trait method is a one-line
//! delegation into `fs/ops/<family>.rs` with the request's `Call` (the view it pinned);
//! this module owns the branch roots, the inode table and the handle table. It knows nothing of virtqueues (that is `vhost`) and calls no libc directly
//! (that is `sys`).

mod branches;
pub(crate) mod call;
mod caller;
mod clone;
pub mod control;
mod cow;
mod dir_links;
mod found;
mod handle;
pub mod idmap;
mod ino;
mod inode;
mod lockstate;
mod lookup_memo;
mod movefile;
mod negotiated;
mod node;
mod node_listings;
mod ops;
pub mod options;
pub mod passthrough;
mod probe;
mod readdir_snapshot;
mod resolve;
mod serve;
pub mod session;
mod static_cache;
mod view;
pub mod xattrmap;

use std::io;
use std::os::fd::AsFd;
use std::path::PathBuf;

use fuse_backend_rs::abi::fuse_abi::stat64;
use fuse_backend_rs::api::filesystem::{Context, Entry};
use rustix::fs::{Mode, OFlags};

pub use inode::ROOT_ID;

use crate::union::Branch;
use branches::{BranchId, Branches, Root};
use handle::HandleTable;
use inode::InodeTable;
use options::UnionOptions;
pub use view::View;

/// Everything the filesystem layer needs to know, built by `config`.
#[derive(Clone, Debug)]
pub struct FsConfig {
    /// Branches in priority order (first wins for lookups and name clashes).
    pub branches: Vec<Branch>,
    /// Policies and behaviour options.
    pub opts: UnionOptions,
    /// `--translate-uid`/`--translate-gid`.
    pub ids: Ids,
}

/// Id translation between guest and host (see [`idmap`]).
#[derive(Clone, Debug, Default)]
pub struct Ids {
    /// User ids.
    pub uid: idmap::IdMap,
    /// Group ids.
    pub gid: idmap::IdMap,
}

/// Errors setting up the filesystem layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No branch was given.
    #[error("no branches given")]
    NoBranches,
    /// A branch root could not be opened.
    #[error("cannot open branch {path}: {source}")]
    OpenBranch {
        /// The branch path.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A branch root is not a directory.
    #[error("branch {0} is not a directory")]
    NotADirectory(PathBuf),
    /// `--inode-file-handles=mandatory`, and a branch's nodes cannot use file handles.
    #[error("--inode-file-handles=mandatory: branch {path} cannot use file handles: {source}")]
    FileHandles {
        /// The branch path.
        path: PathBuf,
        /// Why (EOPNOTSUPP: its filesystem makes none; EPERM: no CAP_DAC_READ_SEARCH).
        source: io::Error,
    },
}

/// The union filesystem served to the guest.
pub struct UnionFs {
    /// The configuration the daemon started with (its ids map; branches and options as they
    /// were before any control change).
    cfg: FsConfig,
    /// The branch set and options requests see now; a control change replaces it.
    views: view::Views,
    /// How guest paths are resolved beneath branch roots (see `follow-symlinks`).
    resolve: rustix::fs::ResolveFlags,
    inodes: InodeTable,
    handles: HandleTable,
    /// The guest's host-side locks: what each owner holds, their host descriptions, waits.
    locks: ops::lock::Locks,
    /// Serializes `moveonenospc` moves.
    moves: std::sync::Mutex<()>,
    /// Copy-on-write: where each hard-linked base file was copied up (base (dev, ino) to its
    /// upper branch and path), so that its other names are linked to that copy.
    copied_up: cow::CopiedUp,
    /// Entries all open directory listings may hold together.
    listings: readdir_snapshot::ListingBudget,
    /// Listings of directories the guest reads without opening them.
    node_listings: node_listings::NodeListings,
    /// How many descriptors the guest may make the daemon hold (nodes and handles), fixed
    /// from RLIMIT_NOFILE at the first request (after the daemon raised its limit).
    fd_budget: std::sync::OnceLock<usize>,
    /// What the last INIT settled (the writeback cache, announced submounts).
    negotiated: negotiated::Negotiated,
    /// FUSE passthrough on a host mount: the registrar, backing ids per open node.
    passthrough: passthrough::Passthrough,
    /// Which branch holds a name, per directory, so lookups need not probe every branch.
    lookup_memo: lookup_memo::LookupMemo<View>,
    /// Link counts of directories with copies on several branches, counted from listings.
    dir_links: dir_links::DirLinks,
}

/// The errno of a guest id refused by `forbid-guest`.
fn forbidden(_: idmap::Forbidden) -> io::Error {
    io::Error::from_raw_os_error(libc::EPERM)
}

impl UnionFs {
    /// Lets opens hand the kernel branch files to read and write itself (`passthrough.io`):
    /// the host mount's connection, given before it serves; a vhost-user device never gives one.
    pub fn set_backing_registrar(&self, r: std::sync::Arc<dyn passthrough::BackingRegistrar>) {
        self.passthrough.set_registrar(r);
    }

    /// Says whether the kernel checks permissions itself (a guest's always does; a host
    /// mount's with `default_permissions`). Where it does not, every directory open must come
    /// to the daemon, so OPENDIR is never elided.
    pub fn kernel_checks_permissions(&self, yes: bool) {
        self.negotiated.set_daemon_checks(!yes);
    }

    /// Whether the guest's page cache holds writes (FUSE_WRITEBACK_CACHE negotiated).
    pub(crate) fn writeback_active(&self) -> bool {
        self.negotiated.writeback()
    }

    /// Whether mount points are announced to the guest (FUSE_ATTR_SUBMOUNT).
    pub(crate) fn submounts_active(&self) -> bool {
        self.negotiated.submounts()
    }

    /// The request's caller with host ids (`--translate-uid/gid`); EPERM for a forbidden id.
    fn host_ctx(&self, ctx: &Context) -> io::Result<Context> {
        let mut ctx = *ctx;
        // FUSE_ALLOW_IDMAP: a request that creates nothing carries no caller (uid and gid
        // -1); the guest's kernel checked it, and the daemon serves it as the guest's root
        // would be served (so never beyond what the id map grants guest root).
        if ctx.uid == u32::MAX && ctx.gid == u32::MAX && self.negotiated.idmap() {
            (ctx.uid, ctx.gid) = (0, 0);
        }
        let ids = &self.cfg.ids;
        if ids.uid.is_identity() && ids.gid.is_identity() {
            return Ok(ctx);
        }
        Ok(Context {
            uid: ids.uid.to_host(ctx.uid).map_err(forbidden)?,
            gid: ids.gid.to_host(ctx.gid).map_err(forbidden)?,
            pid: ctx.pid,
        })
    }

    /// Attributes with guest ids.
    fn guest_stat(&self, mut st: stat64) -> stat64 {
        st.st_uid = self.cfg.ids.uid.to_guest(st.st_uid);
        st.st_gid = self.cfg.ids.gid.to_guest(st.st_gid);
        st
    }

    /// An entry whose attributes have guest ids.
    fn guest_entry(&self, mut e: Entry) -> Entry {
        e.attr = self.guest_stat(e.attr);
        e
    }
}

/// Descriptors kept back for the daemon's own work (transient opens per request and thread,
/// the socket, the log), beyond what the guest may hold: at least this many, or a tenth of
/// the limit when that is more.
const FD_RESERVE: u64 = 256;

/// The descriptor budget of an open-file limit: what is left after [`FD_RESERVE`] (or a
/// tenth of the limit).
fn budget_for(limit: u64) -> usize {
    let reserve = FD_RESERVE.max(limit / 10);
    usize::try_from(limit.saturating_sub(reserve)).unwrap_or(usize::MAX)
}

/// The smallest open-file limit at which the node table keeps its `node_fds` descriptors
/// open (its share of the budget is a quarter): below it the daemon serves, but reopens
/// nodes more often and the guest meets EMFILE sooner. What "too low" means at start.
pub fn nofile_wanted(node_fds: usize) -> u64 {
    let quarter = u64::try_from(node_fds)
        .unwrap_or(u64::MAX / 8)
        .saturating_mul(4);
    // The budget never shrinks as the limit grows: the least limit is found by bisection.
    let enough = |l: u64| budget_for(l) as u64 >= quarter;
    let (mut lo, mut hi) = (
        quarter,
        quarter.saturating_mul(2).saturating_add(FD_RESERVE),
    );
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if enough(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// The most nodes the guest may hold (each costs a few hundred bytes; about 1 GiB).
const NODE_LIMIT: usize = 1 << 22;

/// Listing entries all open directory handles may hold together (a few hundred MiB at most):
/// past it a directory read answers ENOMEM until other handles are released.
const MAX_LISTED_ENTRIES: usize = 4 << 20;

impl UnionFs {
    /// Opens every branch root and builds an inode table holding only the root.
    pub fn new(cfg: FsConfig) -> Result<Self, Error> {
        if cfg.branches.is_empty() {
            return Err(Error::NoBranches);
        }
        let mut roots = Vec::with_capacity(cfg.branches.len());
        for b in &cfg.branches {
            let fd = rustix::fs::open(&b.path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
                .map_err(|e| Error::OpenBranch {
                    path: b.path.clone(),
                    source: e.into(),
                })?;
            let st =
                crate::sys::beneath::stat_fd(fd.as_fd()).map_err(|source| Error::OpenBranch {
                    path: b.path.clone(),
                    source,
                })?;
            if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                return Err(Error::NotADirectory(b.path.clone()));
            }
            if cfg.opts.file_handles == options::FileHandles::Mandatory {
                node::probe_handles(fd.as_fd()).map_err(|source| Error::FileHandles {
                    path: b.path.clone(),
                    source,
                })?;
            }
            roots.push(Root {
                fd,
                dev: st.st_dev,
                path: b.path.clone(),
                handle_mount: Default::default(),
            });
        }
        let resolve = match cfg.opts.follow_symlinks {
            options::FollowSymlinks::Directory | options::FollowSymlinks::All => {
                crate::sys::beneath::RESOLVE_IN_ROOT
            }
            _ => crate::sys::beneath::RESOLVE,
        };
        let inodes = InodeTable::with_capacity(cfg.opts.node_fds)
            .panic_on_lookup(cfg.opts.test_panic_on_lookup.clone());
        let view = View {
            branches: Branches::new(roots, cfg.branches.clone(), cfg.opts.minfreespace),
            opts: cfg.opts.clone(),
        };
        Ok(UnionFs {
            views: view::Views::new(view),
            cfg,
            resolve,
            inodes,
            handles: HandleTable::default(),
            locks: Default::default(),
            moves: Default::default(),
            copied_up: Default::default(),
            fd_budget: Default::default(),
            negotiated: Default::default(),
            passthrough: Default::default(),
            lookup_memo: Default::default(),
            dir_links: Default::default(),
            listings: readdir_snapshot::ListingBudget::new(MAX_LISTED_ENTRIES),
            node_listings: Default::default(),
        })
    }

    /// Number of nodes the guest holds references to, root included.
    pub fn inode_count(&self) -> usize {
        self.inodes.len()
    }

    /// Number of nodes that hold an open descriptor (at most about `node-fds`, plus nodes
    /// without a name).
    pub fn node_fd_count(&self) -> usize {
        self.inodes.open_fds()
    }

    /// Number of open file and directory handles.
    pub fn handle_count(&self) -> usize {
        self.handles.len()
    }

    /// Entries held by the listings of open directory handles (bounded; freed on RELEASEDIR).
    pub fn listed_entries(&self) -> usize {
        self.listings.held()
    }

    /// The most descriptors the guest may make the daemon hold (open files and directories,
    /// lock descriptions, node descriptors), as virtiofsd bounds them since CVE-2020-10717:
    /// past it the guest gets ENFILE/EMFILE, and the daemon keeps the descriptors it needs to
    /// serve. Fixed at the first request; it also sizes the node table's open descriptors (a
    /// quarter of it, at most `node-fds`).
    pub fn fd_budget(&self) -> usize {
        *self.fd_budget.get_or_init(|| {
            let budget = budget_for(crate::sys::limits::nofile());
            self.inodes
                .set_capacity((budget / 4).clamp(1, self.now().opts.node_fds));
            budget
        })
    }

    /// Descriptors the guest makes the daemon hold now, with `lock_fds` lock descriptions.
    fn fds_held(&self, lock_fds: usize) -> usize {
        self.handles.len() + self.inodes.open_fds() + lock_fds
    }

    /// How many nodes the guest may hold (the node table's `max_nodes`): nodes cost memory,
    /// not descriptors (the table closes the least recently used), up to [`NODE_LIMIT`]; none
    /// more once the descriptor budget is spent (nodes without a name keep theirs).
    pub(crate) fn node_room(&self) -> usize {
        if self.fds_held(self.locks.len()) >= self.fd_budget() {
            return self.inodes.len();
        }
        NODE_LIMIT
    }

    /// EMFILE when the guest holds as many descriptors as the budget allows.
    pub(crate) fn check_handle_room(&self) -> io::Result<()> {
        self.check_room(self.locks.len())
    }

    /// EMFILE when the nodes, handles and `lock_fds` lock descriptions fill the budget (the
    /// lock table calls this under its own lock).
    pub(crate) fn check_room(&self, lock_fds: usize) -> io::Result<()> {
        if self.fds_held(lock_fds) >= self.fd_budget() {
            return Err(errno(libc::EMFILE));
        }
        Ok(())
    }

    /// Stores an open handle, within the budget.
    pub(crate) fn new_handle(&self, h: handle::Handle) -> io::Result<u64> {
        self.check_handle_room()?;
        Ok(self.handles.insert(h))
    }
}

/// The errno as an `io::Error`: the only error kind the fs layer returns.
pub(crate) fn errno(e: i32) -> io::Error {
    io::Error::from_raw_os_error(e)
}

#[cfg(test)]
mod nofile_tests {
    use super::{budget_for, nofile_wanted};

    #[test]
    fn the_wanted_limit_is_the_least_that_keeps_node_fds_open() {
        assert_eq!(nofile_wanted(512), 2304);
        for n in [1, 100, 512, 640, 5000, 100_000] {
            let w = nofile_wanted(n);
            assert!(budget_for(w) / 4 >= n, "{n}: {w}");
            assert!(budget_for(w - 1) / 4 < n, "{n}: {w}");
        }
    }
}
