//! The union filesystem driven through the `FileSystem` trait over real directories (one RW
//! branch, one RO branch): what lands where, which errno comes back, and that nothing outside a
//! branch root is ever reached.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

use fuse_backend_rs::abi::fuse_abi::{CreateIn, SetattrValid};
use fuse_backend_rs::api::filesystem::{DirEntry, Entry};
use tempfile::TempDir;
use testkit::calls::Calls;
use testkit::errno::errno_of;
use testkit::fsharness::*;
use testkit::tmpfs::Tmpfs;
use testkit::tree::snapshot;
use union_virtiofsd::fs::{UnionFs, ROOT_ID};

struct Fixture {
    a: TempDir,
    b: TempDir,
    fs: UnionFs,
}

/// a (RW): shared.txt "from a", only_a/; b (RO): shared.txt "from b", only_b/inner.txt,
/// ro_only.txt "ro".
fn fixture() -> Fixture {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    fs::write(a.path().join("shared.txt"), "from a").unwrap();
    fs::create_dir(a.path().join("only_a")).unwrap();
    fs::write(b.path().join("shared.txt"), "from b").unwrap();
    fs::create_dir(b.path().join("only_b")).unwrap();
    fs::write(b.path().join("only_b/inner.txt"), "inner").unwrap();
    fs::write(b.path().join("ro_only.txt"), "ro").unwrap();
    let fs = union(&[(a.path(), "RW"), (b.path(), "RO")]);
    Fixture { a, b, fs }
}

#[test]
fn lookup_takes_first_branch_and_readdir_merges() {
    let f = fixture();
    let shared = walk(&f.fs, "shared.txt").unwrap();
    assert_eq!(read_file(&f.fs, shared.inode).unwrap(), b"from a");
    let inner = walk(&f.fs, "only_b/inner.txt").unwrap();
    assert_eq!(read_file(&f.fs, inner.inode).unwrap(), b"inner");

    let names = list(&f.fs, ROOT_ID);
    let just: Vec<_> = names.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(just[..2], [".", ".."]);
    let mut rest = just[2..].to_vec();
    rest.sort();
    assert_eq!(rest, ["only_a", "only_b", "ro_only.txt", "shared.txt"]);
    // readdir's d_ino matches lookup's st_ino, and numbers are unique across branches.
    let ino_of = |n: &str| names.iter().find(|(x, _)| x == n).unwrap().1;
    assert_eq!(ino_of("shared.txt"), shared.attr.st_ino);
    let ro = walk(&f.fs, "ro_only.txt").unwrap();
    assert_eq!(ino_of("ro_only.txt"), ro.attr.st_ino);
    let mut inos: Vec<_> = names[2..].iter().map(|(_, i)| *i).collect();
    inos.sort();
    inos.dedup();
    assert_eq!(inos.len(), 4);
}

#[test]
fn a_directory_on_both_branches_merges_and_keeps_one_inode() {
    let f = fixture();
    fs::create_dir(f.a.path().join("both")).unwrap();
    fs::create_dir(f.b.path().join("both")).unwrap();
    fs::write(f.a.path().join("both/x"), "ax").unwrap();
    fs::write(f.b.path().join("both/x"), "bx").unwrap();
    fs::write(f.b.path().join("both/y"), "by").unwrap();
    let both = walk(&f.fs, "both").unwrap();
    let names: Vec<_> = list(&f.fs, both.inode)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, [".", "..", "x", "y"]);
    assert_eq!(
        read_file(&f.fs, walk(&f.fs, "both/x").unwrap().inode).unwrap(),
        b"ax"
    );
    assert_eq!(
        read_file(&f.fs, walk(&f.fs, "both/y").unwrap().inode).unwrap(),
        b"by"
    );
    // Renaming the merged directory keeps its number (devino-based numbers by default).
    f.fs.rename(&ctx(), ROOT_ID, &c("both"), ROOT_ID, &c("moved"), 0)
        .unwrap();
    assert_eq!(walk(&f.fs, "moved").unwrap().attr.st_ino, both.attr.st_ino);
}

#[test]
fn new_entries_go_to_the_first_rw_branch_with_the_parent() {
    let f = fixture();
    let before_b = snapshot(f.b.path());
    let e = create_file(&f.fs, ROOT_ID, "new.txt", b"hello").unwrap();
    assert_eq!(fs::read(f.a.path().join("new.txt")).unwrap(), b"hello");
    assert_eq!(read_file(&f.fs, e.inode).unwrap(), b"hello");
    let only_a = walk(&f.fs, "only_a").unwrap();
    f.fs.mkdir(&ctx(), only_a.inode, &c("sub"), 0o755, 0)
        .unwrap();
    assert!(f.a.path().join("only_a/sub").is_dir());
    // The parent exists only on the RO branch: nowhere to create.
    let only_b = walk(&f.fs, "only_b").unwrap();
    assert_eq!(
        errno_of(f.fs.mkdir(&ctx(), only_b.inode, &c("sub"), 0o755, 0)),
        libc::EROFS
    );
    assert_eq!(
        errno_of(create_file(&f.fs, only_b.inode, "n", b"x")),
        libc::EROFS
    );
    // An existing name cannot be created again, whichever branch holds it.
    assert_eq!(
        errno_of(f.fs.mkdir(&ctx(), ROOT_ID, &c("ro_only.txt"), 0o755, 0)),
        libc::EEXIST
    );
    f.fs.symlink(&ctx(), &c("new.txt"), ROOT_ID, &c("ln"))
        .unwrap();
    assert_eq!(
        fs::read_link(f.a.path().join("ln")).unwrap(),
        Path::new("new.txt")
    );
    let ln = walk(&f.fs, "ln").unwrap();
    assert_eq!(f.fs.readlink(&ctx(), ln.inode).unwrap(), b"new.txt");
    assert_eq!(snapshot(f.b.path()), before_b);
}

