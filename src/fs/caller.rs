//! Acting as the guest caller on the host. Every call that creates, changes or checks
//! permission on a host object runs with the caller's fsuid and fsgid and none of the daemon's
//! supplementary groups (`sys::creds`), so the host kernel checks the permission again,
//! clears set-user/group-ID bits as it does for an unprivileged caller, and refuses what an
//! id map took away (a squashed guest root cannot unlink a host root's file).
//!
//! FUSE sends no supplementary groups. A guest user whose kernel allowed a change through one
//! of its supplementary groups would be refused on the host, so a call the host refuses
//! (EACCES or EPERM) is tried once more with the groups of the objects involved as
//! supplementary groups: only groups the guest could name as its own primary group under the
//! id map ([`UnionFs::claimable_gid`]), so the retry grants nothing a caller claiming that
//! group does not already have. A refused call changed nothing, so trying it again is safe.

use std::io;
use std::os::fd::BorrowedFd;

use fuse_backend_rs::api::filesystem::Context;

use crate::fs::UnionFs;
use crate::sys::{beneath, creds};

/// When the objects' groups join the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Groups {
    /// Only if the host refuses the call without them (the usual case).
    OnRefusal,
    /// From the start: for chmod, where the host does not refuse but silently clears
    /// set-group-ID for a caller outside the file's group.
    Always,
}

impl UnionFs {
    /// Runs `call` as the guest caller `ctx` (host ids). `objects` are the host objects whose
    /// group may grant the permission (parent directories, the file itself), `gids` further
    /// groups (a chown's new group).
    pub(crate) fn as_caller<T>(
        &self,
        ctx: &Context,
        objects: &[BorrowedFd<'_>],
        gids: &[u32],
        groups: Groups,
        mut call: impl FnMut() -> io::Result<T>,
    ) -> io::Result<T> {
        let as_caller = creds::switch_to(ctx.uid, ctx.gid)?;
        if !as_caller.switched() {
            return call();
        }
        if groups == Groups::Always {
            let g = self.object_groups(ctx, objects, gids);
            let _groups = (!g.is_empty())
                .then(|| creds::with_groups(&g))
                .transpose()?;
            return call();
        }
        match call() {
            Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
                let g = self.object_groups(ctx, objects, gids);
                if g.is_empty() {
                    return Err(e);
                }
                let Ok(_groups) = creds::with_groups(&g) else {
                    return Err(e);
                };
                call()
            }
            r => r,
        }
    }

    /// The groups of `objects` and `gids` that the caller is not in by its own gid and could
    /// claim as its gid.
    fn object_groups(&self, ctx: &Context, objects: &[BorrowedFd<'_>], gids: &[u32]) -> Vec<u32> {
        let mut out: Vec<u32> = Vec::with_capacity(objects.len() + gids.len());
        let found = objects
            .iter()
            .filter_map(|fd| beneath::stat_fd(*fd).ok().map(|st| st.st_gid));
        for g in found.chain(gids.iter().copied()) {
            if g != ctx.gid && !out.contains(&g) && self.claimable_gid(g) {
                out.push(g);
            }
        }
        out
    }

    /// Whether some guest gid maps to host gid `g`: the guest could send it as a caller's gid.
    pub(crate) fn claimable_gid(&self, g: u32) -> bool {
        let map = &self.cfg.ids.gid;
        map.to_host(map.to_guest(g)) == Ok(g)
    }
}
