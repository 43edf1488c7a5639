//! The host's control interface to a running union, by mergerfs's runtime names: every
//! `user.mergerfs.<option>` read and (where it may change while the guest runs) set, branch
//! edits, and the per-file queries (`basepath`, `relpath`, `fullpath`, `allpaths`). Reached
//! only from the host (the `ctl` socket and SIGHUP), never from a guest request.

use crate::fs::BranchId;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{Mode, OFlags};

use super::branches::{Branches, Reuse, Root};
use super::options::{FileHandles, Func, UnionOptions};
use super::view::View;
use super::{node, UnionFs};
use crate::sys::beneath;
use crate::union::edit::{show, BranchEdit};
use crate::union::Branch;

/// A control request that failed: the errno mergerfs gives for it (ENOATTR unknown key,
/// EROFS read-only key, EINVAL bad value, ENOENT no such path…) and one line for the user.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CtlError {
    /// The errno.
    pub errno: i32,
    /// What went wrong, for the user.
    pub message: String,
}

impl CtlError {
    /// An error `errno` with `message`.
    pub fn new(errno: i32, message: impl Into<String>) -> Self {
        CtlError {
            errno,
            message: message.into(),
        }
    }
}

impl UnionFs {
    /// The options requests see now.
    pub fn options(&self) -> UnionOptions {
        self.views.peek(|v| v.opts.clone())
    }

    /// The branches as configured now, in branch order.
    pub fn branch_list(&self) -> Vec<Branch> {
        self.views.peek(|v| v.branches.specs().to_vec())
    }

    /// The ids of the branches now, in branch order (an id is never reused).
    pub fn branch_ids(&self) -> Vec<usize> {
        self.views
            .peek(|v| v.branches.indices().map(BranchId::raw).collect())
    }

    /// Changes the options of every request that begins from now on with `change` (which
    /// options may change while the guest runs is the caller's decision); an error changes
    /// nothing. Changes are made one at a time.
    pub fn update_options(
        &self,
        change: impl FnOnce(&mut UnionOptions) -> Result<(), CtlError>,
    ) -> Result<(), CtlError> {
        self.views.change(|cur| {
            let mut opts = cur.opts.clone();
            change(&mut opts)?;
            let mut branches = cur.branches.clone();
            branches.refloor(opts.minfreespace);
            Ok((View { branches, opts }, ()))
        })
    }

