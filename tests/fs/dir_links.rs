//! The link count of a directory with copies on several branches (`src/fs/dir_links.rs`):
//! 2 plus its distinct subdirectories in the union, whether the copies' own counts settle it
//! or their listings must, right after subdirectories are made or removed through the union
//! or on the host, and after renames.

use std::fs;
use std::path::Path;

use testkit::calls::Calls;
use testkit::fsharness::*;
use testkit::tmpfs::Tmpfs;
use union_virtiofsd::fs::{UnionFs, ROOT_ID};

/// The union's link count of directory `path`, as GETATTR answers it.
fn nlink(fs: &UnionFs, path: &str) -> u64 {
    let e = walk(fs, path).unwrap();
    fs.getattr(&ctx(), e.inode, None).unwrap().0.st_nlink
}

/// Two tmpfs branches (tmpfs keeps a directory's link count) with `d` on both, and
/// `subdirs` of `d` made on each.
fn two_copies(a_subdirs: &[&str], b_subdirs: &[&str]) -> (Tmpfs, Tmpfs) {
    let (a, b) = (Tmpfs::new("16m"), Tmpfs::new("16m"));
    for (root, subdirs) in [(a.path(), a_subdirs), (b.path(), b_subdirs)] {
        fs::create_dir(root.join("d")).unwrap();
        fs::write(root.join("d/file"), "x").unwrap();
        for s in subdirs {
            fs::create_dir(root.join("d").join(s)).unwrap();
        }
    }
    (a, b)
}

/// The two branches (small: no free-space floor) with `options` on top.
fn union_of(a: &Path, b: &Path, options: &str) -> UnionFs {
    let options = format!("minfreespace=1M,{options}");
    union_with(&[(a, "RW"), (b, "RW")], options.trim_end_matches(','))
}

#[test]
fn subdirectories_on_one_copy_are_that_copys_count() {
    let (a, b) = two_copies(&[], &["p", "q"]);
    let u = union_of(a.path(), b.path(), "");
    assert_eq!(nlink(&u, "d"), 4);
    let (a, b) = two_copies(&[], &[]);
    let u = union_of(a.path(), b.path(), "");
    assert_eq!(nlink(&u, "d"), 2);
}

#[test]
fn subdirectories_on_several_copies_are_counted_once_each() {
    // x on both, y on a, z on b: three names.
    let (a, b) = two_copies(&["x", "y"], &["x", "z"]);
    let u = union_of(a.path(), b.path(), "category.create=ff");
    assert_eq!(nlink(&u, "d"), 5);
    assert_eq!(nlink(&u, "d"), 5, "asked again");
    // Made and removed through the union (ff: on a).
    let d = walk(&u, "d").unwrap();
    u.mkdir(&ctx(), d.inode, &c("w"), 0o755, 0).unwrap();
    assert_eq!(nlink(&u, "d"), 6);
    u.rmdir(&ctx(), d.inode, &c("y")).unwrap();
    assert_eq!(nlink(&u, "d"), 5);
    // Made and removed on the host, well within the attribute window.
    fs::create_dir(b.path().join("d/v")).unwrap();
    assert_eq!(nlink(&u, "d"), 6);
    fs::remove_dir(a.path().join("d/x")).unwrap();
    assert_eq!(nlink(&u, "d"), 6, "x is still on b");
    fs::remove_dir(b.path().join("d/x")).unwrap();
    assert_eq!(nlink(&u, "d"), 5);
}

#[test]
fn a_subdirectory_renamed_on_the_host_counts_after_the_next_rename_or_at_once_without_a_window() {
    // a: x, y; b: x, z. On the host y becomes z: no copy's link count changes, but the
    // union has x and z only.
    for (options, at_once) in [("cache.attr=0", true), ("cache.attr=3600", false)] {
        let (a, b) = two_copies(&["x", "y"], &["x", "z"]);
        let u = union_of(a.path(), b.path(), options);
        assert_eq!(nlink(&u, "d"), 5, "{options}");
        fs::rename(a.path().join("d/y"), a.path().join("d/z")).unwrap();
        if at_once {
            assert_eq!(nlink(&u, "d"), 4, "{options}");
            continue;
        }
        // Any rename through the union drops the counts made from listings.
        let d = walk(&u, "d").unwrap();
        u.rename(&ctx(), d.inode, &c("file"), ROOT_ID, &c("moved"), 0)
            .unwrap();
        assert_eq!(nlink(&u, "d"), 4, "{options}");
    }
}
