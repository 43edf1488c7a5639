//! The destination's half: a [`SessionImage`] made into this daemon's session. Every node is
//! found again (by path beneath its branch root, or by file handle) and checked (a directory
//! is still a directory; with `--migration-verify-handles`, the very same inode), every open
//! file opened again with its flags, every lock taken again without waiting. What cannot be
//! found fails the import (`--migration-on-error=abort`: the front-end aborts the migration
//! and the source goes on) or is lost (`guest-error`: the guest gets EIO for it). A failed
//! import leaves no session behind, and no lock held. The image comes from the front-end:
//! every id, name and handle in it is checked before use.

use crate::fs::BranchId;
use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, OnceLock};

use rustix::fs::OFlags;

use super::{Locate, NodeImage, OnError, OpenImage, SessionImage};
use crate::fs::branches::HandleMount;
use crate::fs::call::Call;
use crate::fs::handle::{DirHandle, FileHandle as OpenFile, Handle};
use crate::fs::inode::{NodeRecord, ROOT_ID};
use crate::fs::readdir_snapshot::Listing;
use crate::sys::beneath;
use crate::sys::handle::{self, FileHandle};

/// Why an import failed.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The image was made over another number of branches.
    #[error("the session has {image} branches, this daemon serves {here}")]
    Branches {
        /// Branches in the image.
        image: u32,
        /// Branches here.
        here: usize,
    },
    /// The source's branch set was edited while it ran, and this daemon serves another.
    #[error("the session's branches were edited to {image}; this daemon serves {here}")]
    EditedBranches {
        /// The source's branch paths.
        image: String,
        /// This daemon's.
        here: String,
    },
    /// The image's nodes do not make a node table (ids, parents or names).
    #[error("the session's node table is malformed: {0}")]
    Table(String),
    /// A node could not be found again.
    #[error("node {id} ({path}) cannot be found again: {why}")]
    Node {
        /// Its id.
        id: u64,
        /// Its union path, or `(unnamed)`.
        path: String,
        /// Why.
        why: String,
    },
    /// An open file or directory could not be opened again.
    #[error("open file {fh} of node {inode} cannot be opened again: {why}")]
    Open {
        /// The handle.
        fh: u64,
        /// Its node.
        inode: u64,
        /// Why.
        why: String,
    },
    /// Locks could not be taken again.
    #[error("the guest's locks cannot be taken again: {0}")]
    Locks(String),
}

/// What an import restored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Imported {
    /// Nodes, root included.
    pub nodes: usize,
    /// Open files and directories.
    pub handles: usize,
    /// Locks taken.
    pub locks: usize,
    /// Nodes, handles and locks lost (`guest-error`).
    pub lost: usize,
}

/// Host open flags an imported file handle may carry (what an OPEN passes to the host).
fn open_flags(bits: u32) -> OFlags {
    let keep = libc::O_ACCMODE
        | libc::O_APPEND
        | libc::O_DIRECT
        | libc::O_DSYNC
        | libc::O_SYNC
        | libc::O_NOATIME;
    OFlags::from_bits_retain(bits & keep as u32)
}

/// The union path of `id` by first names (`first(id)` = (parent, name)), `.` for the root;
/// None when a node on the way has no name or the walk exceeds `limit` steps (a loop).
pub(super) fn walk<'a>(
    id: u64,
    limit: usize,
    first: impl Fn(u64) -> Option<(u64, &'a [u8])>,
) -> Option<CString> {
    let mut parts: Vec<&[u8]> = Vec::new();
    let mut cur = id;
    while cur != ROOT_ID {
        let (parent, name) = first(cur)?;
        parts.push(name);
        if parts.len() > limit {
            return None;
        }
        cur = parent;
    }
    if parts.is_empty() {
        return Some(c".".to_owned());
    }
    parts.reverse();
    CString::new(parts.join(&b'/')).ok()
}

/// Whether `name` can be one component of a path (what a LOOKUP would accept).
fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name != b"." && name != b".." && !name.contains(&b'/') && !name.contains(&0)
}