#[test]
fn ro_branch_is_never_modified() {
    let f = fixture();
    let before_b = snapshot(f.b.path());
    let ro = walk(&f.fs, "ro_only.txt").unwrap();
    assert_eq!(
        errno_of(f.fs.open(&ctx(), ro.inode, libc::O_WRONLY as u32, 0)),
        libc::EROFS
    );
    assert_eq!(
        errno_of(f.fs.open(&ctx(), ro.inode, libc::O_RDWR as u32, 0)),
        libc::EROFS
    );
    assert_eq!(
        errno_of(f.fs.unlink(&ctx(), ROOT_ID, &c("ro_only.txt"))),
        libc::EROFS
    );
    let mut st = ro.attr;
    st.st_mode = 0o600;
    assert_eq!(
        errno_of(f.fs.setattr(&ctx(), ro.inode, st, None, SetattrValid::MODE)),
        libc::EROFS
    );
    st.st_size = 0;
    assert_eq!(
        errno_of(f.fs.setattr(&ctx(), ro.inode, st, None, SetattrValid::SIZE)),
        libc::EROFS
    );
    assert_eq!(
        errno_of(f.fs.setxattr(&ctx(), ro.inode, &c("user.k"), b"v", 0)),
        libc::EROFS
    );
    assert_eq!(
        errno_of(f.fs.rename(&ctx(), ROOT_ID, &c("ro_only.txt"), ROOT_ID, &c("moved"), 0)),
        libc::EROFS
    );
    assert_eq!(
        errno_of(f.fs.access(&ctx(), ro.inode, libc::W_OK as u32)),
        libc::EROFS
    );
    assert_eq!(snapshot(f.b.path()), before_b);
}

#[test]
fn unlink_removes_the_rw_copy_and_reveals_the_ro_one() {
    let f = fixture();
    f.fs.unlink(&ctx(), ROOT_ID, &c("shared.txt")).unwrap();
    assert!(!f.a.path().join("shared.txt").exists());
    let shared = walk(&f.fs, "shared.txt").unwrap();
    assert_eq!(read_file(&f.fs, shared.inode).unwrap(), b"from b");
    assert_eq!(
        errno_of(f.fs.unlink(&ctx(), ROOT_ID, &c("nope"))),
        libc::ENOENT
    );
    f.fs.rmdir(&ctx(), ROOT_ID, &c("only_a")).unwrap();
    assert!(!f.a.path().join("only_a").exists());
}

