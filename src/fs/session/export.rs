//! The source's half: the session as a [`SessionImage`], taken while the guest is stopped.
//! Nodes are described from the node table as it stands (their names are their paths); a
//! node is looked at on the host only when the options ask for its file handle or for its
//! path to be confirmed.

use crate::fs::BranchId;
use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use super::{
    CopiedUpImage, EntryImage, ExportOptions, FindBy, HandleImage, Locate, NodeImage, OpenImage,
    SessionImage,
};
use crate::fs::call::Call;
use crate::fs::handle::Handle;
use crate::fs::inode::{NodeRecord, ROOT_ID};
use crate::sync::LockRecover;
use crate::sys::beneath;
use crate::sys::handle::{self, FileHandle};

impl Call<'_> {
    /// The session as it stands (the rings stopped: nothing changes it meanwhile).
    pub(crate) fn export_session(&self, opts: ExportOptions) -> SessionImage {
        let (records, next_node) = self.inodes.records();
        // By branch id (a node names its branch by id; the image by position in branch order).
        let mounts: Vec<Option<i32>> = self
            .view()
            .branches
            .all_ids()
            .map(|b| {
                opts.handles_allowed
                    .then(|| {
                        handle::name_to_handle(self.root(b).ok()?.as_fd())
                            .ok()
                            .map(|h| h.1)
                    })
                    .flatten()
            })
            .collect();
        let nodes = records
            .iter()
            .map(|r| self.export_node(r, &records, opts, &mounts))
            .collect();
        let (handles, next_handle) = self.handles.entries();
        let open = handles
            .into_iter()
            .filter_map(|(fh, h)| export_open(fh, &h))
            .collect();
        let copied_up = self
            .copied_up
            .all()
            .into_iter()
            .filter_map(|(base, branch, path)| {
                Some(CopiedUpImage {
                    base,
                    branch: self.view().branches.position(branch)? as u32,
                    path: path.into_bytes(),
                })
            })
            .collect();
        let edited = self
            .branch_ids()
            .iter()
            .copied()
            .ne(0..self.cfg.branches.len())
            || self.branch_list() != self.cfg.branches;
        let edited_branches = if edited {
            self.branch_list()
                .iter()
                .map(|b| b.path.as_os_str().as_encoded_bytes().to_vec())
                .collect()
        } else {
            Vec::new()
        };
        SessionImage {
            edited_branches,
            branches: self.view().branches.len() as u32,
            nodes,
            next_node,
            open,
            next_handle,
            locks: self.locks.export(),
            copied_up,
            writeback: self.writeback_active(),
            submounts: self.submounts_active(),
            posix_acl: self.negotiated.posix_acl(),
            security_ctx: self.negotiated.security_ctx(),
            idmap: self.negotiated.idmap(),
        }
    }

    /// One node's image.
    fn export_node(
        &self,
        r: &NodeRecord,
        all: &[NodeRecord],
        opts: ExportOptions,
        mounts: &[Option<i32>],
    ) -> NodeImage {
        let mut verify = None;
        let locate = match (&r.hold, r.lost) {
            _ if r.id == ROOT_ID => Locate::Unbound,
            (_, true) => Locate::Lost {
                why: "lost in an earlier migration".into(),
            },
            (None, false) => Locate::Unbound,
            (Some((branch, _, _)), false) if self.view().branches.position(*branch).is_none() => {
                Locate::Lost {
                    why: "its branch was removed".into(),
                }
            }
            (Some((branch, fd, kept)), false) => {
                let branch = *branch;
                // The node's handle: the one it keeps, else made now from its descriptor
                // (reopened if the table closed it), on its branch root's mount.
                let want_handle = opts.find_by == FindBy::FileHandles
                    || opts.verify_handles
                    || r.names.is_empty();
                let handle = want_handle
                    .then(|| {
                        kept.as_ref()
                            .map(|h| image_of(h))
                            .or_else(|| self.handle_now(r.id, fd.as_ref(), mounts[branch.raw()]))
                    })
                    .flatten();
                if opts.verify_handles {
                    verify.clone_from(&handle);
                }
                self.locate(r, all, branch, handle, opts)
            }
        };
        NodeImage {
            id: r.id,
            lookups: r.lookups,
            names: r
                .names
                .iter()
                .map(|(p, n)| (*p, n.as_bytes().to_vec()))
                .collect(),
            is_dir: r.is_dir,
            locate,
            verify,
            stamp: r.stamp,
        }
    }

    /// How the destination is to find node `r`'s object on `branch`.
    fn locate(
        &self,
        r: &NodeRecord,
        all: &[NodeRecord],
        branch: BranchId,
        handle: Option<HandleImage>,
        opts: ExportOptions,
    ) -> Locate {
        let pos = self.view().branches.position(branch).unwrap_or(0) as u32;
        let by_handle = |handle| Locate::Handle {
            branch: pos,
            handle,
        };
        if r.names.is_empty() {
            return match handle {
                Some(h) => by_handle(h),
                None => Locate::Lost {
                    why: "open but unlinked in the guest, and its filesystem makes no file \
                          handle"
                        .into(),
                },
            };
        }
        if opts.find_by == FindBy::FileHandles {
            if let Some(h) = handle {
                return by_handle(h);
            }
        }
        if opts.confirm_paths {
            if let Err(why) = self.confirm_path(r, all, branch) {
                return Locate::Lost { why };
            }
        }
        Locate::Path { branch: pos }
    }

    /// The file handle of node `id` made now, if its filesystem makes one on the branch
    /// root's mount (`mount`).
    fn handle_now(
        &self,
        id: u64,
        fd: Option<&Arc<OwnedFd>>,
        mount: Option<i32>,
    ) -> Option<HandleImage> {
        let mount = mount?;
        let fd = match fd {
            Some(fd) => fd.clone(),
            None => self.node_fd(id).ok().flatten()?.1,
        };
        let (h, m) = handle::name_to_handle(fd.as_fd()).ok()?;
        (m == mount).then(|| image_of(&h))
    }

    /// Whether node `r`'s path on `branch` still leads to its object
    /// (`--migration-confirm-paths`); why not.
    fn confirm_path(
        &self,
        r: &NodeRecord,
        all: &[NodeRecord],
        branch: BranchId,
    ) -> Result<(), String> {
        let path = path_in(all, r.id).ok_or("its path has a node without a name")?;
        let Some(key) = r.key else {
            return Ok(());
        };
        let found = self
            .open_on(branch, &path)
            .and_then(|fd| beneath::stat_fd(fd.as_fd()))
            .map_err(|e| format!("{}: {e}", path.to_string_lossy()))?;
        if (found.st_dev, found.st_ino) != key {
            return Err(format!(
                "{} leads to another file now",
                path.to_string_lossy()
            ));
        }
        Ok(())
    }
}

