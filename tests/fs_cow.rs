//! Copy-on-write layers (`cow=true`) through the filesystem layer, with the host kernel's
//! overlayfs as the oracle: over a read-only base (lower) and an empty writable layer (upper),
//! writes, chmod, deletions of files and directories, a directory made again over a deleted
//! one and a file made over a deleted one; then the base must be byte-for-byte unchanged, the
//! upper layer must hold overlayfs's whiteouts and opaque marks, and the host's overlayfs over
//! the same base and upper must show exactly the tree the union shows.

#[path = "support/fsharness.rs"]
mod fsharness;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

use fsharness::{c, create_file, ctx, errno_of, read_file, union_with, walk, Tmpfs};
use fuse_backend_rs::api::filesystem::FileSystem;
use union_virtiofsd::fs::{UnionFs, ROOT_ID};

/// Every path under `root` with its kind, mode and content (symlink target for symlinks).
fn tree(root: &Path) -> BTreeMap<String, (String, u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let ft = m.file_type();
            let (kind, data) = if ft.is_dir() {
                stack.push(p.clone());
                ("dir", Vec::new())
            } else if ft.is_symlink() {
                (
                    "symlink",
                    fs::read_link(&p)
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes(),
                )
            } else if ft.is_char_device() {
                ("chardev", m.rdev().to_le_bytes().to_vec())
            } else {
                ("file", fs::read(&p).unwrap())
            };
            out.insert(rel, (kind.to_owned(), m.mode() & 0o7777, data));
        }
    }
    out
}

/// The union's tree as the guest would list it (through lookup, readdir and read).
fn union_tree(fs: &UnionFs) -> BTreeMap<String, (String, u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
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
                    ("dir", Vec::new())
                }
                libc::S_IFLNK => ("symlink", fs.readlink(&ctx(), e.inode).unwrap()),
                _ => ("file", read_file(fs, e.inode).unwrap()),
            };
            out.insert(rel, (kind.to_owned(), mode & 0o7777, data));
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
    let b = base.0.path();
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
    let before = tree(b);
    let upper = top.0.path().join("upper");
    let work = top.0.path().join("work");
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
    let mut attr = keep.attr;
    attr.st_mode = libc::S_IFREG | 0o600;
    u.setattr(
        &ctx(),
        keep.inode,
        attr,
        None,
        fuse_backend_rs::abi::fuse_abi::SetattrValid::MODE,
    )
    .unwrap();
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

    // The base is byte-for-byte unchanged.
    assert_eq!(tree(b), before);
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
    let theirs = tree(mnt.path());
    let _ = std::process::Command::new("umount")
        .arg(mnt.path())
        .status();
    assert_eq!(seen, theirs);
    assert_eq!(seen["passwd.moved"].2, b"root:x:0:0\nu:x:1000:1000\n");
    assert!(!seen.contains_key("etc/gone") && !seen.contains_key("dir/sub"));
}