#[test]
fn rename_variants() {
    let f = fixture();
    create_file(&f.fs, ROOT_ID, "x", b"1").unwrap();
    create_file(&f.fs, ROOT_ID, "y", b"2").unwrap();
    f.fs.rename(&ctx(), ROOT_ID, &c("x"), ROOT_ID, &c("z"), 0)
        .unwrap();
    assert_eq!(fs::read(f.a.path().join("z")).unwrap(), b"1");
    // NOREPLACE sees names on every branch.
    assert_eq!(
        errno_of(f.fs.rename(
            &ctx(),
            ROOT_ID,
            &c("z"),
            ROOT_ID,
            &c("ro_only.txt"),
            libc::RENAME_NOREPLACE
        )),
        libc::EEXIST
    );
    f.fs.rename(
        &ctx(),
        ROOT_ID,
        &c("z"),
        ROOT_ID,
        &c("y"),
        libc::RENAME_EXCHANGE,
    )
    .unwrap();
    assert_eq!(fs::read(f.a.path().join("y")).unwrap(), b"1");
    assert_eq!(fs::read(f.a.path().join("z")).unwrap(), b"2");
    // The destination directory exists only on the RO branch: the move cannot stay on a.
    let only_b = walk(&f.fs, "only_b").unwrap();
    assert_eq!(
        errno_of(f.fs.rename(&ctx(), ROOT_ID, &c("y"), only_b.inode, &c("y"), 0)),
        libc::EXDEV
    );
    // Renaming over a name the RO branch also has: the RW copy wins the lookup afterwards.
    f.fs.rename(&ctx(), ROOT_ID, &c("y"), ROOT_ID, &c("shared.txt"), 0)
        .unwrap();
    let shared = walk(&f.fs, "shared.txt").unwrap();
    assert_eq!(read_file(&f.fs, shared.inode).unwrap(), b"1");
    // A directory moves with its open node: the node's path follows.
    let only_a = walk(&f.fs, "only_a").unwrap();
    create_file(&f.fs, only_a.inode, "deep", b"d").unwrap();
    f.fs.rename(&ctx(), ROOT_ID, &c("only_a"), ROOT_ID, &c("renamed_a"), 0)
        .unwrap();
    let deep = f.fs.lookup(&ctx(), only_a.inode, &c("deep")).unwrap();
    assert_eq!(read_file(&f.fs, deep.inode).unwrap(), b"d");
    assert!(f.a.path().join("renamed_a/deep").is_file());
    for bad in [
        libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE,
        libc::RENAME_WHITEOUT | libc::RENAME_EXCHANGE,
    ] {
        assert_eq!(
            errno_of(f.fs.rename(&ctx(), ROOT_ID, &c("z"), ROOT_ID, &c("q"), bad)),
            libc::EINVAL
        );
    }
    // RENAME_WHITEOUT, as a guest overlayfs with its upper layer on the share sends it: the
    // file moves and its old name becomes an overlayfs whiteout (a 0/0 character device).
    create_file(&f.fs, ROOT_ID, "w", b"w").unwrap();
    f.fs.rename(
        &ctx(),
        ROOT_ID,
        &c("w"),
        ROOT_ID,
        &c("w2"),
        libc::RENAME_WHITEOUT,
    )
    .unwrap();
    let wh = fs::symlink_metadata(f.a.path().join("w")).unwrap();
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    assert!(wh.file_type().is_char_device());
    assert_eq!(wh.rdev(), 0);
    assert_eq!(fs::read(f.a.path().join("w2")).unwrap(), b"w");
}

#[test]
fn link_stays_on_its_branch() {
    let f = fixture();
    let e = create_file(&f.fs, ROOT_ID, "orig", b"data").unwrap();
    let l = f.fs.link(&ctx(), e.inode, ROOT_ID, &c("hard")).unwrap();
    assert_eq!(l.attr.st_ino, e.attr.st_ino);
    assert_eq!(l.attr.st_nlink, 2);
    let ro = walk(&f.fs, "ro_only.txt").unwrap();
    assert_eq!(
        errno_of(f.fs.link(&ctx(), ro.inode, ROOT_ID, &c("h2"))),
        libc::EROFS
    );
    let only_b = walk(&f.fs, "only_b").unwrap();
    assert_eq!(
        errno_of(f.fs.link(&ctx(), e.inode, only_b.inode, &c("h3"))),
        libc::EXDEV
    );
}

