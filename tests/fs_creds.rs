//! The daemon's own supplementary groups never reach a guest caller (CVE-2022-0358). Its own
//! test binary: it changes the process's supplementary groups, which would disturb other tests.

#[path = "support/fsharness.rs"]
mod fsharness;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use fsharness::*;
use fuse_backend_rs::api::filesystem::{Context, FileSystem};

#[test]
fn a_guest_user_does_not_act_with_the_daemons_supplementary_groups() {
    let branch = tempfile::tempdir().unwrap();
    let g = branch.path().join("g");
    fs::create_dir(&g).unwrap();
    std::os::unix::fs::chown(&g, Some(0), Some(4242)).unwrap();
    fs::set_permissions(&g, fs::Permissions::from_mode(0o2770)).unwrap();
    fs::set_permissions(branch.path(), fs::Permissions::from_mode(0o755)).unwrap();
    // The daemon (this process, root) is in group 4242; the guest user 1000 is not.
    let groups = [4242 as libc::gid_t];
    // SAFETY: one valid gid array, alive for the call.
    let r = unsafe { libc::setgroups(1, groups.as_ptr()) };
    assert_eq!(r, 0, "needs root");
    let fs = union_with(&[(branch.path(), "RW")], "minfreespace=0");
    let user = Context {
        uid: 1000,
        gid: 1000,
        pid: 1,
    };
    let gdir = walk(&fs, "g").unwrap();
    assert_eq!(
        errno_of(fs.mkdir(&user, gdir.inode, &c("sub"), 0o755, 0)),
        libc::EACCES,
        "a guest user must not create in a directory only the daemon's group may write"
    );
    assert!(!g.join("sub").exists());
    // Root in the guest still can, and the set-group-ID directory's group is inherited.
    let e = fs
        .mkdir(&ctx(), gdir.inode, &c("rootsub"), 0o755, 0)
        .unwrap();
    assert_eq!(fs::metadata(g.join("rootsub")).unwrap().gid(), 4242);
    assert_ne!(e.inode, 0);
}
