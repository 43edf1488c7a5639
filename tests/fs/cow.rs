//! Copy-on-write layers (`cow=true`) through the filesystem layer, with the host kernel's
//! overlayfs as the oracle: over a read-only base (lower) and an empty writable layer (upper),
//! writes, chmod, deletions of files and directories, a directory made again over a deleted
//! one, a file made over a deleted one, renames of a base file and of a base directory tree
//! (copied up whole and made opaque: never EXDEV); then the base must be byte-for-byte
//! unchanged, the
//! upper layer must hold overlayfs's whiteouts and opaque marks, and the host's overlayfs over
//! the same base and upper must show exactly the tree the union shows.

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

use testkit::calls::Calls;
use testkit::errno::{self, errno_of};
use testkit::fsharness::{c, chmod_as, create_file, ctx, read_file, union_with, walk};
use testkit::tmpfs::Tmpfs;
use testkit::tree::{snapshot, Kind, Node, Tree};
use testkit::{fsharness, tree};
use union_virtiofsd::fs::{UnionFs, ROOT_ID};

/// The union's tree as the guest would list it (through lookup, readdir and read).
fn union_tree(fs: &UnionFs) -> Tree {
    let mut out = Tree::new();
    let mut stack = vec![(ROOT_ID, String::new())];
    while let Some((inode, prefix)) = stack.pop() {
        for name in names(fs, inode) {
            let e = fs.lookup(&ctx(), inode, &c(&name)).unwrap();
            let rel = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}/{name}")
            };
            let mode = e.attr.st_mode;
            let (kind, data) = match mode & libc::S_IFMT {
                libc::S_IFDIR => {
                    stack.push((e.inode, rel.clone()));
                    (Kind::Dir, Vec::new())
                }
                libc::S_IFLNK => (Kind::Symlink, fs.readlink(&ctx(), e.inode).unwrap()),
                _ => (Kind::File, read_file(fs, e.inode).unwrap()),
            };
            out.insert(rel, Node::new(kind, mode, data));
        }
    }
    out
}

/// The names the union lists in directory `inode`, without `.` and `..`.
fn names(fs: &UnionFs, inode: u64) -> Vec<String> {
    fsharness::list(fs, inode)
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n != "." && n != "..")
        .collect()
}