#[test]
fn setattr_truncate_chmod_utimens_and_io_ops() {
    let f = fixture();
    let e = create_file(&f.fs, ROOT_ID, "f", b"0123456789").unwrap();
    let mut st = e.attr;
    st.st_size = 4;
    st.st_mode = 0o600;
    st.st_mtime = 1_000_000;
    st.st_mtime_nsec = 5;
    let valid = SetattrValid::SIZE | SetattrValid::MODE | SetattrValid::MTIME;
    let (out, _) = f.fs.setattr(&ctx(), e.inode, st, None, valid).unwrap();
    assert_eq!(out.st_size, 4);
    assert_eq!(out.st_mode & 0o7777, 0o600);
    assert_eq!(out.st_mtime, 1_000_000);
    let meta = fs::metadata(f.a.path().join("f")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
    assert_eq!(meta.len(), 4);

    let (fh, _, _) = f.fs.open(&ctx(), e.inode, libc::O_RDWR as u32, 0).unwrap();
    let fh = fh.unwrap();
    f.fs.fallocate(&ctx(), e.inode, fh, 0, 0, 1 << 16).unwrap();
    assert_eq!(fs::metadata(f.a.path().join("f")).unwrap().len(), 1 << 16);
    let data =
        f.fs.lseek(&ctx(), e.inode, fh, 0, libc::SEEK_DATA as u32)
            .unwrap();
    assert_eq!(data, 0);
    f.fs.fsync(&ctx(), e.inode, true, fh).unwrap();
    f.fs.flush(&ctx(), e.inode, fh, 0).unwrap();
    // A handle is bound to its node: another node's id is refused.
    assert_eq!(errno_of(f.fs.flush(&ctx(), ROOT_ID, fh, 0)), libc::EBADF);
    f.fs.release(&ctx(), e.inode, 0, fh, false, false, None)
        .unwrap();
    assert_eq!(errno_of(f.fs.flush(&ctx(), e.inode, fh, 0)), libc::EBADF);
    assert_eq!(f.fs.handle_count(), 0);
}

#[test]
fn posix_acl_xattrs_are_refused_and_change_nothing() {
    // No FUSE_POSIX_ACL: an ACL set with the daemon's credentials would keep the set-group-ID
    // bit that the kernel clears for a caller outside the file's group.
    use std::os::unix::fs::PermissionsExt;
    let f = fixture();
    let e = create_file(&f.fs, ROOT_ID, "sgid", b"").unwrap();
    let host = f.a.path().join("sgid");
    fs::set_permissions(&host, fs::Permissions::from_mode(0o2775)).unwrap();
    // A minimal ACL (version 2, user::rwx, group::rwx, other::r-x) as the kernel encodes it.
    let mut acl = 2u32.to_le_bytes().to_vec();
    for (tag, perm) in [(0x01u16, 7u16), (0x04, 7), (0x20, 5)] {
        acl.extend_from_slice(&tag.to_le_bytes());
        acl.extend_from_slice(&perm.to_le_bytes());
        acl.extend_from_slice(&u32::MAX.to_le_bytes());
    }
    let mut caller = ctx();
    (caller.uid, caller.gid) = (1000, 1000);
    for name in ["system.posix_acl_access", "system.posix_acl_default"] {
        assert_eq!(
            errno_of(f.fs.setxattr(&caller, e.inode, &c(name), &acl, 0)),
            libc::EOPNOTSUPP
        );
        assert_eq!(
            errno_of(f.fs.removexattr(&caller, e.inode, &c(name))),
            libc::EOPNOTSUPP
        );
    }
    assert_eq!(
        fs::metadata(&host).unwrap().permissions().mode() & 0o7777,
        0o2775
    );
}

#[test]
fn xattrs_pass_through() {
    let f = fixture();
    let e = create_file(&f.fs, ROOT_ID, "x", b"").unwrap();
    f.fs.setxattr(&ctx(), e.inode, &c("user.k"), b"value", 0)
        .unwrap();
    match f.fs.getxattr(&ctx(), e.inode, &c("user.k"), 64).unwrap() {
        fuse_backend_rs::api::filesystem::GetxattrReply::Value(v) => assert_eq!(v, b"value"),
        _ => panic!("expected a value"),
    }
    match f.fs.getxattr(&ctx(), e.inode, &c("user.k"), 0).unwrap() {
        fuse_backend_rs::api::filesystem::GetxattrReply::Count(n) => assert_eq!(n, 5),
        _ => panic!("expected a count"),
    }
    assert_eq!(
        errno_of(f.fs.getxattr(&ctx(), e.inode, &c("user.k"), 2)),
        libc::ERANGE
    );
    match f.fs.listxattr(&ctx(), e.inode, 256).unwrap() {
        fuse_backend_rs::api::filesystem::ListxattrReply::Names(v) => {
            assert!(v.split(|&b| b == 0).any(|n| n == b"user.k"))
        }
        _ => panic!("expected names"),
    }
    f.fs.removexattr(&ctx(), e.inode, &c("user.k")).unwrap();
    assert_eq!(
        errno_of(f.fs.getxattr(&ctx(), e.inode, &c("user.k"), 64)),
        libc::ENODATA
    );
}

#[test]
fn guest_names_and_ids_are_checked() {
    let f = fixture();
    for bad in ["..", ".", "a/b", ""] {
        assert_eq!(
            errno_of(f.fs.lookup(&ctx(), ROOT_ID, &c(bad))),
            libc::EINVAL,
            "{bad:?}"
        );
        assert_eq!(
            errno_of(f.fs.mkdir(&ctx(), ROOT_ID, &c(bad), 0o755, 0)),
            libc::EINVAL
        );
    }
    assert_eq!(errno_of(f.fs.lookup(&ctx(), 987_654, &c("x"))), libc::EBADF);
    assert_eq!(errno_of(f.fs.getattr(&ctx(), 987_654, None)), libc::EBADF);
    assert_eq!(errno_of(f.fs.open(&ctx(), 987_654, 0, 0)), libc::EBADF);
    let (fh, _, _) =
        f.fs.open(&ctx(), walk(&f.fs, "shared.txt").unwrap().inode, 0, 0)
            .unwrap();
    let mut w = VecWriter::default();
    assert_eq!(
        errno_of(f.fs.read(&ctx(), ROOT_ID, 424_242, &mut w, 10, 0, None, 0)),
        libc::EBADF
    );
    assert_eq!(
        errno_of(
            f.fs.readdir(&ctx(), ROOT_ID, fh.unwrap(), 10, 0, &mut |_: DirEntry| Ok(
                1
            ))
        ),
        libc::EBADF
    );
}

#[test]
fn host_symlinks_are_never_followed() {
    let f = fixture();
    symlink("/etc", f.a.path().join("esc")).unwrap();
    symlink("/etc/passwd", f.a.path().join("pw")).unwrap();
    let esc = walk(&f.fs, "esc").unwrap();
    assert_eq!(esc.attr.st_mode & libc::S_IFMT, libc::S_IFLNK);
    // Walking "through" the symlink node never reaches /etc.
    assert!(f.fs.lookup(&ctx(), esc.inode, &c("passwd")).is_err());
    assert!(f.fs.opendir(&ctx(), esc.inode, 0).is_err());
    let pw = walk(&f.fs, "pw").unwrap();
    assert_eq!(errno_of(f.fs.open(&ctx(), pw.inode, 0, 0)), libc::ELOOP);
    let mut st = pw.attr;
    st.st_mode = 0o777;
    assert!(f
        .fs
        .setattr(&ctx(), pw.inode, st, None, SetattrValid::MODE)
        .is_err());
    st.st_size = 0;
    assert!(f
        .fs
        .setattr(&ctx(), pw.inode, st, None, SetattrValid::SIZE)
        .is_err());
    assert!(fs::metadata("/etc/passwd").unwrap().len() > 0);
    // A symlinked directory inside the branch is not traversed either.
    symlink("only_a", f.a.path().join("alias")).unwrap();
    assert!(walk(&f.fs, "alias/anything").is_err());
}

#[test]
fn device_nodes_are_made_as_the_caller_and_never_opened() {
    let f = fixture();
    // A privileged guest user makes device nodes, as virtiofsd allows (image builders need
    // dev/ in the share); the daemon refuses to open them.
    let dev = libc::S_IFCHR | 0o666;
    let null =
        f.fs.mknod(&ctx(), ROOT_ID, &c("null"), dev, 0x0103, 0)
            .unwrap();
    let st = fs::symlink_metadata(f.a.path().join("null")).unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_char_device(
        &st.file_type()
    ));
    assert_eq!(std::os::unix::fs::MetadataExt::rdev(&st), 0x0103);
    assert_eq!(
        errno_of(f.fs.open(&ctx(), null.inode, libc::O_RDWR as u32, 0)),
        libc::EACCES
    );
    let blk = libc::S_IFBLK | 0o666;
    let sda =
        f.fs.mknod(&ctx(), ROOT_ID, &c("sda"), blk, 0x0800, 0)
            .unwrap();
    assert_eq!(
        errno_of(f.fs.open(&ctx(), sda.inode, libc::O_RDONLY as u32, 0)),
        libc::EACCES
    );
    // An unprivileged guest user cannot (the daemon acts with the caller's credentials).
    let user = fuse_backend_rs::api::filesystem::Context {
        uid: 1000,
        gid: 1000,
        pid: 1,
    };
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(f.a.path(), fs::Permissions::from_mode(0o777)).unwrap();
    assert_eq!(
        errno_of(f.fs.mknod(&user, ROOT_ID, &c("null2"), dev, 0x0103, 0)),
        libc::EPERM
    );
    // A FIFO can be made, but opening it would block a worker: refused without blocking.
    let fifo =
        f.fs.mknod(&ctx(), ROOT_ID, &c("fifo"), libc::S_IFIFO | 0o644, 0, 0)
            .unwrap();
    assert_eq!(
        errno_of(f.fs.open(&ctx(), fifo.inode, libc::O_RDONLY as u32, 0)),
        libc::EACCES
    );
    // A device node placed on the host by someone else is not opened either.
    let st = std::process::Command::new("mknod")
        .arg(f.a.path().join("hostnull"))
        .args(["c", "1", "3"])
        .status()
        .unwrap();
    assert!(st.success(), "the tests run as root, as CI does");
    let n = walk(&f.fs, "hostnull").unwrap();
    assert_eq!(
        errno_of(f.fs.open(&ctx(), n.inode, libc::O_RDWR as u32, 0)),
        libc::EACCES
    );
}

