//! The daemon (root) acts as the guest caller: requests that create, remove, rename, open,
//! truncate or change attributes and xattrs are checked by the host as that caller, with none
//! of the daemon's supplementary groups (CVE-2022-0358), and an id map that squashes guest
//! root leaves it no more than nobody. The requests are sent to the filesystem layer as the
//! dispatcher sends them, including ones an honest guest kernel would have refused itself
//! (the guest kernel is untrusted). One test changes the supplementary groups of its process,
//! which would disturb other tests: it runs in a process of its own.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use fuse_backend_rs::abi::fuse_abi::SetattrValid;
use fuse_backend_rs::api::filesystem::Context;
use testkit::alone;
use testkit::calls::Calls;
use testkit::errno::errno_of;
use testkit::fsharness::*;
use union_virtiofsd::fs::idmap::{IdMap, Kind};
use union_virtiofsd::fs::Ids;

fn user(uid: u32, gid: u32) -> Context {
    Context { uid, gid, pid: 1 }
}

fn make(path: &Path, dir: bool, owner: (u32, u32), mode: u32) {
    if dir {
        fs::create_dir(path).unwrap();
    } else {
        fs::write(path, b"host").unwrap();
    }
    std::os::unix::fs::chown(path, Some(owner.0), Some(owner.1)).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// Host ids translated by one rule each for uids and gids.
fn ids(uid: (Kind, u32, u32, u32), gid: (Kind, u32, u32, u32)) -> Ids {
    Ids {
        uid: IdMap::new(&[uid]).unwrap(),
        gid: IdMap::new(&[gid]).unwrap(),
    }
}

/// Opens `inode` for writing as `who`, writes `data` at offset 0 and closes it.
fn write_as(fs: &union_virtiofsd::fs::UnionFs, who: &Context, inode: u64, data: &[u8]) {
    let fh = fs
        .open(who, inode, libc::O_WRONLY as u32, 0)
        .unwrap()
        .0
        .unwrap();
    let mut r = SliceReader(data.to_vec(), 0);
    let n = fs
        .write(
            who,
            inode,
            fh,
            &mut r,
            data.len() as u32,
            0,
            None,
            false,
            0,
            0,
        )
        .unwrap();
    assert_eq!(n, data.len());
    fs.release(who, inode, 0, fh, false, false, None).unwrap();
}

/// SETATTR of `valid` on `inode` as `who`, the attributes changed by `change`: 0 or the errno.
fn set_attr(
    fs: &union_virtiofsd::fs::UnionFs,
    who: &Context,
    inode: u64,
    valid: SetattrValid,
    change: impl FnOnce(&mut libc::stat64),
) -> i32 {
    let mut attr = fs.getattr(&ctx(), inode, None).unwrap().0;
    change(&mut attr);
    match fs.setattr(who, inode, attr, None, valid) {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap(),
    }
}

fn set_mode(fs: &union_virtiofsd::fs::UnionFs, who: &Context, inode: u64, mode: u32) -> i32 {
    set_attr(fs, who, inode, SetattrValid::MODE, |a| {
        a.st_mode = (a.st_mode & libc::S_IFMT) | mode
    })
}

fn set_size(fs: &union_virtiofsd::fs::UnionFs, who: &Context, inode: u64, size: i64) -> i32 {
    set_attr(fs, who, inode, SetattrValid::SIZE, |a| a.st_size = size)
}

fn set_group(fs: &union_virtiofsd::fs::UnionFs, who: &Context, inode: u64, gid: u32) -> i32 {
    set_attr(fs, who, inode, SetattrValid::GID, |a| a.st_gid = gid)
}

fn set_times(fs: &union_virtiofsd::fs::UnionFs, who: &Context, inode: u64) -> i32 {
    set_attr(fs, who, inode, SetattrValid::MTIME, |a| {
        a.st_mtime = 1_000_000
    })
}

/// Every change a request can make to `file` (in `dir`), made as `who`, is refused, and the
/// host file is as it was.
fn assert_untouched(fs: &union_virtiofsd::fs::UnionFs, who: &Context, host: &Path, what: &str) {
    let dir = walk(fs, "d").unwrap();
    let f = walk(fs, "d/f").unwrap();
    let before = fs::metadata(host.join("d/f")).unwrap();
    assert_eq!(
        errno_of(fs.unlink(who, dir.inode, &c("f"))),
        libc::EACCES,
        "{what}: unlink"
    );
    assert_eq!(
        errno_of(fs.rename(who, dir.inode, &c("f"), dir.inode, &c("g"), 0)),
        libc::EACCES,
        "{what}: rename"
    );
    assert_eq!(
        errno_of(fs.mkdir(who, dir.inode, &c("new"), 0o755, 0)),
        libc::EACCES,
        "{what}: mkdir"
    );
    let trunc = (libc::O_WRONLY | libc::O_TRUNC) as u32;
    assert_eq!(
        errno_of(fs.open(who, f.inode, trunc, 0)),
        libc::EACCES,
        "{what}: open O_TRUNC"
    );
    assert_eq!(
        errno_of(fs.setxattr(who, f.inode, &c("user.x"), b"guest", 0)),
        libc::EACCES,
        "{what}: setxattr"
    );
    assert_eq!(
        errno_of(fs.removexattr(who, f.inode, &c("user.keep"))),
        libc::EACCES,
        "{what}: removexattr"
    );
    assert_eq!(
        set_mode(fs, who, f.inode, 0o4777),
        libc::EPERM,
        "{what}: chmod"
    );
    assert_eq!(
        set_size(fs, who, f.inode, 0),
        libc::EACCES,
        "{what}: truncate"
    );
    assert_eq!(set_times(fs, who, f.inode), libc::EPERM, "{what}: utimes");
    assert_eq!(
        errno_of(fs.access(who, f.inode, libc::W_OK as u32)),
        libc::EACCES,
        "{what}: access W_OK"
    );
    // The host file is exactly as it was.
    let after = fs::metadata(host.join("d/f")).unwrap();
    assert_eq!(fs::read(host.join("d/f")).unwrap(), b"host", "{what}");
    assert_eq!(
        (after.mode(), after.uid(), after.size(), after.mtime()),
        (before.mode(), before.uid(), before.size(), before.mtime()),
        "{what}"
    );
    assert!(!host.join("d/g").exists() && !host.join("d/new").exists());
    assert_eq!(
        xattr_of(&host.join("d/f"), "user.keep").as_deref(),
        Some(&b"1"[..]),
        "{what}"
    );
    assert_eq!(xattr_of(&host.join("d/f"), "user.x"), None, "{what}");
}

fn xattr_of(p: &Path, name: &str) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 64];
    match rustix::fs::getxattr(p, name, &mut buf) {
        Ok(n) => Some(buf[..n].to_vec()),
        Err(_) => None,
    }
}