#[test]
fn copy_up_whiteouts_and_opaque_directories_match_the_kernels_overlayfs() {
    let base = Tmpfs::new("16M");
    let top = Tmpfs::new("16M");
    let b = base.path();
    fs::create_dir_all(b.join("etc")).unwrap();
    fs::write(b.join("etc/passwd"), "root:x:0:0\n").unwrap();
    fs::set_permissions(b.join("etc/passwd"), fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(b.join("etc/gone"), "delete me").unwrap();
    fs::write(b.join("keep"), "kept").unwrap();
    fs::write(b.join("recreated"), "old").unwrap();
    fs::create_dir_all(b.join("dir/sub")).unwrap();
    fs::write(b.join("dir/sub/file"), "deep").unwrap();
    fs::write(b.join("dir/other"), "other").unwrap();
    std::os::unix::fs::symlink("keep", b.join("link")).unwrap();
    fs::create_dir_all(b.join("tree/a/b")).unwrap();
    fs::write(b.join("tree/a/b/leaf"), "leaf").unwrap();
    fs::write(b.join("tree/top"), "t").unwrap();
    fs::write(b.join("hard1"), "linked").unwrap();
    fs::hard_link(b.join("hard1"), b.join("hard2")).unwrap();
    let before = snapshot(b);
    let upper = top.path().join("upper");
    let work = top.path().join("work");
    fs::create_dir(&upper).unwrap();
    fs::create_dir(&work).unwrap();

    let u = union_with(&[(&upper, "RW"), (b, "RO")], "cow=true,minfreespace=0");
    // A write to a base file: copied up, the base untouched.
    let passwd = walk(&u, "etc/passwd").unwrap();
    let (fh, _, _) = u
        .open(
            &ctx(),
            passwd.inode,
            (libc::O_WRONLY | libc::O_APPEND) as u32,
            0,
        )
        .unwrap();
    let mut r = fsharness::SliceReader(b"u:x:1000:1000\n".to_vec(), 0);
    u.write(
        &ctx(),
        passwd.inode,
        fh.unwrap(),
        &mut r,
        14,
        11,
        None,
        false,
        0,
        0,
    )
    .unwrap();
    assert_eq!(
        read_file(&u, passwd.inode).unwrap(),
        b"root:x:0:0\nu:x:1000:1000\n"
    );
    // chmod of a base file: copied up.
    let keep = walk(&u, "keep").unwrap();
    chmod_as(&u, &ctx(), &keep, 0o600).unwrap();
    assert_eq!(walk(&u, "keep").unwrap().attr.st_mode & 0o777, 0o600);
    // Deleting a base file leaves a whiteout; it is gone from lookup and listing.
    let etc = walk(&u, "etc").unwrap();
    u.unlink(&ctx(), etc.inode, &c("gone")).unwrap();
    assert_eq!(errno_of(walk(&u, "etc/gone")), libc::ENOENT);
    assert!(!fsharness::list(&u, etc.inode)
        .iter()
        .any(|(n, _)| n == "gone"));
    // A base directory: not empty, then emptied and removed, then made again (opaque).
    let dir = walk(&u, "dir").unwrap();
    assert_eq!(
        errno_of(u.rmdir(&ctx(), ROOT_ID, &c("dir"))),
        libc::ENOTEMPTY
    );
    let sub = walk(&u, "dir/sub").unwrap();
    u.unlink(&ctx(), sub.inode, &c("file")).unwrap();
    u.rmdir(&ctx(), dir.inode, &c("sub")).unwrap();
    u.unlink(&ctx(), dir.inode, &c("other")).unwrap();
    u.rmdir(&ctx(), ROOT_ID, &c("dir")).unwrap();
    assert_eq!(errno_of(walk(&u, "dir")), libc::ENOENT);
    let again = u.mkdir(&ctx(), ROOT_ID, &c("dir"), 0o755, 0).unwrap();
    let l = names(&u, again.inode);
    assert!(l.is_empty(), "nothing of the base shows: {l:?}");
    create_file(&u, again.inode, "new", b"fresh").unwrap();
    // A file deleted and made again.
    u.unlink(&ctx(), ROOT_ID, &c("recreated")).unwrap();
    create_file(&u, ROOT_ID, "recreated", b"new").unwrap();
    // Hard links of the base stay one file: a write through one name is seen through the
    // other, and both names are linked in the upper layer.
    let h1 = walk(&u, "hard1").unwrap();
    let (fh, _, _) = u
        .open(
            &ctx(),
            h1.inode,
            (libc::O_WRONLY | libc::O_APPEND) as u32,
            0,
        )
        .unwrap();
    let mut r = fsharness::SliceReader(b" twice".to_vec(), 0);
    u.write(
        &ctx(),
        h1.inode,
        fh.unwrap(),
        &mut r,
        6,
        6,
        None,
        false,
        0,
        0,
    )
    .unwrap();
    let h2 = walk(&u, "hard2").unwrap();
    assert_eq!(read_file(&u, h2.inode).unwrap(), b"linked twice");
    chmod_as(&u, &ctx(), &h2, 0o640).unwrap();
    let (m1, m2) = (
        fs::metadata(upper.join("hard1")).unwrap(),
        fs::metadata(upper.join("hard2")).unwrap(),
    );
    assert_eq!(
        (m1.ino(), m1.nlink(), m1.mode() & 0o777),
        (m2.ino(), 2, 0o640)
    );
    // A base file renamed: the old name is whited out.
    u.rename(
        &ctx(),
        etc.inode,
        &c("passwd"),
        ROOT_ID,
        &c("passwd.moved"),
        0,
    )
    .unwrap();
    // A base directory with nested entries, renamed as a whole: never EXDEV.
    u.rename(&ctx(), ROOT_ID, &c("tree"), ROOT_ID, &c("tree.moved"), 0)
        .unwrap();
    assert_eq!(errno_of(walk(&u, "tree")), libc::ENOENT);
    let leaf = walk(&u, "tree.moved/a/b/leaf").unwrap();
    assert_eq!(read_file(&u, leaf.inode).unwrap(), b"leaf");

    // The base is byte-for-byte unchanged.
    assert_eq!(snapshot(b), before);
    // The upper layer is in overlayfs's format.
    let wh = fs::symlink_metadata(upper.join("etc/gone")).unwrap();
    assert!(
        wh.file_type().is_char_device() && wh.rdev() == 0,
        "whiteout"
    );
    assert!(fs::symlink_metadata(upper.join("etc/passwd"))
        .unwrap()
        .file_type()
        .is_char_device());
    let mut v = [0u8; 8];
    let n = rustix::fs::getxattr(upper.join("dir"), c"trusted.overlay.opaque", &mut v[..]).unwrap();
    assert_eq!(&v[..n], b"y");

    // The kernel's overlayfs over the same layers shows the same tree.
    let seen = union_tree(&u);
    drop(u);
    let mnt = tempfile::tempdir().unwrap();
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        b.display(),
        upper.display(),
        work.display()
    );
    let ok = std::process::Command::new("mount")
        .args(["-t", "overlay", "overlay", "-o", &opts])
        .arg(mnt.path())
        .status()
        .unwrap()
        .success();
    assert!(ok, "mount overlayfs");
    let theirs = snapshot(mnt.path());
    let _ = std::process::Command::new("umount")
        .arg(mnt.path())
        .status();
    assert_eq!(seen, theirs);
    assert_eq!(seen["passwd.moved"].data, b"root:x:0:0\nu:x:1000:1000\n");
    assert!(!seen.contains_key("etc/gone") && !seen.contains_key("dir/sub"));
    assert!(seen.contains_key("tree.moved/a/b/leaf") && !seen.contains_key("tree"));
}

