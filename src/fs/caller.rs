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

use crate::fs::call::Call;
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

impl Call<'_> {
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

    /// For a change the daemon makes on its own (a copy-on-write whiteout or copy-up): EACCES
    /// or EPERM unless caller `ctx` may remove an entry owned by `victim_uid()` from directory
    /// `parent_rel` as the union shows it ([`may_remove`]). Nothing is looked up for root, or
    /// for an unprivileged daemon, which acts only as itself.
    pub(crate) fn may_remove_from(
        &self,
        ctx: &Context,
        parent_rel: &std::ffi::CStr,
        victim_uid: impl FnOnce() -> io::Result<u32>,
    ) -> io::Result<()> {
        if ctx.uid == 0 || !creds::acts_as_caller() {
            return Ok(());
        }
        let dir = self.search(crate::fs::options::Func::Getattr, parent_rel)?;
        let claimable = self.claimable_gid(dir.st.st_gid);
        may_remove(ctx.uid, ctx.gid, &dir.st, victim_uid()?, claimable)
    }

    /// Whether some guest gid maps to host gid `g`: the guest could send it as a caller's gid.
    pub(crate) fn claimable_gid(&self, g: u32) -> bool {
        let map = &self.cfg.ids.gid;
        map.to_host(map.to_guest(g)) == Ok(g)
    }
}

/// Whether caller `uid`/`gid` may remove an entry owned by `victim_uid` from directory `dir`,
/// by the directory's mode bits as the kernel checks them (write and search permission, then
/// the sticky bit), for changes the daemon makes itself rather than as the caller (a
/// copy-on-write whiteout). `group_claimable`: the directory's group is one the caller could
/// claim, which the host grants on a retry ([`UnionFs::as_caller`]). Root may always.
pub(crate) fn may_remove(
    uid: u32,
    gid: u32,
    dir: &libc::stat64,
    victim_uid: u32,
    group_claimable: bool,
) -> io::Result<()> {
    if uid == 0 {
        return Ok(());
    }
    let wx = |shift: u32| (dir.st_mode >> shift) & 0o3 == 0o3;
    let allowed = if uid == dir.st_uid {
        wx(6)
    } else if gid == dir.st_gid {
        wx(3)
    } else {
        wx(0) || (group_claimable && wx(3))
    };
    if !allowed {
        return Err(io::Error::from_raw_os_error(libc::EACCES));
    }
    if dir.st_mode & libc::S_ISVTX != 0 && uid != victim_uid && uid != dir.st_uid {
        return Err(io::Error::from_raw_os_error(libc::EPERM));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::may_remove;

    fn dir(mode: u32, uid: u32, gid: u32) -> libc::stat64 {
        let mut st = crate::sys::abi::zeroed_stat();
        st.st_mode = libc::S_IFDIR | mode;
        st.st_uid = uid;
        st.st_gid = gid;
        st
    }

    fn errno(r: std::io::Result<()>) -> i32 {
        r.err().and_then(|e| e.raw_os_error()).unwrap_or(0)
    }

    #[test]
    fn owner_group_and_other_bits_decide_in_the_kernels_order() {
        // Owner bits for the owner, even when "other" would allow.
        assert_eq!(
            errno(may_remove(5, 5, &dir(0o577, 5, 9), 5, true)),
            libc::EACCES
        );
        // Group bits for a member by gid.
        assert_eq!(errno(may_remove(6, 9, &dir(0o730, 5, 9), 6, false)), 0);
        assert_eq!(
            errno(may_remove(6, 9, &dir(0o757, 5, 9), 6, false)),
            libc::EACCES
        );
        // Others: "other" bits, or the group's when the caller could claim the group.
        assert_eq!(errno(may_remove(7, 7, &dir(0o707, 5, 9), 7, false)), 0);
        assert_eq!(
            errno(may_remove(7, 7, &dir(0o770, 5, 9), 7, false)),
            libc::EACCES
        );
        assert_eq!(errno(may_remove(7, 7, &dir(0o770, 5, 9), 7, true)), 0);
        // Root may always.
        assert_eq!(errno(may_remove(0, 0, &dir(0o000, 5, 9), 5, false)), 0);
    }

    #[test]
    fn a_sticky_directory_keeps_other_users_entries() {
        let tmp = dir(0o1777, 0, 0);
        assert_eq!(errno(may_remove(7, 7, &tmp, 8, false)), libc::EPERM);
        assert_eq!(errno(may_remove(7, 7, &tmp, 7, false)), 0);
        // The directory's owner may remove anyone's entry there.
        assert_eq!(errno(may_remove(3, 3, &dir(0o1777, 3, 3), 8, false)), 0);
    }
}
