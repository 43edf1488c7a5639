//! The runtime control interface driven on a real union (no daemon, no guest): branch edits
//! with stable ids, ESTALE for a removed branch's nodes (never another branch's file), open
//! files that outlive their branch, options changed for later requests, mergerfs's errnos,
//! and the per-file queries.

use std::fs;
use std::os::fd::OwnedFd;

use testkit::calls::Calls;
use testkit::errno::errno_of;
use testkit::fsharness::*;
use union_virtiofsd::fs::ROOT_ID;

fn no_dirs() -> Vec<OwnedFd> {
    Vec::new()
}

#[test]
fn branches_added_and_removed_keep_their_ids() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let c = tempfile::tempdir().unwrap();
    fs::write(a.path().join("in_a"), "a").unwrap();
    fs::write(b.path().join("in_b"), "b").unwrap();
    fs::write(c.path().join("in_c"), "c").unwrap();
    let u = union(&[(a.path(), "RW"), (b.path(), "RW")]);
    assert_eq!(u.branch_ids(), [0, 1]);
    assert!(walk(&u, "in_c").is_err());

    // Added at the front: a new id, first in order; its files appear.
    let change = u
        .ctl_set(
            "branches",
            &format!("+<{}=NC", c.path().display()),
            no_dirs(),
        )
        .unwrap();
    assert!(
        change.contains("added") && change.contains("id 2"),
        "{change}"
    );
    assert_eq!(u.branch_ids(), [2, 0, 1]);
    assert_eq!(
        read_file(&u, walk(&u, "in_c").unwrap().inode).unwrap(),
        b"c"
    );
    assert_eq!(
        u.ctl_get("user.mergerfs.branches").unwrap(),
        format!(
            "{}=NC:{}=RW:{}=RW",
            c.path().display(),
            a.path().display(),
            b.path().display()
        )
    );

    // A file opened on b, then b removed: its node is stale, its open file still reads.
    let in_b = walk(&u, "in_b").unwrap();
    let (fh, _, _) = u
        .open(&ctx(), in_b.inode, libc::O_RDONLY as u32, 0)
        .unwrap();
    let fh = fh.unwrap();
    let change = u
        .ctl_set("branches", &format!("-{}", b.path().display()), no_dirs())
        .unwrap();
    assert!(
        change.contains("removed") && change.contains("id 1"),
        "{change}"
    );
    assert_eq!(u.branch_ids(), [2, 0]);
    assert_eq!(
        errno_of(u.getattr(&ctx(), in_b.inode, None)),
        libc::ESTALE,
        "a removed branch's node must be stale"
    );
    let mut w = VecWriter::default();
    u.read(&ctx(), in_b.inode, fh, &mut w, 16, 0, None, 0)
        .unwrap();
    assert_eq!(w.0, b"b");
    u.release(&ctx(), in_b.inode, 0, fh, false, false, None)
        .unwrap();
    assert_eq!(errno_of(walk(&u, "in_b")), libc::ENOENT);

    // Added back: a new id (2 and 0 keep theirs), never the old one.
    u.ctl_set("branches", &format!("+{}", b.path().display()), no_dirs())
        .unwrap();
    assert_eq!(u.branch_ids(), [2, 0, 3]);
    assert_eq!(errno_of(u.getattr(&ctx(), in_b.inode, None)), libc::ESTALE);
    assert!(walk(&u, "in_b").is_ok());

    // Set again with the same directories in another order and modes: ids are kept.
    u.ctl_set(
        "branches",
        &format!("={}=RO:{}", a.path().display(), c.path().display()),
        no_dirs(),
    )
    .unwrap();
    assert_eq!(u.branch_ids(), [0, 2]);
    create_file(&u, ROOT_ID, "new", b"x").unwrap();
    assert!(
        c.path().join("new").exists(),
        "a is RO now: the file lands on c"
    );
}