    /// Applies a branch edit: the branches it adds are `dirs` (opened by the caller, in the
    /// order [`BranchEdit::added`] names them), or with no `dirs` opened here by path. A
    /// branch already in the union keeps its id (an added directory that is one of them
    /// is EEXIST); a removed branch's nodes answer ESTALE from now on and their descriptors
    /// close, while its open files keep working until they are closed. Returns what changed.
    pub fn edit_branches(&self, edit: &BranchEdit, dirs: Vec<OwnedFd>) -> Result<String, CtlError> {
        let added = edit.added();
        if !dirs.is_empty() && dirs.len() != added.len() {
            return Err(CtlError::new(
                libc::EINVAL,
                format!("{} directories for {} branches", dirs.len(), added.len()),
            ));
        }
        let (change, removed) = self.views.change(|cur| {
            let live: Vec<(BranchId, (u64, u64))> = cur
                .branches
                .roots()
                .filter_map(|(id, r)| {
                    let st = beneath::stat_fd(r.as_fd()).ok()?;
                    Some((id, (st.st_dev, st.st_ino)))
                })
                .collect();
            let mut dirs = dirs.into_iter();
            let mut new = Vec::with_capacity(added.len());
            for spec in added {
                let fd = match dirs.next() {
                    Some(fd) => fd,
                    None => rustix::fs::open(
                        &spec.path,
                        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                        Mode::empty(),
                    )
                    .map_err(|e| {
                        CtlError::new(e.raw_os_error(), format!("{}: {e}", spec.path.display()))
                    })?,
                };
                let st = beneath::stat_fd(fd.as_fd()).map_err(|e| {
                    CtlError::new(
                        e.raw_os_error().unwrap_or(libc::EIO),
                        format!("{}: {e}", spec.path.display()),
                    )
                })?;
                if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                    return Err(CtlError::new(
                        libc::ENOTDIR,
                        format!("{}: not a directory", spec.path.display()),
                    ));
                }
                let key = (st.st_dev, st.st_ino);
                let reuse = match live.iter().find(|(_, k)| *k == key) {
                    Some(&(id, _)) => Reuse::Id(id),
                    None => {
                        if self.options().file_handles == FileHandles::Mandatory {
                            node::probe_handles(fd.as_fd()).map_err(|e| {
                                CtlError::new(
                                    libc::EINVAL,
                                    format!(
                                        "{}: --inode-file-handles=mandatory, and its nodes cannot use file handles: {e}",
                                        spec.path.display()
                                    ),
                                )
                            })?;
                        }
                        Reuse::New(Root {
                            fd,
                            dev: st.st_dev,
                            path: spec.path.clone(),
                            handle_mount: Default::default(),
                        })
                    }
                };
                new.push((key, spec.clone(), reuse));
            }
            let current: Vec<_> = cur
                .branches
                .indices()
                .zip(cur.branches.specs())
                .map(|(id, spec)| {
                    let key = live.iter().find(|(i, _)| *i == id).map_or((0, 0), |l| l.1);
                    (key, spec.clone(), Reuse::Id(id))
                })
                .collect();
            let next = edit
                .apply(current, new, |(_, spec, _)| spec.path.as_path())
                .map_err(|e| CtlError::new(libc::EINVAL, e.to_string()))?;
            let mut seen = std::collections::HashSet::new();
            for (key, spec, _) in &next {
                if !seen.insert(*key) {
                    return Err(CtlError::new(
                        libc::EEXIST,
                        format!("{}: already a branch of the union", spec.path.display()),
                    ));
                }
            }
            let next: Vec<(Branch, Reuse)> = next.into_iter().map(|(_, s, r)| (s, r)).collect();
            let branches = cur.branches.edited(next, cur.opts.minfreespace);
            let change = describe(&cur.branches, &branches);
            let removed: Vec<BranchId> = cur
                .branches
                .indices()
                .filter(|&id| !branches.is_live(id))
                .collect();
            let next = View {
                branches,
                opts: cur.opts.clone(),
            };
            Ok((next, (change, removed)))
        })?;
        // The removed branches' nodes let their directories go (so that a disk can be
        // unmounted once its open files are closed).
        if !removed.is_empty() {
            self.inodes.close_where(|b, _| removed.contains(&b));
        }
        Ok(change)
    }

    /// Closes the descriptor of every node that has a name (`cmd.invalidate-all-nodes`): each
    /// is found again, by handle or by path, when next used. Returns how many were closed.
    pub fn invalidate_nodes(&self) -> usize {
        self.inodes.close_where(|_, named| named)
    }

    /// Where `path` (a union path; a leading `/` is optional) lives, as mergerfs's per-file
    /// queries say: `basepath` (the branch the getxattr policy finds it on), `relpath` (the
    /// path from the union root, with its `/`), `fullpath` (the two joined) or `allpaths`
    /// (its full path on every branch that holds it, in branch order).
    pub fn query_path(&self, path: &str, what: &str) -> Result<Vec<Vec<u8>>, CtlError> {
        let now = self.now();
        let call = self.call(&now, None);
        let trimmed = path.trim_matches('/');
        let rel = if trimmed.is_empty() { "." } else { trimmed };
        if rel
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
            && rel != "."
        {
            return Err(CtlError::new(
                libc::EINVAL,
                format!("{path}: not a plain union path"),
            ));
        }
        let crel = CString::new(rel)
            .map_err(|_| CtlError::new(libc::EINVAL, format!("{path}: contains NUL")))?;
        let relpath = format!("/{trimmed}").into_bytes();
        let full = |b: BranchId| -> Vec<u8> {
            let mut p = call.host_path(b, &crel);
            if rel == "." {
                p.truncate(p.len() - 2);
            }
            p
        };
        let missing = |e: io::Error| {
            CtlError::new(
                e.raw_os_error().unwrap_or(libc::EIO),
                format!("{path}: {e}"),
            )
        };
        match what {
            "relpath" => {
                call.search(Func::Getxattr, &crel).map_err(missing)?;
                Ok(vec![relpath])
            }
            "basepath" | "fullpath" => {
                let f = call.search(Func::Getxattr, &crel).map_err(missing)?;
                let root = call.root(f.branch).map_err(missing)?;
                Ok(vec![if what == "basepath" {
                    root.path.as_os_str().as_encoded_bytes().to_vec()
                } else {
                    full(f.branch)
                }])
            }
            "allpaths" => {
                let all: Vec<Vec<u8>> = call
                    .view()
                    .branches
                    .indices()
                    .filter(|&b| call.find_on(b, &crel).is_some())
                    .map(full)
                    .collect();
                if all.is_empty() {
                    return Err(missing(io::Error::from_raw_os_error(libc::ENOENT)));
                }
                Ok(all)
            }
            _ => Err(CtlError::new(
                libc::ENODATA,
                format!(
                    "unknown query '{what}' (expected basepath, relpath, fullpath or allpaths)"
                ),
            )),
        }
    }
}

/// What an edit changed, for the log: each branch added or removed, with its id, and each
/// whose mode or floor changed.
fn describe(old: &Branches, new: &Branches) -> String {
    let mut parts = Vec::new();
    let spec_of = |b: &Branches, id: BranchId| b.position(id).map(|p| b.specs()[p].clone());
    for id in new.indices() {
        match (spec_of(old, id), spec_of(new, id)) {
            (None, Some(s)) => parts.push(format!("added {} (id {id})", show(&[s]))),
            (Some(o), Some(n)) if o != n => parts.push(format!(
                "{} is now {} (id {id})",
                o.path.display(),
                show(&[n])
            )),
            _ => {}
        }
    }
    for id in old.indices().filter(|&id| !new.is_live(id)) {
        if let Some(s) = spec_of(old, id) {
            parts.push(format!("removed {} (id {id})", s.path.display()));
        }
    }
    if old.indices().ne(new.indices()) && parts.is_empty() {
        parts.push("reordered".into());
    }
    if parts.is_empty() {
        "no change".into()
    } else {
        parts.join("; ")
    }
}