/// `d` (root, 0755) holding `f` (root, 0644, "host", with `user.keep`).
fn root_tree() -> tempfile::TempDir {
    let branch = tempfile::tempdir().unwrap();
    fs::set_permissions(branch.path(), fs::Permissions::from_mode(0o755)).unwrap();
    make(&branch.path().join("d"), true, (0, 0), 0o755);
    make(&branch.path().join("d/f"), false, (0, 0), 0o644);
    rustix::fs::setxattr(
        branch.path().join("d/f"),
        "user.keep",
        b"1",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    branch
}

#[test]
fn a_guest_user_cannot_change_what_the_host_does_not_let_it() {
    let branch = root_tree();
    let fs = union_with(&[(branch.path(), "RW")], "minfreespace=0");
    assert_untouched(&fs, &user(1000, 1000), branch.path(), "uid 1000");
    // The daemon keeps serving, and root in the guest (root on the host) still can.
    let d = walk(&fs, "d").unwrap();
    fs.rename(&ctx(), d.inode, &c("f"), d.inode, &c("g"), 0)
        .unwrap();
    assert!(branch.path().join("d/g").exists());
}

#[test]
fn a_sticky_directory_keeps_other_users_files() {
    let branch = tempfile::tempdir().unwrap();
    make(&branch.path().join("t"), true, (0, 0), 0o1777);
    make(&branch.path().join("t/theirs"), false, (2000, 2000), 0o666);
    let fs = union_with(&[(branch.path(), "RW")], "minfreespace=0");
    let t = walk(&fs, "t").unwrap();
    let me = user(1000, 1000);
    assert_eq!(errno_of(fs.unlink(&me, t.inode, &c("theirs"))), libc::EPERM);
    assert_eq!(
        errno_of(fs.rename(&me, t.inode, &c("theirs"), t.inode, &c("mine"), 0)),
        libc::EPERM
    );
    assert!(branch.path().join("t/theirs").exists());
    // Its own file there it may remove.
    create_file_as(&fs, &me, t.inode, "own");
    fs.unlink(&me, t.inode, &c("own")).unwrap();
    assert!(!branch.path().join("t/own").exists());
}

fn create_file_as(fs: &union_virtiofsd::fs::UnionFs, who: &Context, parent: u64, name: &str) {
    fs.mknod(who, parent, &c(name), libc::S_IFREG | 0o644, 0, 0)
        .unwrap();
}

#[test]
fn guest_root_squashed_by_the_id_map_acts_as_nobody() {
    let branch = root_tree();
    make(&branch.path().join("open"), true, (0, 0), 0o777);
    let squash = ids(
        (Kind::SquashGuest, 0, 65534, 1),
        (Kind::SquashGuest, 0, 65534, 1),
    );
    let fs = union_with_ids(&[(branch.path(), "RW")], "minfreespace=0", squash);
    assert_untouched(&fs, &ctx(), branch.path(), "squashed guest root");
    // What it makes is nobody's.
    let open = walk(&fs, "open").unwrap();
    create_file_as(&fs, &ctx(), open.inode, "made");
    let m = fs::metadata(branch.path().join("open/made")).unwrap();
    assert_eq!((m.uid(), m.gid()), (65534, 65534));
    // Its write to a set-user-ID file clears the bit on the host, as nobody's write does,
    // although the guest (where it is root) names no KILL_PRIV.
    make(
        &branch.path().join("open/suid"),
        false,
        (65534, 65534),
        0o4777,
    );
    let suid = walk(&fs, "open/suid").unwrap();
    write_as(&fs, &ctx(), suid.inode, b"x");
    let m = fs::metadata(branch.path().join("open/suid")).unwrap();
    assert_eq!(
        m.mode() & 0o7777,
        0o777,
        "set-user-ID cleared by a squashed root's write"
    );
}

/// FUSE sends no supplementary groups: a change the guest kernel allowed through one (the
/// caller's gid is 1000, the objects' group 4343) is made, and a directory whose "other" bits
/// allow more than its group bits still lets a non-member in.
#[test]
fn a_group_the_guest_kernel_checked_still_grants() {
    let branch = tempfile::tempdir().unwrap();
    let g = branch.path().join("g");
    make(&g, true, (0, 4343), 0o770);
    make(&g.join("f1"), false, (0, 4343), 0o660);
    make(&g.join("f2"), false, (0, 4343), 0o660);
    make(&branch.path().join("o"), true, (0, 4344), 0o707);
    let fs = union_with(&[(branch.path(), "RW")], "minfreespace=0");
    let me = user(1000, 1000);
    let gd = walk(&fs, "g").unwrap();
    let f1 = walk(&fs, "g/f1").unwrap();
    let fh = fs
        .open(&me, f1.inode, (libc::O_WRONLY | libc::O_TRUNC) as u32, 0)
        .unwrap()
        .0
        .unwrap();
    fs.release(&me, f1.inode, 0, fh, false, false, None)
        .unwrap();
    assert_eq!(fs::metadata(g.join("f1")).unwrap().len(), 0);
    fs.setxattr(&me, f1.inode, &c("user.a"), b"v", 0).unwrap();
    fs.unlink(&me, gd.inode, &c("f2")).unwrap();
    assert!(!g.join("f2").exists());
    fs.mkdir(&me, gd.inode, &c("sub"), 0o755, 0).unwrap();
    assert_eq!(fs::metadata(g.join("sub")).unwrap().uid(), 1000);
    // Its own file it may give to the group, and keep set-group-ID on it there.
    create_file_as(&fs, &me, gd.inode, "mine");
    let mine = walk(&fs, "g/mine").unwrap();
    assert_eq!(set_group(&fs, &me, mine.inode, 4343), 0);
    assert_eq!(set_mode(&fs, &me, mine.inode, 0o2755), 0);
    let m = fs::metadata(g.join("mine")).unwrap();
    assert_eq!((m.gid(), m.mode() & 0o7777), (4343, 0o2755));
    // "Other" may write in o: the first try, without the group, is the one that succeeds.
    let o = walk(&fs, "o").unwrap();
    create_file_as(&fs, &me, o.inode, "in-o");
    assert!(branch.path().join("o/in-o").exists());
    // Set-group-ID stays off for a group the caller is not given (chmod by an owner outside
    // the file's group, as the kernel does it).
    let own = walk(&fs, "o/in-o").unwrap();
    assert_eq!(set_group(&fs, &me, own.inode, 4344), 0);
    let forbidden = ids((Kind::Guest, 0, 0, 1), (Kind::ForbidGuest, 4344, 0, 1));
    let fs2 = union_with_ids(&[(branch.path(), "RW")], "minfreespace=0", forbidden);
    let own = walk(&fs2, "o/in-o").unwrap();
    assert_eq!(set_mode(&fs2, &me, own.inode, 0o2644), 0);
    assert_eq!(
        fs::metadata(branch.path().join("o/in-o")).unwrap().mode() & 0o7777,
        0o644
    );
}

#[test]
fn a_guest_user_does_not_act_with_the_daemons_supplementary_groups() {
    // setgroups(3) changes the groups of every thread of the process, and nothing restores them.
    alone::in_own_process(|| {
        let branch = tempfile::tempdir().unwrap();
        let g = branch.path().join("g");
        make(&g, true, (0, 4242), 0o2770);
        fs::set_permissions(branch.path(), fs::Permissions::from_mode(0o755)).unwrap();
        // The daemon (this process, root) is in group 4242; the guest user 1000 is not, and the
        // id map forbids guest gid 4242, so no guest caller can claim it.
        let groups = [4242 as libc::gid_t];
        // SAFETY: one valid gid array, alive for the call.
        let r = unsafe { libc::setgroups(1, groups.as_ptr()) };
        assert_eq!(r, 0, "needs root");
        let forbid = ids((Kind::Guest, 0, 0, 1), (Kind::ForbidGuest, 4242, 0, 1));
        let fs = union_with_ids(&[(branch.path(), "RW")], "minfreespace=0", forbid);
        let gdir = walk(&fs, "g").unwrap();
        assert_eq!(
            errno_of(fs.mkdir(&user(1000, 1000), gdir.inode, &c("sub"), 0o755, 0)),
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
    });
}

/// Copy-on-write: what the daemon does on its own (whiteouts, copy-up) waits for the caller's
/// permission, and a refused create over a whiteout leaves the deleted base entry hidden.
#[test]
fn copy_on_write_changes_wait_for_the_callers_permission() {
    let upper = tempfile::tempdir().unwrap();
    let base = tempfile::tempdir().unwrap();
    for t in [upper.path(), base.path()] {
        fs::set_permissions(t, fs::Permissions::from_mode(0o755)).unwrap();
    }
    make(&base.path().join("d"), true, (0, 0), 0o755);
    make(&base.path().join("d/f"), false, (0, 0), 0o644);
    make(&base.path().join("d/g"), false, (0, 0), 0o644);
    make(&base.path().join("t"), true, (0, 0), 0o1777);
    make(&base.path().join("t/theirs"), false, (4000, 4000), 0o666);
    let fs = union_with(
        &[(upper.path(), "RW"), (base.path(), "RO")],
        "cow=true,minfreespace=0",
    );
    let me = user(1000, 1000);
    let d = walk(&fs, "d").unwrap();
    let t = walk(&fs, "t").unwrap();
    assert_eq!(errno_of(fs.unlink(&me, d.inode, &c("f"))), libc::EACCES);
    assert_eq!(
        errno_of(fs.rename(&me, d.inode, &c("f"), d.inode, &c("h"), 0)),
        libc::EACCES
    );
    assert_eq!(errno_of(fs.unlink(&me, t.inode, &c("theirs"))), libc::EPERM);
    // Nothing reached the upper layer, and everything still shows.
    assert!(!upper.path().join("d/f").exists() && !upper.path().join("t/theirs").exists());
    assert!(walk(&fs, "d/f").is_ok() && walk(&fs, "t/theirs").is_ok());
    // Root deletes d/g (a whiteout); the user's create there is refused and g stays deleted.
    fs.unlink(&ctx(), d.inode, &c("g")).unwrap();
    assert_eq!(
        errno_of(fs.mknod(&me, d.inode, &c("g"), libc::S_IFREG | 0o644, 0, 0)),
        libc::EACCES
    );
    assert_eq!(errno_of(walk(&fs, "d/g")), libc::ENOENT);
    let wh = fs::symlink_metadata(upper.path().join("d/g")).unwrap();
    assert_eq!((wh.mode() & libc::S_IFMT, wh.rdev()), (libc::S_IFCHR, 0));
}

/// File capabilities (`security.capability`) go as the kernel removes them: on a write, a
/// truncate and a chown by the guest caller.
#[test]
fn file_capabilities_are_cleared_by_write_truncate_and_chown() {
    let branch = tempfile::tempdir().unwrap();
    let p = branch.path().join("tool");
    make(&p, false, (1000, 1000), 0o755);
    // VFS_CAP_REVISION_2, permitted = CAP_NET_RAW (13): four little-endian u32 after magic.
    let mut cap = 0x0200_0000u32.to_le_bytes().to_vec();
    for w in [1u32 << 13, 0, 0, 0] {
        cap.extend_from_slice(&w.to_le_bytes());
    }
    let set_cap = || {
        rustix::fs::setxattr(
            &p,
            "security.capability",
            &cap,
            rustix::fs::XattrFlags::empty(),
        )
        .unwrap();
        assert!(xattr_of(&p, "security.capability").is_some());
    };
    let fs = union_with(&[(branch.path(), "RW")], "minfreespace=0");
    let me = user(1000, 1000);
    let tool = walk(&fs, "tool").unwrap();

    set_cap();
    write_as(&fs, &me, tool.inode, b"x");
    assert_eq!(xattr_of(&p, "security.capability"), None, "after a write");

    set_cap();
    assert_eq!(set_size(&fs, &me, tool.inode, 0), 0);
    assert_eq!(
        xattr_of(&p, "security.capability"),
        None,
        "after a truncate"
    );

    set_cap();
    assert_eq!(set_group(&fs, &me, tool.inode, 1000), 0);
    assert_eq!(xattr_of(&p, "security.capability"), None, "after a chown");
}
