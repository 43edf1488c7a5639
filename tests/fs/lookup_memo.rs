//! The lookup memo seen from outside: lookups answered from it find what a full search finds;
//! a host-side change shows once the entry window has passed (the memo's clock is moved, no
//! sleeping); every change the daemon makes, and a branch edit, shows at once.

use std::fs;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use tempfile::TempDir;
use testkit::calls::Calls;
use testkit::fsharness::*;
use union_virtiofsd::fs::{UnionFs, ROOT_ID};

/// Three branches, RW, RW, RW (so a create under epff lands on the first that has the parent).
fn three(options: &str) -> ([TempDir; 3], UnionFs) {
    let dirs = [(); 3].map(|_| tempfile::tempdir().unwrap());
    let u = union_with(
        &[
            (dirs[0].path(), "RW"),
            (dirs[1].path(), "RW"),
            (dirs[2].path(), "RW"),
        ],
        &format!("category.create=epff,minfreespace=0,{options}"),
    );
    (dirs, u)
}

/// The content the union shows at `path`, or the errno of the lookup (a negative entry is
/// ENOENT).
fn shown(u: &UnionFs, path: &str) -> Result<Vec<u8>, i32> {
    let mut parent = ROOT_ID;
    for comp in path.split('/') {
        let e = u
            .lookup(&ctx(), parent, &c(comp))
            .map_err(|e| e.raw_os_error().unwrap())?;
        if e.inode == 0 {
            return Err(libc::ENOENT);
        }
        parent = e.inode;
    }
    Ok(read_file(u, parent).unwrap())
}

fn put(dir: &Path, rel: &str, data: &str) {
    let p = dir.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, data).unwrap();
}

#[test]
fn a_name_on_the_last_branch_is_found_again() {
    let (b, u) = three("cache.entry=3600");
    put(b[2].path(), "d/f", "third");
    put(b[2].path(), "d/g", "third g");
    put(b[1].path(), "d/h", "second h");
    for _ in 0..4 {
        assert_eq!(shown(&u, "d/f").unwrap(), b"third");
        assert_eq!(shown(&u, "d/g").unwrap(), b"third g");
        assert_eq!(shown(&u, "d/h").unwrap(), b"second h");
        assert_eq!(shown(&u, "d/none"), Err(libc::ENOENT));
    }
    // After a listing too (each name's first copy comes from it).
    let d = walk(&u, "d").unwrap();
    assert_eq!(list(&u, d.inode).len(), 5);
    assert_eq!(shown(&u, "d/f").unwrap(), b"third");
    assert_eq!(shown(&u, "d/h").unwrap(), b"second h");
    assert_eq!(shown(&u, "d/none"), Err(libc::ENOENT));
}

#[test]
fn a_host_side_copy_on_an_earlier_branch_shows_after_the_window() {
    let (b, u) = three("cache.entry=2");
    put(b[0].path(), "d/other", "first");
    put(b[2].path(), "d/f", "third");
    assert_eq!(shown(&u, "d/f").unwrap(), b"third");
    put(b[0].path(), "d/f", "first");
    // Within the window the guest may cache the entry, the memo may answer as before.
    assert_eq!(shown(&u, "d/f").unwrap(), b"third");
    u.advance_lookup_memo_clock(Duration::from_millis(2001));
    assert_eq!(shown(&u, "d/f").unwrap(), b"first");
}

#[test]
fn a_host_side_directory_on_a_branch_it_was_absent_from_shows_after_the_window() {
    let (b, u) = three("cache.entry=2");
    put(b[2].path(), "d/f", "third");
    // Lookups enough for the directory's absences to be found (it is on branch 3 only).
    for _ in 0..3 {
        assert_eq!(shown(&u, "d/new"), Err(libc::ENOENT));
    }
    put(b[0].path(), "d/new", "first");
    put(b[1].path(), "d/f", "second");
    assert_eq!(shown(&u, "d/new"), Err(libc::ENOENT));
    u.advance_lookup_memo_clock(Duration::from_millis(2001));
    assert_eq!(shown(&u, "d/new").unwrap(), b"first");
    assert_eq!(shown(&u, "d/f").unwrap(), b"second");
}