impl Call<'_> {
    /// Makes `img` this daemon's session (replacing any), as `on_error` says for what cannot
    /// be found again. On error nothing of it stays (no node, handle or lock).
    pub(crate) fn import_session(
        &self,
        img: SessionImage,
        on_error: OnError,
    ) -> Result<Imported, ImportError> {
        if img.branches as usize != self.view().branches.len() {
            return Err(ImportError::Branches {
                image: img.branches,
                here: self.view().branches.len(),
            });
        }
        if !img.edited_branches.is_empty() {
            let here: Vec<Vec<u8>> = self
                .branch_list()
                .iter()
                .map(|b| b.path.as_os_str().as_encoded_bytes().to_vec())
                .collect();
            if here != img.edited_branches {
                let show = |v: &[Vec<u8>]| {
                    v.iter()
                        .map(|p| String::from_utf8_lossy(p).into_owned())
                        .collect::<Vec<_>>()
                        .join(":")
                };
                return Err(ImportError::EditedBranches {
                    image: show(&img.edited_branches),
                    here: show(&here),
                });
            }
        }
        crate::fuse::Filesystem::destroy(self.fs());
        let r = self.import_parts(img, on_error);
        if r.is_err() {
            crate::fuse::Filesystem::destroy(self.fs());
        }
        r
    }

    fn import_parts(&self, img: SessionImage, on_error: OnError) -> Result<Imported, ImportError> {
        let mut done = Imported::default();
        let nodes = self.import_nodes(&img.nodes, on_error, &mut done.lost)?;
        done.nodes = nodes.len();
        self.inodes
            .restore(nodes, img.next_node)
            .map_err(|_| ImportError::Table("ids, parents or names do not fit together".into()))?;
        let mut entries = Vec::with_capacity(img.open.len());
        for o in &img.open {
            let (fh, h) = match self.import_open(o) {
                Ok(h) => h,
                Err(e) if on_error == OnError::GuestError => {
                    log::warn!("{e}: the guest gets EIO for it");
                    done.lost += 1;
                    let (fh, inode) = match *o {
                        OpenImage::File { fh, inode, .. }
                        | OpenImage::Dir { fh, inode, .. }
                        | OpenImage::Lost { fh, inode } => (fh, inode),
                    };
                    (fh, Handle::Lost { inode })
                }
                Err(e) => return Err(e),
            };
            entries.push((fh, h));
        }
        done.handles = entries.len();
        self.handles.restore(entries, img.next_handle);
        let failed = self.locks.import(self, &img.locks);
        if !failed.is_empty() {
            if on_error == OnError::Abort {
                return Err(ImportError::Locks(failed.join("; ")));
            }
            for f in &failed {
                log::error!("a guest lock is lost: {f}");
            }
            done.lost += failed.len();
        }
        done.locks = img.locks.len() - failed.len();
        self.negotiated.set(img.writeback, img.submounts);
        self.negotiated
            .set_extra(super::super::negotiated::Extra::new(
                img.posix_acl,
                img.security_ctx,
                img.idmap,
            ));
        let copies = img.copied_up.into_iter().filter_map(|c| {
            Some((
                c.base,
                self.branch_index(c.branch).ok()?,
                CString::new(c.path).ok()?,
            ))
        });
        self.copied_up.replace(copies.collect::<Vec<_>>());
        Ok(done)
    }

    /// Every node found again (or lost, with `guest-error`).
    fn import_nodes(
        &self,
        nodes: &[NodeImage],
        on_error: OnError,
        lost: &mut usize,
    ) -> Result<Vec<NodeRecord>, ImportError> {
        let first: HashMap<u64, (u64, &[u8])> = nodes
            .iter()
            .filter_map(|n| {
                n.names
                    .first()
                    .map(|(p, name)| (n.id, (*p, name.as_slice())))
            })
            .collect();
        // Nodes keep descriptors up to the table's capacity (the rest are reopened on use);
        // a node without a name always keeps its own. The capacity is set with the budget.
        self.fd_budget();
        let keep = self.inodes.capacity();
        let mounts: Vec<OnceLock<Option<HandleMount>>> = (0..self.view().branches.id_bound())
            .map(|_| OnceLock::new())
            .collect();
        let mut out = Vec::with_capacity(nodes.len());
        let mut kept = 0;
        for n in nodes {
            let mut names = Vec::with_capacity(n.names.len());
            for (p, name) in &n.names {
                if !valid_name(name) {
                    return Err(ImportError::Table(format!("node {}: a bad name", n.id)));
                }
                names.push((*p, CString::new(name.clone()).expect("checked for NUL")));
            }
            let path = || walk(n.id, nodes.len(), |id| first.get(&id).copied());
            let mut r = NodeRecord {
                id: n.id,
                lookups: n.lookups,
                names,
                is_dir: n.is_dir,
                key: None,
                hold: None,
                stamp: n.stamp,
                lost: false,
            };
            match self.find_again(n, &path, &mounts) {
                Ok(None) => {}
                Ok(Some((branch, fd, st))) => {
                    r.key = Some((st.st_dev, st.st_ino));
                    let handle = self.handle_of(branch, fd.as_fd());
                    let fd = (r.names.is_empty() || kept < keep).then(|| Arc::new(fd));
                    kept += usize::from(fd.is_some());
                    r.hold = Some((branch, fd, handle));
                }
                Err(why) => {
                    let path =
                        path().map_or("(unnamed)".into(), |p| p.to_string_lossy().into_owned());
                    let e = ImportError::Node {
                        id: n.id,
                        path,
                        why,
                    };
                    if on_error == OnError::Abort {
                        return Err(e);
                    }
                    log::warn!("{e}: the guest gets EIO for it");
                    *lost += 1;
                    r.lost = true;
                }
            }
            out.push(r);
        }
        Ok(out)
    }

    /// Node `n`'s object on this host: its branch, an `O_PATH` descriptor and its attributes
    /// (None: unbound); why not.
    fn find_again(
        &self,
        n: &NodeImage,
        path: &dyn Fn() -> Option<CString>,
        mounts: &[OnceLock<Option<HandleMount>>],
    ) -> Result<Option<(BranchId, OwnedFd, libc::stat64)>, String> {
        let (branch, fd) = match &n.locate {
            Locate::Unbound => return Ok(None),
            Locate::Lost { why } => return Err(why.clone()),
            Locate::Path { branch } => {
                let b = self.branch_index(*branch)?;
                let rel = path().ok_or("it has no path")?;
                (b, self.open_on(b, &rel).map_err(|e| e.to_string())?)
            }
            Locate::Handle { branch, handle: h } => {
                let b = self.branch_index(*branch)?;
                let mount = mounts[b.raw()]
                    .get_or_init(|| {
                        super::super::node::probe_handles(self.root(b).ok()?.as_fd()).ok()
                    })
                    .as_ref()
                    .ok_or("this daemon cannot open file handles on its branch")?;
                let h =
                    FileHandle::from_parts(h.kind, &h.bytes).ok_or("a malformed file handle")?;
                let fd = handle::open_by_handle(mount.fd.as_fd(), &h, OFlags::PATH)
                    .map_err(|e| format!("its file handle: {e}"))?;
                (b, fd)
            }
        };
        let st = beneath::stat_fd(fd.as_fd()).map_err(|e| e.to_string())?;
        let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
        if is_dir != n.is_dir {
            return Err("its kind changed (directory or not)".into());
        }
        if let Some(v) = &n.verify {
            let (h, _) =
                handle::name_to_handle(fd.as_fd()).map_err(|e| format!("its file handle: {e}"))?;
            if h.kind() != v.kind || h.bytes() != v.bytes.as_slice() {
                return Err("it is another file now (its file handle differs)".into());
            }
        }
        Ok(Some((branch, fd, st)))
    }

    /// The id of the branch an image names by its position in branch order, checked.
    fn branch_index(&self, b: u32) -> Result<BranchId, String> {
        let b = b as usize;
        let view = self.view();
        (b < view.branches.len())
            .then(|| view.branches.id_at(b))
            .ok_or_else(|| format!("no branch {b}"))
    }

    /// One open file or directory, opened again.
    fn import_open(&self, o: &OpenImage) -> Result<(u64, Handle), ImportError> {
        match o {
            OpenImage::Lost { fh, inode } => Ok((*fh, Handle::Lost { inode: *inode })),
            OpenImage::File { fh, inode, flags } => {
                let fail = |why: String| ImportError::Open {
                    fh: *fh,
                    inode: *inode,
                    why,
                };
                let (branch, node) = self
                    .node_fd(*inode)
                    .map_err(|e| fail(e.to_string()))?
                    .ok_or_else(|| fail("its node is not bound to a file".into()))?;
                let st = beneath::stat_fd(node.as_fd()).map_err(|e| fail(e.to_string()))?;
                if st.st_mode & libc::S_IFMT != libc::S_IFREG {
                    return Err(fail("it is not a regular file".into()));
                }
                let flags = open_flags(*flags);
                let fd = beneath::reopen(node.as_fd(), flags).map_err(|e| fail(e.to_string()))?;
                Ok((*fh, Handle::File(OpenFile::new(fd, *inode, branch, flags))))
            }
            OpenImage::Dir { fh, inode, listing } => {
                let snapshot = match listing {
                    None => None,
                    Some(l) => {
                        let mut entries = Listing::with_capacity(l.len());
                        for e in l {
                            entries.push(&e.name, e.ino, e.dtype).map_err(|e| {
                                ImportError::Open {
                                    fh: *fh,
                                    inode: *inode,
                                    why: e.to_string(),
                                }
                            })?;
                        }
                        let snap =
                            self.listings
                                .charge(entries)
                                .map_err(|e| ImportError::Open {
                                    fh: *fh,
                                    inode: *inode,
                                    why: e.to_string(),
                                })?;
                        Some(Arc::new(snap))
                    }
                };
                Ok((
                    *fh,
                    Handle::Dir(DirHandle {
                        inode: *inode,
                        snapshot: Mutex::new(snapshot),
                    }),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walk_builds_paths_and_refuses_loops() {
        let names: HashMap<u64, (u64, &[u8])> = [
            (2, (1, &b"a"[..])),
            (3, (2, &b"b"[..])),
            (4, (5, &b"x"[..])),
            (5, (4, &b"y"[..])),
        ]
        .into_iter()
        .collect();
        let first = |id| names.get(&id).copied();
        assert_eq!(walk(1, 5, first).unwrap().as_bytes(), b".");
        assert_eq!(walk(3, 5, first).unwrap().as_bytes(), b"a/b");
        assert_eq!(walk(4, 5, first), None);
        assert_eq!(walk(9, 5, first), None);
    }

    #[test]
    fn names_and_flags_are_checked() {
        assert!(valid_name(b"a"));
        for bad in [&b""[..], b".", b"..", b"a/b", b"a\0"] {
            assert!(!valid_name(bad));
        }
        let f = open_flags((libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC | libc::O_APPEND) as u32);
        assert_eq!(f, OFlags::RDWR | OFlags::APPEND);
    }
}