/// A handle as the image carries it.
fn image_of(h: &FileHandle) -> HandleImage {
    HandleImage {
        kind: h.kind(),
        bytes: h.bytes().to_vec(),
    }
}

/// The union path of `id` from the records' first names (`.` for the root); None when an
/// ancestor has no name or the names loop.
pub(super) fn path_in(all: &[NodeRecord], id: u64) -> Option<CString> {
    let first = |id: u64| {
        let i = all.binary_search_by_key(&id, |r| r.id).ok()?;
        all[i].names.first().map(|(p, n)| (*p, n.as_bytes()))
    };
    super::import::walk(id, all.len(), first)
}

/// An open file's or directory's image (files keep their access and status flags; O_CREAT,
/// O_EXCL and O_TRUNC did their work at the first open).
fn export_open(fh: u64, h: &Handle) -> Option<OpenImage> {
    // Every kind has an image; Option leaves room for handles that cannot move.
    match h {
        Handle::File(f) => {
            let strip =
                rustix::fs::OFlags::CREATE | rustix::fs::OFlags::EXCL | rustix::fs::OFlags::TRUNC;
            Some(OpenImage::File {
                fh,
                inode: f.inode,
                flags: (f.flags & !strip).bits(),
            })
        }
        Handle::Dir(d) => Some(OpenImage::Dir {
            fh,
            inode: d.inode,
            listing: d.snapshot.locked().as_ref().map(|s| {
                s.entries_from(0)
                    .map(|(_, e)| EntryImage {
                        name: e.name.to_vec(),
                        ino: e.ino,
                        dtype: e.dtype,
                    })
                    .collect()
            }),
        }),
        Handle::Lost { inode } => Some(OpenImage::Lost { fh, inode: *inode }),
    }
}