#[test]
fn with_no_entry_window_the_memo_is_off() {
    let (b, u) = three("cache.entry=0,cache.negative-entry=0");
    put(b[2].path(), "d/f", "third");
    for _ in 0..3 {
        assert_eq!(shown(&u, "d/f").unwrap(), b"third");
        assert_eq!(shown(&u, "d/new"), Err(libc::ENOENT));
    }
    put(b[0].path(), "d/f", "first");
    put(b[1].path(), "d/new", "second");
    assert_eq!(shown(&u, "d/f").unwrap(), b"first");
    assert_eq!(shown(&u, "d/new").unwrap(), b"second");
}

#[test]
fn a_missing_name_is_memoized_for_the_negative_window_only() {
    let (b, u) = three("cache.entry=3600,cache.negative-entry=5");
    put(b[1].path(), "d/f", "second");
    assert_eq!(shown(&u, "d/m"), Err(libc::ENOENT));
    // The directory is on branch 2 as well as branch 1 now: the name is still memoized
    // missing for the negative window, and found after it.
    put(b[0].path(), "d/m", "first");
    assert_eq!(shown(&u, "d/m"), Err(libc::ENOENT));
    u.advance_lookup_memo_clock(Duration::from_millis(5001));
    assert_eq!(shown(&u, "d/m").unwrap(), b"first");
}

#[test]
fn daemon_side_changes_show_at_once() {
    let (b, u) = three("cache.entry=3600,cache.negative-entry=3600");
    put(b[2].path(), "d/f", "third");
    put(b[2].path(), "d/old", "old");
    let d = walk(&u, "d").unwrap();
    for _ in 0..3 {
        assert_eq!(shown(&u, "d/f").unwrap(), b"third");
        assert_eq!(shown(&u, "d/n"), Err(libc::ENOENT));
        assert_eq!(shown(&u, "d/old").unwrap(), b"old");
        assert_eq!(shown(&u, "d/new"), Err(libc::ENOENT));
        assert_eq!(shown(&u, "d/sub"), Err(libc::ENOENT));
    }
    // CREATE of a name memoized missing.
    let n = create_file(&u, d.inode, "n", b"made").unwrap();
    u.forget(&ctx(), n.inode, 1);
    assert_eq!(shown(&u, "d/n").unwrap(), b"made");
    // UNLINK of a name memoized found.
    u.unlink(&ctx(), d.inode, &c("f")).unwrap();
    assert_eq!(shown(&u, "d/f"), Err(libc::ENOENT));
    // RENAME: the old name goes, the new one (memoized missing) comes.
    u.rename(&ctx(), d.inode, &c("old"), d.inode, &c("new"), 0)
        .unwrap();
    assert_eq!(shown(&u, "d/old"), Err(libc::ENOENT));
    assert_eq!(shown(&u, "d/new").unwrap(), b"old");
    // MKDIR, then a file in the new directory.
    let sub = u.mkdir(&ctx(), d.inode, &c("sub"), 0o755, 0).unwrap();
    let x = create_file(&u, sub.inode, "x", b"in sub").unwrap();
    u.forget(&ctx(), x.inode, 1);
    assert_eq!(shown(&u, "d/sub/x").unwrap(), b"in sub");
    // LINK into a name memoized missing.
    for _ in 0..2 {
        assert_eq!(shown(&u, "d/sub/y"), Err(libc::ENOENT));
    }
    let nn = walk(&u, "d/n").unwrap();
    u.link(&ctx(), nn.inode, sub.inode, &c("y")).unwrap();
    assert_eq!(shown(&u, "d/sub/y").unwrap(), b"made");
    // RMDIR then MKDIR again: the new directory's content, not the old one's.
    u.unlink(&ctx(), sub.inode, &c("x")).unwrap();
    u.unlink(&ctx(), sub.inode, &c("y")).unwrap();
    u.rmdir(&ctx(), d.inode, &c("sub")).unwrap();
    assert_eq!(shown(&u, "d/sub/x"), Err(libc::ENOENT));
    let sub2 = u.mkdir(&ctx(), d.inode, &c("sub"), 0o755, 0).unwrap();
    let x = create_file(&u, sub2.inode, "x", b"again").unwrap();
    u.forget(&ctx(), x.inode, 1);
    assert_eq!(shown(&u, "d/sub/x").unwrap(), b"again");
    // Where it all landed: the first branch holding the directory.
    assert!(b[2].path().join("d/new").exists() && !b[0].path().join("d/new").exists());
}