#[test]
fn forget_returns_memory_and_readdirplus_counts_references() {
    let f = fixture();
    assert_eq!(f.fs.inode_count(), 1);
    let e1 = walk(&f.fs, "only_b/inner.txt").unwrap();
    let only_b = walk(&f.fs, "only_b").unwrap();
    assert_eq!(f.fs.inode_count(), 3);
    f.fs.forget(&ctx(), e1.inode, 1);
    f.fs.forget(&ctx(), only_b.inode, 2);
    assert_eq!(f.fs.inode_count(), 1);

    let (fh, _) = f.fs.opendir(&ctx(), ROOT_ID, 0).unwrap();
    let fh = fh.unwrap();
    let mut got: Vec<Entry> = Vec::new();
    // Take three entries, then report the buffer full.
    f.fs.readdirplus(
        &ctx(),
        ROOT_ID,
        fh,
        4096,
        0,
        &mut |_d: DirEntry, e: Entry| {
            if got.len() == 3 {
                return Ok(0);
            }
            got.push(e);
            Ok(1)
        },
    )
    .unwrap();
    assert_eq!(got[0].inode, 0);
    assert_eq!(got[1].inode, 0);
    assert_ne!(got[2].inode, 0);
    // Exactly one reference was handed out (the refused entry's was taken back).
    assert_eq!(f.fs.inode_count(), 2);
    f.fs.forget(&ctx(), got[2].inode, 1);
    assert_eq!(f.fs.inode_count(), 1);
    // Batch forget with bogus ids and oversized counts does no harm.
    f.fs.batch_forget(&ctx(), vec![(777, 5), (ROOT_ID, 9), (got[2].inode, 3)]);
    assert_eq!(f.fs.inode_count(), 1);
    f.fs.releasedir(&ctx(), ROOT_ID, 0, fh).unwrap();
}