#[test]
fn edit_errors_change_nothing() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let u = union(&[(a.path(), "RW"), (b.path(), "RW")]);
    let err = |v: &str| u.ctl_set("branches", v, no_dirs()).unwrap_err();
    assert_eq!(err("-*").errno, libc::EINVAL, "no branch left");
    assert_eq!(err("<>/x").errno, libc::EINVAL);
    assert_eq!(err("+/does/not/exist").errno, libc::ENOENT);
    let e = err(&format!("+{}", a.path().display()));
    assert_eq!(e.errno, libc::EEXIST, "{e}");
    assert_eq!(err("+/x=ZZ").errno, libc::EINVAL);
    assert_eq!(u.branch_ids(), [0, 1]);
    let f = tempfile::NamedTempFile::new().unwrap();
    assert_eq!(
        err(&format!("+{}", f.path().display())).errno,
        libc::ENOTDIR
    );
    assert_eq!(u.branch_ids(), [0, 1]);
}

#[test]
fn options_as_mergerfs_runtime_keys() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    fs::write(a.path().join("f"), "a").unwrap();
    fs::write(b.path().join("f"), "b").unwrap();
    let u = union_with(&[(a.path(), "RW"), (b.path(), "RW")], "category.create=ff");
    assert_eq!(u.ctl_get("category.create").unwrap(), "ff");
    let said = u.ctl_set("user.mergerfs.category.create", "lus", no_dirs());
    assert_eq!(said.unwrap(), "now lus");
    assert_eq!(u.ctl_get("func.mkdir").unwrap(), "lus");
    u.ctl_set("func.getattr", "newest", no_dirs()).unwrap();
    assert_eq!(u.ctl_get("func.getattr").unwrap(), "newest");
    assert_eq!(u.ctl_get("category.search").unwrap(), "ff,newest");
    u.ctl_set("minfreespace", "1G", no_dirs()).unwrap();
    assert_eq!(u.ctl_get("minfreespace").unwrap(), "1073741824");
    u.ctl_set("cache.negative_entry", "2.5", no_dirs()).unwrap();
    assert_eq!(u.ctl_get("cache.negative-entry").unwrap(), "2.5");
    u.ctl_set("moveonenospc", "true", no_dirs()).unwrap();
    assert_eq!(u.ctl_get("moveonenospc").unwrap(), "mfs");

    let e = u.ctl_get("nosuch").unwrap_err();
    assert_eq!(e.errno, libc::ENODATA);
    assert_eq!(
        u.ctl_set("nosuch", "1", no_dirs()).unwrap_err().errno,
        libc::ENODATA
    );
    assert_eq!(
        u.ctl_set("func.nosuch", "ff", no_dirs()).unwrap_err().errno,
        libc::ENODATA
    );
    assert_eq!(
        u.ctl_set("version", "9", no_dirs()).unwrap_err().errno,
        libc::EROFS
    );
    assert_eq!(
        u.ctl_set("inodecalc", "path-hash", no_dirs())
            .unwrap_err()
            .errno,
        libc::EROFS
    );
    assert_eq!(
        u.ctl_set("category.create", "bogus", no_dirs())
            .unwrap_err()
            .errno,
        libc::EINVAL
    );
    assert_eq!(
        u.ctl_set("minfreespace", "lots", no_dirs())
            .unwrap_err()
            .errno,
        libc::EINVAL
    );
    assert_eq!(
        u.ctl_get("category.create").unwrap(),
        "lus",
        "a refused set changes nothing"
    );
    // Every listed key reads.
    for k in u.ctl_keys() {
        u.ctl_get(&k).unwrap_or_else(|e| panic!("{k}: {e}"));
    }
}