/// One change, applied alike through a kernel overlayfs mount and through the union.
#[derive(Clone, Debug)]
enum Op {
    Append(&'static str, &'static str),
    Truncate(&'static str, u64),
    Chmod(&'static str, u32),
    Unlink(&'static str),
    Rmdir(&'static str),
    Mkdir(&'static str),
    Create(&'static str, &'static str),
    Rename(&'static str, &'static str),
    Symlink(&'static str, &'static str),
    Link(&'static str, &'static str),
}

/// `Ok(())` or the errno: what an operation's outcome is compared by.
fn errno_of_io<T>(r: std::io::Result<T>) -> Result<(), i32> {
    errno::result(r).map(drop)
}

/// `op` on the overlayfs mount at `m`.
fn on_overlay(m: &Path, op: &Op) -> Result<(), i32> {
    use std::io::Write;
    match op {
        Op::Append(p, d) => errno_of_io(
            fs::OpenOptions::new()
                .append(true)
                .open(m.join(p))
                .and_then(|mut f| f.write_all(d.as_bytes())),
        ),
        Op::Truncate(p, n) => errno_of_io(
            fs::OpenOptions::new()
                .write(true)
                .open(m.join(p))
                .and_then(|f| f.set_len(*n)),
        ),
        Op::Chmod(p, mode) => errno_of_io(fs::set_permissions(
            m.join(p),
            fs::Permissions::from_mode(*mode),
        )),
        Op::Unlink(p) => errno_of_io(fs::remove_file(m.join(p))),
        Op::Rmdir(p) => errno_of_io(fs::remove_dir(m.join(p))),
        Op::Mkdir(p) => errno_of_io(fs::create_dir(m.join(p))),
        Op::Create(p, d) => errno_of_io(
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(m.join(p))
                .and_then(|mut f| f.write_all(d.as_bytes())),
        ),
        Op::Rename(a, b) => errno_of_io(fs::rename(m.join(a), m.join(b))),
        Op::Symlink(t, p) => errno_of_io(std::os::unix::fs::symlink(t, m.join(p))),
        Op::Link(a, b) => errno_of_io(fs::hard_link(m.join(a), m.join(b))),
    }
}

/// (parent inode, last name) of `path` in the union.
fn parent_of(u: &UnionFs, path: &str) -> std::io::Result<(u64, String)> {
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    let parent = if dir.is_empty() {
        ROOT_ID
    } else {
        walk(u, dir)?.inode
    };
    Ok((parent, name.to_owned()))
}

/// `op` through the union's filesystem layer.
fn on_union(u: &UnionFs, op: &Op) -> Result<(), i32> {
    use fuse_backend_rs::abi::fuse_abi::SetattrValid;
    let r: std::io::Result<()> = (|| match op {
        Op::Append(p, d) => {
            let e = walk(u, p)?;
            let (fh, _, _) =
                u.open(&ctx(), e.inode, (libc::O_WRONLY | libc::O_APPEND) as u32, 0)?;
            let fh = fh.unwrap();
            let size = u.getattr(&ctx(), e.inode, None)?.0.st_size as u64;
            let mut r = fsharness::SliceReader(d.as_bytes().to_vec(), 0);
            u.write(
                &ctx(),
                e.inode,
                fh,
                &mut r,
                d.len() as u32,
                size,
                None,
                false,
                0,
                0,
            )?;
            u.release(&ctx(), e.inode, 0, fh, false, false, None)
        }
        Op::Truncate(p, n) => {
            let e = walk(u, p)?;
            let mut a = e.attr;
            a.st_size = *n as i64;
            u.setattr(&ctx(), e.inode, a, None, SetattrValid::SIZE)
                .map(drop)
        }
        Op::Chmod(p, mode) => chmod_as(u, &ctx(), &walk(u, p)?, *mode),
        Op::Unlink(p) => {
            let (d, n) = parent_of(u, p)?;
            u.unlink(&ctx(), d, &c(&n))
        }
        Op::Rmdir(p) => {
            let (d, n) = parent_of(u, p)?;
            u.rmdir(&ctx(), d, &c(&n))
        }
        Op::Mkdir(p) => {
            let (d, n) = parent_of(u, p)?;
            u.mkdir(&ctx(), d, &c(&n), 0o755, 0).map(drop)
        }
        Op::Create(p, data) => {
            let (d, n) = parent_of(u, p)?;
            create_file(u, d, &n, data.as_bytes()).map(drop)
        }
        Op::Rename(a, b) => {
            let (da, na) = parent_of(u, a)?;
            let (db, nb) = parent_of(u, b)?;
            u.rename(&ctx(), da, &c(&na), db, &c(&nb), 0)
        }
        Op::Symlink(t, p) => {
            let (d, n) = parent_of(u, p)?;
            u.symlink(&ctx(), &c(t), d, &c(&n)).map(drop)
        }
        Op::Link(a, b) => {
            let e = walk(u, a)?;
            let (d, n) = parent_of(u, b)?;
            u.link(&ctx(), e.inode, d, &c(&n)).map(drop)
        }
    })();
    errno_of_io(r)
}

/// A base tree: files, a nested directory, a symlink, an empty directory.
fn make_base(b: &Path) {
    fs::create_dir_all(b.join("usr/share/doc")).unwrap();
    fs::create_dir_all(b.join("var/lib/dpkg")).unwrap();
    fs::create_dir_all(b.join("empty")).unwrap();
    fs::write(b.join("var/lib/dpkg/status"), "Package: base\n").unwrap();
    fs::write(b.join("var/lib/dpkg/available"), "old backup\n").unwrap();
    fs::write(b.join("usr/share/doc/README"), "docs").unwrap();
    fs::write(b.join("usr/share/doc/COPYING"), "gpl").unwrap();
    fs::write(b.join("top"), "top").unwrap();
    std::os::unix::fs::symlink("top", b.join("top.link")).unwrap();
    for d in [
        "usr",
        "usr/share",
        "usr/share/doc",
        "var",
        "var/lib",
        "var/lib/dpkg",
        "empty",
    ] {
        fs::set_permissions(b.join(d), fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// The upper layer as overlayfs defines it: entries, their kinds, modes and contents,
/// whiteouts, and which directories are opaque.
fn upper_tree(root: &Path) -> Tree {
    tree::Walk {
        xattrs: &["trusted.overlay.opaque"],
        ..tree::Walk::default()
    }
    .snapshot(root)
}

#[test]
fn the_same_changes_give_the_same_answers_and_upper_layer_as_overlayfs() {
    use Op::*;
    let ops = [
        Append("var/lib/dpkg/status", "Package: new\n"),
        Chmod("top", 0o600),
        Truncate("usr/share/doc/README", 2),
        Unlink("usr/share/doc/COPYING"),
        Unlink("usr/share/doc/COPYING"),
        Rmdir("usr/share/doc"),
        Unlink("usr/share/doc/README"),
        Rmdir("usr/share/doc"),
        Mkdir("usr/share/doc"),
        Create("usr/share/doc/NEW", "new"),
        Rmdir("empty"),
        Create("empty", "now a file"),
        Rename("top", "top.renamed"),
        Symlink("top.renamed", "new.link"),
        Unlink("top.link"),
        Link("top.renamed", "top.hard"),
        Mkdir("var/cache"),
        Create("var/cache/x", "x"),
        Rename("var/lib/dpkg/status", "var/lib/dpkg/status-old"),
        Create("var/lib/dpkg/status", "Package: rewritten\n"),
        Rmdir("var/lib"),
        Create("top", "again"),
        // dpkg's backup: the old copy unlinked, the new one linked in its place.
        Unlink("var/lib/dpkg/available"),
        Link("var/lib/dpkg/status", "var/lib/dpkg/available"),
    ];
    let lower_a = Tmpfs::new("8M");
    let lower_b = Tmpfs::new("8M");
    let top = Tmpfs::new("8M");
    make_base(lower_a.path());
    make_base(lower_b.path());
    let t = top.path();
    for d in ["ovl-upper", "ovl-work", "union-upper", "mnt"] {
        fs::create_dir(t.join(d)).unwrap();
    }
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower_a.path().display(),
        t.join("ovl-upper").display(),
        t.join("ovl-work").display()
    );
    let mounted = std::process::Command::new("mount")
        .args(["-t", "overlay", "overlay", "-o", &opts])
        .arg(t.join("mnt"))
        .status()
        .unwrap()
        .success();
    assert!(mounted, "mount overlayfs");
    let theirs: Vec<_> = ops
        .iter()
        .map(|op| on_overlay(&t.join("mnt"), op))
        .collect();
    let _ = std::process::Command::new("umount")
        .arg(t.join("mnt"))
        .status();

    let upper = t.join("union-upper");
    let u = union_with(
        &[(&upper, "RW"), (lower_b.path(), "RO")],
        "cow=true,minfreespace=0",
    );
    let ours: Vec<_> = ops.iter().map(|op| on_union(&u, op)).collect();
    for ((op, a), b) in ops.iter().zip(&ours).zip(&theirs) {
        assert_eq!(a, b, "{op:?}: union vs overlayfs");
    }
    assert_eq!(upper_tree(&upper), upper_tree(&t.join("ovl-upper")));
    // Neither touched its base.
    assert_eq!(snapshot(lower_a.path()), snapshot(lower_b.path()));
}

/// A directory made deep in the base clones its parents onto the upper layer; when the guest
/// looks those parents up again (its entry timeout passed), they are the same directories, so
/// a working directory below them stays usable (dpkg's `tmp.ci`, extracted into by tar).
#[test]
fn parents_cloned_upward_keep_their_nodes() {
    let upper = tempfile::tempdir().unwrap();
    let base = tempfile::tempdir().unwrap();
    fs::create_dir_all(base.path().join("var/lib/dpkg")).unwrap();
    let u = union_with(
        &[(upper.path(), "RW"), (base.path(), "RO")],
        "cow=true,minfreespace=0",
    );
    let var = walk(&u, "var").unwrap();
    let dpkg = walk(&u, "var/lib/dpkg").unwrap();
    let ci = u.mkdir(&ctx(), dpkg.inode, &c("tmp.ci"), 0o755, 0).unwrap();
    assert!(upper.path().join("var/lib/dpkg/tmp.ci").is_dir());
    // Revalidation: "var" is now found on the upper layer first.
    let again = u.lookup(&ctx(), fuse_backend_rs::api::filesystem::ROOT_ID, &c("var"));
    assert_eq!(again.unwrap().inode, var.inode);
    create_file(&u, ci.inode, "control", b"Package: x\n").unwrap();
    assert!(upper.path().join("var/lib/dpkg/tmp.ci/control").is_file());
}

/// A writable layer added on top while the union runs holds the whiteouts of later deletes,
/// and they hide the base's files: the layers above a branch are the branches before it in
/// branch order, whatever ids they were given (the new layer's id, 2, is the highest; `ff`
/// puts the whiteout on it).
#[test]
fn a_layer_added_on_top_masks_what_it_deletes() {
    let upper = tempfile::tempdir().unwrap();
    let base = tempfile::tempdir().unwrap();
    let top = tempfile::tempdir().unwrap();
    fs::write(base.path().join("f"), "base").unwrap();
    let u = union_with(
        &[(upper.path(), "RW"), (base.path(), "RO")],
        "cow=true,minfreespace=0,category.create=ff",
    );
    u.ctl_set(
        "branches",
        &format!("+<{}=RW", top.path().display()),
        Vec::new(),
    )
    .unwrap();
    assert_eq!(u.branch_ids(), [2, 0, 1]);
    u.unlink(&ctx(), ROOT_ID, &c("f")).unwrap();
    let wh = fs::symlink_metadata(top.path().join("f")).unwrap();
    assert!(
        wh.file_type().is_char_device(),
        "the whiteout is on the top layer"
    );
    assert!(!upper.path().join("f").exists());
    assert_eq!(errno_of(walk(&u, "f")), libc::ENOENT);
    assert!(!names(&u, ROOT_ID).contains(&"f".to_string()));
    assert_eq!(fs::read(base.path().join("f")).unwrap(), b"base");
}