#[test]
fn create_of_an_existing_name_opens_it_unless_exclusive() {
    let f = fixture();
    let args = |flags: i32| CreateIn {
        flags: flags as u32,
        mode: 0o644,
        umask: 0,
        fuse_flags: 0,
    };
    assert_eq!(
        errno_of(f.fs.create(
            &ctx(),
            ROOT_ID,
            &c("shared.txt"),
            args(libc::O_RDWR | libc::O_EXCL)
        )),
        libc::EEXIST
    );
    let (e, fh, _, _) =
        f.fs.create(&ctx(), ROOT_ID, &c("shared.txt"), args(libc::O_RDONLY))
            .unwrap();
    let mut w = VecWriter::default();
    f.fs.read(&ctx(), e.inode, fh.unwrap(), &mut w, 100, 0, None, 0)
        .unwrap();
    assert_eq!(w.0, b"from a");
}

/// On one branch the daemon does not look for a name before making it: the creation says
/// EEXIST, and open(2) without O_EXCL still opens what exists, before the create policy
/// could refuse (a read-only or full branch).
#[test]
fn on_one_branch_an_existing_name_is_eexist_or_opened() {
    let rw = Tmpfs::new("16M");
    let ro = Tmpfs::new("16M");
    for dir in [rw.path(), ro.path()] {
        fs::write(dir.join("f"), "on the host").unwrap();
    }
    let args = |flags: i32| CreateIn {
        flags: flags as u32,
        mode: 0o644,
        umask: 0,
        fuse_flags: 0,
    };
    let opened = |fs: &UnionFs| {
        let (e, fh, _, _) = fs
            .create(&ctx(), ROOT_ID, &c("f"), args(libc::O_RDONLY))
            .unwrap();
        let mut w = VecWriter::default();
        fs.read(&ctx(), e.inode, fh.unwrap(), &mut w, 100, 0, None, 0)
            .unwrap();
        w.0
    };
    let plain = union_with(&[(rw.path(), "RW")], "minfreespace=1M");
    let full = union_with(&[(rw.path(), "RW")], "minfreespace=1G");
    let read_only = union_with(&[(ro.path(), "RO")], "minfreespace=1M");
    let cases = [
        (&plain, "g1", 0),
        (&full, "g2", libc::ENOSPC),
        (&read_only, "g3", libc::EROFS),
    ];
    for (fs, new, refused) in cases {
        assert_eq!(
            errno_of(fs.create(&ctx(), ROOT_ID, &c("f"), args(libc::O_RDWR | libc::O_EXCL))),
            libc::EEXIST
        );
        assert_eq!(opened(fs), b"on the host");
        let made = fs.create(&ctx(), ROOT_ID, &c(new), args(libc::O_RDWR));
        assert_eq!(
            made.err().and_then(|e| e.raw_os_error()).unwrap_or(0),
            refused
        );
    }
    assert_eq!(
        errno_of(plain.mkdir(&ctx(), ROOT_ID, &c("f"), 0o755, 0)),
        libc::EEXIST
    );
    assert_eq!(
        errno_of(plain.symlink(&ctx(), &c("t"), ROOT_ID, &c("f"))),
        libc::EEXIST
    );
    assert_eq!(
        errno_of(plain.mknod(&ctx(), ROOT_ID, &c("f"), libc::S_IFREG | 0o644, 0, 0)),
        libc::EEXIST
    );
    assert_eq!(fs::read(rw.path().join("f")).unwrap(), b"on the host");
}

#[test]
fn statfs_sums_distinct_filesystems_once() {
    let big = Tmpfs::new("64M");
    let small = Tmpfs::new("32M");
    let fs = union(&[(big.path(), "RW"), (small.path(), "RO"), (big.path(), "RW")]);
    let st = fs.statfs(&ctx(), ROOT_ID).unwrap();
    let total = st.f_blocks * st.f_frsize;
    assert_eq!(
        total,
        96 << 20,
        "64M + 32M, the repeated branch counted once"
    );
    let free_before = st.f_bavail * st.f_frsize;
    fs::write(small.path().join("fill"), vec![1u8; 8 << 20]).unwrap();
    let st = fs.statfs(&ctx(), ROOT_ID).unwrap();
    assert_eq!(free_before - st.f_bavail * st.f_frsize, 8 << 20);
}