#[test]
fn per_file_queries() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    fs::create_dir(a.path().join("d")).unwrap();
    fs::create_dir(b.path().join("d")).unwrap();
    fs::write(b.path().join("d/f"), "b").unwrap();
    fs::write(a.path().join("d/f"), "a").unwrap();
    fs::write(b.path().join("only_b"), "b").unwrap();
    let u = union(&[(a.path(), "RW"), (b.path(), "RW")]);
    let q = |p: &str, w: &str| -> Vec<String> {
        u.ctl_query(p, w)
            .unwrap()
            .into_iter()
            .map(|v| String::from_utf8(v).unwrap())
            .collect()
    };
    let (ad, bd) = (a.path().display(), b.path().display());
    assert_eq!(
        q("/d/f", "allpaths"),
        [format!("{ad}/d/f"), format!("{bd}/d/f")]
    );
    assert_eq!(q("d/f", "basepath"), [format!("{ad}")]);
    assert_eq!(q("/d/f", "user.mergerfs.relpath"), ["/d/f"]);
    assert_eq!(q("/only_b", "fullpath"), [format!("{bd}/only_b")]);
    assert_eq!(q("/", "allpaths"), [format!("{ad}"), format!("{bd}")]);
    assert_eq!(
        u.ctl_query("/missing", "allpaths").unwrap_err().errno,
        libc::ENOENT
    );
    assert_eq!(
        u.ctl_query("/../etc", "allpaths").unwrap_err().errno,
        libc::EINVAL
    );
    assert_eq!(
        u.ctl_query("/d/f", "size").unwrap_err().errno,
        libc::ENODATA
    );
}

#[test]
fn guest_reads_path_queries_only_when_allowed() {
    use fuse_backend_rs::api::filesystem::GetxattrReply;
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    fs::write(a.path().join("f"), "a").unwrap();
    fs::write(b.path().join("f"), "b").unwrap();
    let get = |u: &union_virtiofsd::fs::UnionFs, name: &str| {
        let e = walk(u, "f").unwrap();
        u.getxattr(&ctx(), e.inode, &c(name), 4096)
    };
    let off = union(&[(a.path(), "RW"), (b.path(), "RW")]);
    assert_eq!(errno_of(get(&off, "user.mergerfs.allpaths")), libc::ENODATA);
    let on = union_with(&[(a.path(), "RW"), (b.path(), "RW")], "path-queries=true");
    let value = |r| match r {
        Ok(GetxattrReply::Value(v)) => v,
        _ => panic!("no value"),
    };
    let want = format!("{}/f\0{}/f", a.path().display(), b.path().display());
    assert_eq!(value(get(&on, "user.mergerfs.allpaths")), want.as_bytes());
    assert_eq!(value(get(&on, "user.mergerfs.relpath")), b"/f");
    assert_eq!(errno_of(get(&on, "user.mergerfs.nosuch")), libc::ENODATA);
    // The host can switch it off while the guest runs.
    on.ctl_set("path-queries", "false", no_dirs()).unwrap();
    assert_eq!(errno_of(get(&on, "user.mergerfs.allpaths")), libc::ENODATA);
}

#[test]
fn config_reload_applies_all_or_nothing() {
    use union_virtiofsd::config::runtime::reload;
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let u = union_with(&[(a.path(), "RW")], "category.create=ff");
    let text = format!(
        "# pool\ncategory.create=mfs\nbranches={}:{}=NC\nminfreespace=2G\n",
        a.path().display(),
        b.path().display()
    );
    let change = reload(&u, "pool.conf", &text).unwrap();
    assert!(
        change.contains("added") && change.contains("minfreespace=2147483648"),
        "{change}"
    );
    assert_eq!(u.ctl_get("category.create").unwrap(), "mfs");
    assert_eq!(u.branch_ids(), [0, 1]);
    assert_eq!(reload(&u, "pool.conf", &text).unwrap(), "no change");
    // A bad line, or an option fixed at start, changes nothing.
    let e = reload(&u, "pool.conf", "category.create=ff\njunk\n").unwrap_err();
    assert_eq!(e.errno, libc::EINVAL);
    let e = reload(&u, "pool.conf", "category.create=ff\ninodecalc=path-hash\n").unwrap_err();
    assert_eq!(e.errno, libc::EROFS, "{e}");
    assert!(e.message.contains("inodecalc"), "{e}");
    assert_eq!(u.ctl_get("category.create").unwrap(), "mfs");
}