#[test]
fn a_branch_edit_invalidates_the_memo() {
    let (b, u) = three("cache.entry=3600,cache.negative-entry=3600");
    let front = tempfile::tempdir().unwrap();
    put(b[2].path(), "d/f", "third");
    put(front.path(), "d/f", "front");
    put(front.path(), "d/m", "front m");
    for _ in 0..3 {
        assert_eq!(shown(&u, "d/f").unwrap(), b"third");
        assert_eq!(shown(&u, "d/m"), Err(libc::ENOENT));
    }
    u.ctl_set(
        "branches",
        &format!("+<{}=RW", front.path().display()),
        Vec::<OwnedFd>::new(),
    )
    .unwrap();
    assert_eq!(shown(&u, "d/f").unwrap(), b"front");
    assert_eq!(shown(&u, "d/m").unwrap(), b"front m");
    // And removing it again.
    u.ctl_set(
        "branches",
        &format!("-{}", front.path().display()),
        Vec::<OwnedFd>::new(),
    )
    .unwrap();
    assert_eq!(shown(&u, "d/f").unwrap(), b"third");
    assert_eq!(shown(&u, "d/m"), Err(libc::ENOENT));
}

#[test]
fn an_answer_from_the_memo_is_cached_no_longer_than_the_memo_trusts_it() {
    let (b, u) = three("cache.entry=2,cache.negative-entry=2");
    put(b[2].path(), "d/f", "third");
    let d = walk(&u, "d").unwrap();
    // (These already rest on what the lookup of d found: d is absent from the first two
    // branches.)
    let probed = u.lookup(&ctx(), d.inode, &c("f")).unwrap();
    assert!(probed.entry_timeout > Duration::from_millis(1900));
    assert!(probed.entry_timeout <= Duration::from_secs(2));
    let missing = u.lookup(&ctx(), d.inode, &c("m")).unwrap();
    assert_eq!(missing.inode, 0);
    assert!(missing.entry_timeout > Duration::from_millis(1900));
    u.advance_lookup_memo_clock(Duration::from_millis(1500));
    let memoized = u.lookup(&ctx(), d.inode, &c("f")).unwrap();
    assert_eq!(memoized.inode, probed.inode);
    assert!(memoized.entry_timeout <= Duration::from_millis(500));
    let missing = u.lookup(&ctx(), d.inode, &c("m")).unwrap();
    assert!(missing.entry_timeout <= Duration::from_millis(500));
}

#[test]
fn copy_up_and_whiteouts_show_at_once() {
    let dirs = [(); 3].map(|_| tempfile::tempdir().unwrap());
    let u = union_with(
        &[
            (dirs[0].path(), "RW"),
            (dirs[1].path(), "RO"),
            (dirs[2].path(), "RO"),
        ],
        "cow=true,minfreespace=0,cache.entry=3600,cache.negative-entry=3600",
    );
    put(dirs[1].path(), "d/other", "mid");
    put(dirs[2].path(), "d/f", "lower");
    fs::create_dir(dirs[0].path().join("d")).unwrap();
    for _ in 0..3 {
        assert_eq!(shown(&u, "d/f").unwrap(), b"lower");
    }
    // A change to the lower copy copies it up: the lookup now finds the upper copy.
    let f = walk(&u, "d/f").unwrap();
    chmod_as(&u, &ctx(), &f, 0o600).unwrap();
    assert!(dirs[0].path().join("d/f").exists());
    let again = walk(&u, "d/f").unwrap();
    assert_eq!(again.attr.st_mode & 0o777, 0o600);
    // UNLINK leaves a whiteout over the lower copy: gone at once, and back when made again.
    let d = walk(&u, "d").unwrap();
    u.unlink(&ctx(), d.inode, &c("f")).unwrap();
    assert_eq!(shown(&u, "d/f"), Err(libc::ENOENT));
    let n = create_file(&u, d.inode, "f", b"new").unwrap();
    u.forget(&ctx(), n.inode, 1);
    assert_eq!(shown(&u, "d/f").unwrap(), b"new");
}