#[test]
fn entries_are_created_as_the_guest_caller() {
    use std::os::unix::fs::MetadataExt;
    let f = fixture();
    // tempfile makes the branch root 0700; the caller needs to be allowed to create in it.
    fs::set_permissions(f.a.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let caller = fuse_backend_rs::api::filesystem::Context {
        uid: 1234,
        gid: 5678,
        pid: 1,
    };
    let args = CreateIn {
        flags: libc::O_RDWR as u32,
        mode: 0o644,
        umask: 0,
        fuse_flags: 0,
    };
    let (e, fh, _, _) = f.fs.create(&caller, ROOT_ID, &c("mine"), args).unwrap();
    f.fs.release(&caller, e.inode, 0, fh.unwrap(), false, false, None)
        .unwrap();
    f.fs.mkdir(&caller, ROOT_ID, &c("mydir"), 0o755, 0).unwrap();
    f.fs.symlink(&caller, &c("mine"), ROOT_ID, &c("mylink"))
        .unwrap();
    for name in ["mine", "mydir", "mylink"] {
        let m = fs::symlink_metadata(f.a.path().join(name)).unwrap();
        assert_eq!((m.uid(), m.gid()), (1234, 5678), "{name}");
    }
    // The caller's identity also decides permissions: uid 1234 cannot create in a directory
    // only root may write, even though the daemon runs as root.
    fs::create_dir(f.a.path().join("rootonly")).unwrap();
    fs::set_permissions(
        f.a.path().join("rootonly"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let dir = walk(&f.fs, "rootonly").unwrap();
    assert_eq!(
        errno_of(f.fs.mkdir(&caller, dir.inode, &c("x"), 0o755, 0)),
        libc::EACCES
    );
    f.fs.mkdir(&ctx(), dir.inode, &c("x"), 0o755, 0).unwrap();
}

#[test]
fn destroy_drops_every_node_and_handle() {
    let f = fixture();
    let e = walk(&f.fs, "only_b/inner.txt").unwrap();
    let (fh, _, _) =
        f.fs.open(&ctx(), e.inode, libc::O_RDONLY as u32, 0)
            .unwrap();
    let dir = walk(&f.fs, "only_b").unwrap();
    f.fs.opendir(&ctx(), dir.inode, 0).unwrap();
    assert!(f.fs.inode_count() > 1 && f.fs.handle_count() == 2);
    f.fs.destroy();
    assert_eq!((f.fs.inode_count(), f.fs.handle_count()), (1, 0));
    // What the old session held is gone: its handle and node ids answer EBADF.
    assert_eq!(
        errno_of(f.fs.flush(&ctx(), e.inode, fh.unwrap(), 0)),
        libc::EBADF
    );
    assert_eq!(errno_of(f.fs.getattr(&ctx(), e.inode, None)), libc::EBADF);
    // A new session works.
    let again = walk(&f.fs, "only_b/inner.txt").unwrap();
    assert!(!read_file(&f.fs, again.inode).unwrap().is_empty());
}

/// A front-end that resets the guest without VHOST_USER_RESET_DEVICE (and a guest reset
/// without DESTROY) shows up as a new INIT: the old session ends there.
#[test]
fn a_new_init_ends_the_previous_session() {
    let f = fixture();
    let e = walk(&f.fs, "only_b/inner.txt").unwrap();
    let (fh, _, _) =
        f.fs.open(&ctx(), e.inode, libc::O_RDONLY as u32, 0)
            .unwrap();
    assert!(f.fs.inode_count() > 1 && f.fs.handle_count() == 1);
    f.fs.init(fuse_backend_rs::abi::fuse_abi::FsOptions::empty())
        .unwrap();
    assert_eq!((f.fs.inode_count(), f.fs.handle_count()), (1, 0));
    assert_eq!(
        errno_of(f.fs.flush(&ctx(), e.inode, fh.unwrap(), 0)),
        libc::EBADF
    );
}

#[test]
fn directory_listings_are_freed_with_their_handles() {
    let f = fixture();
    let dir = walk(&f.fs, "only_b").unwrap();
    let mut handles = Vec::new();
    for _ in 0..2000 {
        let (fh, _) = f.fs.opendir(&ctx(), dir.inode, 0).unwrap();
        let fh = fh.unwrap();
        f.fs.readdir(&ctx(), dir.inode, fh, 4096, 0, &mut |_| Ok(1))
            .unwrap();
        handles.push(fh);
    }
    let per_listing = f.fs.listed_entries() / 2000;
    assert!(per_listing >= 3, ". .. and inner.txt");
    for fh in handles {
        f.fs.releasedir(&ctx(), dir.inode, 0, fh).unwrap();
    }
    assert_eq!(f.fs.listed_entries(), 0);
}

/// A file a program runs from (the kernel's open for the exec, `__FMODE_EXEC`, still held)
/// cannot be truncated by a read-only open with O_TRUNC, which the kernel sends before its
/// own ETXTBSY check (FUSE_ATOMIC_O_TRUNC): ETXTBSY, the file intact, as natively. Once the
/// program is gone, the same open truncates.
#[test]
fn a_running_program_is_not_truncated_by_a_read_only_open() {
    const FMODE_EXEC: u32 = 0x20;
    let d = tempfile::tempdir().unwrap();
    fs::write(d.path().join("prog"), b"#!/bin/sh\n").unwrap();
    let u = union(&[(d.path(), "RW")]);
    let prog = walk(&u, "prog").unwrap().inode;
    let trunc = (libc::O_RDONLY | libc::O_TRUNC) as u32;
    let (exec, _, _) = u
        .open(&ctx(), prog, libc::O_RDONLY as u32 | FMODE_EXEC, 0)
        .unwrap();
    // A plain reader is no program.
    let (reader, _, _) = u.open(&ctx(), prog, libc::O_RDONLY as u32, 0).unwrap();
    assert_eq!(errno_of(u.open(&ctx(), prog, trunc, 0)), libc::ETXTBSY);
    assert_eq!(fs::read(d.path().join("prog")).unwrap(), b"#!/bin/sh\n");
    u.release(&ctx(), prog, 0, exec.unwrap(), false, false, None)
        .unwrap();
    let (fh, _, _) = u.open(&ctx(), prog, trunc, 0).unwrap();
    assert_eq!(fs::read(d.path().join("prog")).unwrap(), b"");
    for fh in [fh, reader] {
        u.release(&ctx(), prog, 0, fh.unwrap(), false, false, None)
            .unwrap();
    }
}

/// UNLINK and RMDIR under the default action policy (epall) answer as the policy's choice
/// would: every writable copy goes, a name only RO copies hold is EROFS, a missing one ENOENT,
/// a parent missing on some branches is no failure, and the host's own answers (ENOTEMPTY,
/// EISDIR, ENOTDIR) come back. On one branch, at the root and beneath it alike.
#[test]
fn removal_takes_every_writable_copy_and_answers_as_the_policy() {
    // (union, parent, name, rmdir?) -> errno, 0 for success
    let gone = |fs: &UnionFs, parent: u64, name: &str, dir: bool| {
        let r = match dir {
            true => fs.rmdir(&ctx(), parent, &c(name)),
            false => fs.unlink(&ctx(), parent, &c(name)),
        };
        r.err().and_then(|e| e.raw_os_error()).unwrap_or(0)
    };
    let t = tempfile::tempdir().unwrap();
    let [a, b, c2] = ["a", "b", "c"].map(|n| {
        let p = t.path().join(n);
        fs::create_dir(&p).unwrap();
        p
    });
    for br in [&a, &b, &c2] {
        fs::create_dir(br.join("d")).unwrap();
        fs::write(br.join("d/x"), "x").unwrap();
    }
    fs::create_dir(c2.join("only_c")).unwrap();
    fs::write(c2.join("only_c/z"), "z").unwrap();
    fs::write(b.join("d/ro"), "ro").unwrap();
    let three = union(&[(&a, "RW"), (&b, "RO"), (&c2, "RW")]);
    let d = walk(&three, "d").unwrap().inode;
    assert_eq!(gone(&three, d, "x", false), 0);
    assert!(!a.join("d/x").exists() && !c2.join("d/x").exists());
    assert!(b.join("d/x").exists());
    // Only the RO copy is left: it shows, and cannot be removed.
    let x = walk(&three, "d/x").unwrap();
    assert_eq!(read_file(&three, x.inode).unwrap(), b"x");
    // The parent of z is on the last branch only.
    let only_c = walk(&three, "only_c").unwrap().inode;
    let cases = [
        (d, "x", false, libc::EROFS),
        (d, "ro", false, libc::EROFS),
        (d, "no", false, libc::ENOENT),
        (only_c, "z", false, 0),
        (ROOT_ID, "only_c", true, 0),
        (ROOT_ID, "d", true, libc::ENOTEMPTY),
    ];
    for (parent, name, dir, want) in cases {
        assert_eq!(gone(&three, parent, name, dir), want, "{name}");
    }
    assert!(!c2.join("only_c").exists());

    let one = tempfile::tempdir().unwrap();
    fs::create_dir_all(one.path().join("sub/full")).unwrap();
    fs::write(one.path().join("sub/full/f"), "f").unwrap();
    fs::write(one.path().join("top"), "t").unwrap();
    fs::write(one.path().join("sub/f"), "f").unwrap();
    let rw = union(&[(one.path(), "RW")]);
    let ro = union(&[(one.path(), "RO")]);
    let sub = walk(&rw, "sub").unwrap().inode;
    let ro_sub = walk(&ro, "sub").unwrap().inode;
    let refused = [
        (&ro, ROOT_ID, "top", false, libc::EROFS),
        (&ro, ro_sub, "f", false, libc::EROFS),
        (&ro, ro_sub, "no", false, libc::ENOENT),
        (&ro, ROOT_ID, "sub", true, libc::EROFS),
        (&rw, ROOT_ID, "sub", true, libc::ENOTEMPTY),
        (&rw, ROOT_ID, "sub", false, libc::EISDIR),
        (&rw, ROOT_ID, "top", true, libc::ENOTDIR),
        (&rw, sub, "no", false, libc::ENOENT),
    ];
    for (fs, parent, name, dir, want) in refused {
        assert_eq!(gone(fs, parent, name, dir), want, "{name}");
    }
    assert_eq!(snapshot(one.path()).len(), 5);
    assert_eq!(gone(&rw, ROOT_ID, "top", false), 0);
    assert_eq!(gone(&rw, sub, "f", false), 0);
    assert!(!one.path().join("top").exists() && !one.path().join("sub/f").exists());
    assert_eq!(errno_of(walk(&rw, "sub/f")), libc::ENOENT);
}