#[test]
fn an_edited_branch_set_travels_with_the_session() {
    use union_virtiofsd::fs::session::{ExportOptions, FindBy, ImportError, OnError, Sessions};
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let d = tempfile::tempdir().unwrap();
    fs::write(d.path().join("f"), "d").unwrap();
    let src = union(&[(a.path(), "RW"), (b.path(), "RW")]);
    let opts = ExportOptions {
        handles_allowed: false,
        find_by: FindBy::Paths,
        verify_handles: false,
        confirm_paths: false,
    };
    assert!(src.export(opts).edited_branches.is_empty(), "not edited");
    // b replaced by d: the same number of branches, so positions alone would map d's
    // nodes onto b.
    src.ctl_set(
        "branches",
        &format!("={}:{}", a.path().display(), d.path().display()),
        no_dirs(),
    )
    .unwrap();
    walk(&src, "f").unwrap();
    let img = src.export(opts);
    assert_eq!(img.edited_branches.len(), 2);
    let stale = union(&[(a.path(), "RW"), (b.path(), "RW")]);
    let e = stale.import(img.clone(), OnError::Abort).unwrap_err();
    assert!(matches!(e, ImportError::EditedBranches { .. }), "{e}");
    let same = union(&[(a.path(), "RW"), (d.path(), "RW")]);
    same.import(img, OnError::Abort).unwrap();
    assert_eq!(
        read_file(&same, walk(&same, "f").unwrap().inode).unwrap(),
        b"d"
    );
}

#[test]
fn a_directory_outlives_the_branch_its_node_was_found_on() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    for d in [a.path(), b.path()] {
        fs::create_dir(d.join("d")).unwrap();
    }
    fs::write(a.path().join("d/on_a"), "a").unwrap();
    fs::write(b.path().join("d/on_b"), "b").unwrap();
    let u = union(&[(a.path(), "RW"), (b.path(), "RW")]);
    let d = walk(&u, "d").unwrap();
    let on_a = walk(&u, "d/on_a").unwrap();
    u.ctl_set("branches", &format!("-{}", a.path().display()), no_dirs())
        .unwrap();
    // The directory is still one of the union's: its node goes on, now on b.
    u.getattr(&ctx(), d.inode, None).unwrap();
    let names: Vec<String> = list(&u, d.inode).into_iter().map(|(n, _)| n).collect();
    assert!(
        names.contains(&"on_b".to_string()) && !names.contains(&"on_a".to_string()),
        "{names:?}"
    );
    create_file(&u, d.inode, "new", b"n").unwrap();
    assert!(b.path().join("d/new").exists());
    // A file that was only on a is stale.
    assert_eq!(errno_of(u.getattr(&ctx(), on_a.inode, None)), libc::ESTALE);
}

#[test]
fn invalidate_all_nodes_closes_named_nodes_descriptors() {
    let a = tempfile::tempdir().unwrap();
    for i in 0..5 {
        fs::write(a.path().join(format!("f{i}")), "x").unwrap();
    }
    let u = union(&[(a.path(), "RW")]);
    let nodes: Vec<_> = (0..5)
        .map(|i| walk(&u, &format!("f{i}")).unwrap())
        .collect();
    assert_eq!(u.node_fd_count(), 5);
    let said = u
        .ctl_set("user.mergerfs.cmd.invalidate-all-nodes", "", no_dirs())
        .unwrap();
    assert_eq!(said, "5 node descriptors closed");
    assert_eq!(u.node_fd_count(), 0);
    // Each is found again when used.
    for n in &nodes {
        u.getattr(&ctx(), n.inode, None).unwrap();
    }
    assert_eq!(u.node_fd_count(), 5);
}

/// A thread that served a request keeps no hold on the view it saw: after a branch is
/// removed, its next request sees the new branch set, and nothing in the process keeps the
/// removed branch's directory open (a disk can be unmounted).
#[test]
fn a_pinned_view_is_not_kept_past_its_request() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    fs::write(b.path().join("in_b"), "b").unwrap();
    let u = union(&[(a.path(), "RW"), (b.path(), "RW")]);
    assert!(walk(&u, "in_b").is_ok());
    let holds_b = || {
        fs::read_dir("/proc/self/fd")
            .unwrap()
            .any(|e| fs::read_link(e.unwrap().path()).is_ok_and(|t| t.starts_with(b.path())))
    };
    assert!(holds_b(), "the union holds its branch's root");
    u.ctl_set("branches", &format!("-{}", b.path().display()), no_dirs())
        .unwrap();
    assert_eq!(errno_of(walk(&u, "in_b")), libc::ENOENT);
    assert!(!holds_b(), "a removed branch's directory stays open");
}
