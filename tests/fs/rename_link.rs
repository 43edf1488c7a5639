//! rename and link across branches as mergerfs does them, on real directories: preserve-path
//! versus create-path policies, stale destination cleanup, and the EXDEV fallback modes.

use std::fs;
use std::path::Path;

use tempfile::TempDir;
use testkit::calls::Calls;
use testkit::errno::errno_of;
use testkit::fsharness::*;
use union_virtiofsd::fs::ROOT_ID;

/// Branches a (RW), b (RW), c (RO): `src` on a and b, `dir/` only on b, `dst` on a and c.
fn setup() -> [TempDir; 3] {
    let t = [(); 3].map(|_| tempfile::tempdir().unwrap());
    fs::write(t[0].path().join("src"), "a").unwrap();
    fs::write(t[1].path().join("src"), "b").unwrap();
    fs::create_dir(t[1].path().join("dir")).unwrap();
    fs::write(t[0].path().join("dst"), "old-a").unwrap();
    fs::write(t[2].path().join("dst"), "old-c").unwrap();
    t
}

fn br(t: &[TempDir; 3]) -> [(&Path, &'static str); 3] {
    [
        (t[0].path(), "RW"),
        (t[1].path(), "RW"),
        (t[2].path(), "RO"),
    ]
}

fn has(t: &TempDir, p: &str) -> bool {
    t.path().join(p).symlink_metadata().is_ok()
}

#[test]
fn preserve_path_rename_cleans_up_but_never_touches_ro() {
    let t = setup();
    let fs = union_with(&br(&t), "category.create=epmfs");
    fs.rename(&ctx(), ROOT_ID, &c("src"), ROOT_ID, &c("dst"), 0)
        .unwrap();
    assert_eq!(fs::read(t[0].path().join("dst")).unwrap(), b"a");
    assert_eq!(fs::read(t[1].path().join("dst")).unwrap(), b"b");
    assert!(!has(&t[0], "src") && !has(&t[1], "src"));
    assert_eq!(
        fs::read(t[2].path().join("dst")).unwrap(),
        b"old-c",
        "RO branch untouched"
    );

    // Into a directory only b has: a's copy cannot follow, so mergerfs removes it there.
    let t = setup();
    let fs = union_with(&br(&t), "category.create=epmfs");
    let dir = walk(&fs, "dir").unwrap();
    fs.rename(&ctx(), ROOT_ID, &c("src"), dir.inode, &c("moved"), 0)
        .unwrap();
    assert_eq!(fs::read(t[1].path().join("dir/moved")).unwrap(), b"b");
    assert!(
        !has(&t[0], "src"),
        "the copy that could not move is removed"
    );
    assert!(
        !has(&t[0], "dir"),
        "path-preserving: no directory is created"
    );
}

#[test]
fn create_path_rename_clones_the_destination_directory() {
    let t = setup();
    let fs = union_with(&br(&t), "category.create=mfs");
    let dir = walk(&fs, "dir").unwrap();
    fs.rename(&ctx(), ROOT_ID, &c("src"), dir.inode, &c("moved"), 0)
        .unwrap();
    assert_eq!(fs::read(t[0].path().join("dir/moved")).unwrap(), b"a");
    assert_eq!(fs::read(t[1].path().join("dir/moved")).unwrap(), b"b");
    assert!(t[0].path().join("dir").is_dir(), "dir cloned onto a");
}

#[test]
fn rename_exdev_modes() {
    // Only the RO branch holds the destination directory: nowhere to rename to.
    let mk = || {
        let t = setup();
        fs::create_dir(t[2].path().join("rodir")).unwrap();
        fs::create_dir(t[0].path().join("sub")).unwrap();
        fs::write(t[0].path().join("sub/f"), "data").unwrap();
        t
    };
    let t = mk();
    let fs = union_with(&br(&t), "category.create=epmfs");
    let rodir = walk(&fs, "rodir").unwrap();
    let sub = walk(&fs, "sub").unwrap();
    assert_eq!(
        errno_of(fs.rename(&ctx(), sub.inode, &c("f"), rodir.inode, &c("f"), 0)),
        libc::EXDEV
    );
    assert!(has(&t[0], "sub/f"), "passthrough changes nothing");

    // rel-symlink: the source is parked and a relative link takes the destination name.
    let t = mk();
    fs::create_dir(t[1].path().join("x")).unwrap();
    fs::create_dir(t[1].path().join("x/y")).unwrap();
    let fs = union_with(&br(&t), "category.create=epmfs,rename-exdev=rel-symlink");
    let sub = walk(&fs, "sub").unwrap();
    let y = walk(&fs, "x/y").unwrap();
    fs.rename(&ctx(), sub.inode, &c("f"), y.inode, &c("g"), 0)
        .unwrap();
    let parked = t[0].path().join(".mergerfs_rename_exdev/sub/f");
    assert_eq!(fs::read(&parked).unwrap(), b"data");
    let link = t[1].path().join("x/y/g");
    assert_eq!(
        fs::read_link(&link).unwrap(),
        Path::new("../../.mergerfs_rename_exdev/sub/f")
    );
    // The link resolves inside the union to the parked file.
    let g = walk(&fs, "x/y/g").unwrap();
    assert_eq!(
        fs.readlink(&ctx(), g.inode).unwrap(),
        b"../../.mergerfs_rename_exdev/sub/f"
    );
    assert_eq!(
        read_file(
            &fs,
            walk(&fs, ".mergerfs_rename_exdev/sub/f").unwrap().inode
        )
        .unwrap(),
        b"data"
    );

    // abs-symlink points under the guest's mount point. The destination directory must exist
    // on some RW branch for the symlink itself to be made (on b here; the source is on a).
    let t = mk();
    fs::create_dir(t[1].path().join("rodir")).unwrap();
    let fs = union_with(
        &br(&t),
        "category.create=epmfs,rename-exdev=abs-symlink,mountpoint=/pool",
    );
    let sub = walk(&fs, "sub").unwrap();
    fs.rename(&ctx(), sub.inode, &c("f"), ROOT_ID, &c("top"), 0)
        .unwrap_or_else(|e| {
            // Same-branch rename to the root succeeds without any fallback.
            panic!("{e}")
        });
    assert!(has(&t[0], "top") && !has(&t[0], "sub/f"));
    let rodir = walk(&fs, "rodir").unwrap();
    fs.rename(&ctx(), ROOT_ID, &c("top"), rodir.inode, &c("z"), 0)
        .unwrap();
    let link = fs::read_link(t[0].path().join("rodir/z")).unwrap_or_else(|_| {
        fs::read_link(t[1].path().join("rodir/z")).expect("symlink made on a RW branch")
    });
    assert_eq!(link, Path::new("/pool/.mergerfs_rename_exdev/top"));
}

#[test]
fn link_paths_and_exdev_modes() {
    let t = setup();
    // Path-preserving: the new parent only on b, source only on a -> EXDEV.
    fs::write(t[0].path().join("only_a"), "x").unwrap();
    let fs = union_with(&br(&t), "category.create=epmfs");
    let src = walk(&fs, "only_a").unwrap();
    let dir = walk(&fs, "dir").unwrap();
    assert_eq!(
        errno_of(fs.link(&ctx(), src.inode, dir.inode, &c("l"))),
        libc::EXDEV
    );
    // Create-path: dir is cloned onto a and the link made there.
    let fs = union_with(&br(&t), "category.create=mfs");
    let src = walk(&fs, "only_a").unwrap();
    let dir = walk(&fs, "dir").unwrap();
    let e = fs.link(&ctx(), src.inode, dir.inode, &c("l")).unwrap();
    assert_eq!(e.attr.st_nlink, 2);
    assert!(t[0].path().join("dir/l").is_file());

    for (mode, want) in [
        ("rel-symlink", "../only_a".to_string()),
        ("abs-pool-symlink", "/guest/only_a".to_string()),
        (
            "abs-base-symlink",
            format!("{}/only_a", t[0].path().display()),
        ),
    ] {
        let t2 = setup();
        fs::write(t2[0].path().join("only_a"), "x").unwrap();
        fs::create_dir(t2[2].path().join("rodir")).unwrap();
        fs::create_dir(t2[1].path().join("rodir")).unwrap();
        let opts = format!("category.create=epmfs,link-exdev={mode},mountpoint=/guest");
        let fs = union_with(&br(&t2), &opts);
        let src = walk(&fs, "only_a").unwrap();
        let dir = walk(&fs, "dir").unwrap();
        let e = fs.link(&ctx(), src.inode, dir.inode, &c("l")).unwrap();
        assert_eq!(
            e.attr.st_mode & libc::S_IFMT,
            libc::S_IFREG,
            "{mode}: source's attributes"
        );
        assert_eq!(e.entry_timeout.as_nanos(), 0, "{mode}: not cached");
        let link = fs::read_link(t2[1].path().join("dir/l")).unwrap();
        let want = want.replace(
            &t[0].path().display().to_string(),
            &t2[0].path().display().to_string(),
        );
        assert_eq!(link, Path::new(&want), "{mode}");
    }
}

/// A directory renamed away and back keeps one node whose name follows it (pjdfstest
/// rename::write_access_required_subdir).
#[test]
fn a_directory_renamed_away_and_back() {
    let a = tempfile::tempdir().unwrap();
    let fs = union(&[(a.path(), "RW")]);
    let user = fuse_backend_rs::api::filesystem::Context {
        uid: 65534,
        gid: 65534,
        pid: 1,
    };
    let dir = fs.mkdir(&ctx(), ROOT_ID, &c("dir"), 0o777, 0).unwrap();
    let sub = fs.mkdir(&ctx(), dir.inode, &c("subdir"), 0o700, 0).unwrap();
    fs.rename(&user, dir.inode, &c("subdir"), dir.inode, &c("another"), 0)
        .unwrap();
    let again = fs.lookup(&ctx(), dir.inode, &c("another")).unwrap();
    assert_eq!(again.inode, sub.inode);
    fs.rename(&user, dir.inode, &c("another"), dir.inode, &c("subdir"), 0)
        .unwrap();
    assert!(a.path().join("dir/subdir").is_dir());
}

/// A rename that succeeds on one branch and fails on another (here: the caller may not write
/// the second branch's directory) leaves neither name bound to a node that no longer sits
/// there: a change through the node the guest held reaches that node's own file, never the
/// other branch's file now found at its old name.
#[test]
fn a_partial_rename_leaves_the_table_telling_the_truth() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    fs::set_permissions(a.path(), fs::Permissions::from_mode(0o777)).unwrap();
    fs::set_permissions(b.path(), fs::Permissions::from_mode(0o755)).unwrap();
    for (dir, data) in [(a.path(), "A"), (b.path(), "B")] {
        fs::write(dir.join("f"), data).unwrap();
        std::os::unix::fs::chown(dir.join("f"), Some(1000), Some(1000)).unwrap();
        fs::set_permissions(dir.join("f"), fs::Permissions::from_mode(0o644)).unwrap();
    }
    let fs = union_with(
        &[(a.path(), "RW"), (b.path(), "RW")],
        "category.create=ff,minfreespace=0",
    );
    let held = fs.lookup(&ctx(), ROOT_ID, &c("f")).unwrap();
    let user = fuse_backend_rs::api::filesystem::Context {
        uid: 1000,
        gid: 1000,
        pid: 1,
    };
    assert_eq!(
        errno_of(fs.rename(&user, ROOT_ID, &c("f"), ROOT_ID, &c("g"), 0)),
        libc::EACCES
    );
    assert!(a.path().join("g").exists() && b.path().join("f").exists());
    chmod_as(&fs, &ctx(), &held, 0o600).unwrap();
    let mode = |p: &std::path::Path| fs::metadata(p).unwrap().mode() & 0o777;
    assert_eq!(mode(&a.path().join("g")), 0o600, "the held node's own file");
    assert_eq!(
        mode(&b.path().join("f")),
        0o644,
        "not the file now at its old name"
    );
    // Looked up afresh, each name shows what is there.
    let f = fs.lookup(&ctx(), ROOT_ID, &c("f")).unwrap();
    assert_eq!(read_file(&fs, f.inode).unwrap(), b"B");
}
