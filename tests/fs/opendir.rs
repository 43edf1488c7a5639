//! Directories the guest reads without opening them. Once its kernel may skip OPENDIR
//! (FUSE_NO_OPENDIR_SUPPORT, offered at INIT) and every listing is kept across opens anyway
//! (`cache.readdir`), OPENDIR answers ENOSYS: the kernel then opens directories itself, sends
//! no RELEASEDIR, and reads them with no handle (0). Such a reading pages through the listing
//! it started even when another reader started a newer one after a host-side change; a
//! listing that was let go is started again where the reader was. Where the kernel leaves
//! permission checks to the daemon (a host mount without `default_permissions`), every
//! OPENDIR still comes, and a READDIR without a handle is refused.

use std::collections::BTreeSet;
use std::fs;

use fuse_backend_rs::abi::fuse_abi::FsOptions;
use fuse_backend_rs::api::filesystem::DirEntry;
use testkit::calls::Calls;
use testkit::errno::errno_of;
use testkit::fsharness::{c, ctx, union_with, walk};
use union_virtiofsd::fs::{UnionFs, ROOT_ID};

/// A union of one branch with `options`, initialised by a kernel that offers `offered`.
fn union(dir: &std::path::Path, options: &str, offered: FsOptions) -> UnionFs {
    let u = union_with(&[(dir, "RW")], options);
    u.init(offered).unwrap();
    u
}

/// Reads directory `inode` without a handle from `offset`, at most `max` entries: their
/// names and the offset after the last.
fn page(u: &UnionFs, inode: u64, offset: u64, max: usize) -> (Vec<String>, u64) {
    let (mut names, mut next) = (Vec::new(), offset);
    u.readdir(&ctx(), inode, 0, 4096, offset, &mut |d: DirEntry| {
        if names.len() == max {
            return Ok(0);
        }
        names.push(String::from_utf8_lossy(d.name).into_owned());
        next = d.offset;
        Ok(1)
    })
    .unwrap();
    (names, next)
}

/// Every name of directory `inode` read without a handle, `per` entries a READDIR, with
/// `between` run after the first page.
fn read_all(u: &UnionFs, inode: u64, per: usize, mut between: impl FnMut()) -> Vec<String> {
    let (mut all, mut offset) = page(u, inode, 0, per);
    between();
    loop {
        let (names, next) = page(u, inode, offset, per);
        if names.is_empty() {
            return all;
        }
        all.extend(names);
        offset = next;
    }
}

fn opendir_answer(u: &UnionFs) -> Result<bool, i32> {
    u.opendir(&ctx(), ROOT_ID, 0)
        .map(|(fh, _)| fh.is_some())
        .map_err(|e| e.raw_os_error().unwrap())
}

#[test]
fn opendir_is_elided_only_where_every_listing_is_kept() {
    let d = tempfile::tempdir().unwrap();
    let offered = FsOptions::ZERO_MESSAGE_OPENDIR;
    let cached = "cache.readdir=true,minfreespace=0";
    assert_eq!(
        opendir_answer(&union(d.path(), cached, offered)),
        Err(libc::ENOSYS)
    );
    // Not offered, or listings not kept: a handle.
    let plain = union(d.path(), cached, FsOptions::empty());
    assert_eq!(opendir_answer(&plain), Ok(true));
    assert_eq!(
        opendir_answer(&union(d.path(), "minfreespace=0", offered)),
        Ok(true)
    );
    // A kernel that leaves permission checks to the daemon: a handle, and no reading without.
    let host = union_with(&[(d.path(), "RW")], cached);
    host.kernel_checks_permissions(false);
    host.init(offered).unwrap();
    assert_eq!(opendir_answer(&host), Ok(true));
    let refused = host.readdir(&ctx(), ROOT_ID, 0, 4096, 0, &mut |_| Ok(1));
    assert_eq!(errno_of(refused), libc::EBADF);
    assert_eq!(
        errno_of(host.fsyncdir(&ctx(), ROOT_ID, false, 0)),
        libc::EBADF
    );
}

#[test]
fn a_reading_without_a_handle_serves_each_lasting_name_once() {
    let d = tempfile::tempdir().unwrap();
    fs::create_dir(d.path().join("dir")).unwrap();
    for i in 0..300 {
        fs::write(d.path().join(format!("dir/f{i}")), b"").unwrap();
    }
    let u = union(
        d.path(),
        "cache.readdir=true,minfreespace=0",
        FsOptions::ZERO_MESSAGE_OPENDIR,
    );
    assert_eq!(opendir_answer(&u), Err(libc::ENOSYS));
    let dir = walk(&u, "dir").unwrap().inode;
    // Between this reader's first page and the rest, the host adds a name and removes one,
    // and another reader lists the directory from the start: it sees the change; the first
    // reader gets every name that stayed exactly once (POSIX: the added and the removed one
    // may or may not come).
    let mut second = Vec::new();
    let first = read_all(&u, dir, 25, || {
        fs::write(d.path().join("dir/new"), b"").unwrap();
        fs::remove_file(d.path().join("dir/f0")).unwrap();
        second = read_all(&u, dir, 100, || {});
    });
    let stayed: Vec<String> = [".".to_string(), "..".to_string()]
        .into_iter()
        .chain((1..300).map(|i| format!("f{i}")))
        .collect();
    for n in &stayed {
        assert_eq!(first.iter().filter(|f| *f == n).count(), 1, "{n}");
    }
    for n in ["f0", "new"] {
        assert!(first.iter().filter(|f| *f == n).count() <= 1, "{n}");
    }
    assert_eq!(first.len(), first.iter().collect::<BTreeSet<_>>().len());
    assert!(second.contains(&"new".to_string()) && !second.contains(&"f0".to_string()));
    assert_eq!(second.len(), 302);
    // Listings of 64 other directories push this reader's out: it goes on from where it was
    // in a new listing, and the reading ends.
    let (head, offset) = page(&u, dir, 0, 10);
    assert_eq!(head.len(), 10);
    for i in 0..64 {
        fs::create_dir(d.path().join(format!("other{i}"))).unwrap();
        let other = walk(&u, &format!("other{i}")).unwrap().inode;
        page(&u, other, 0, 1);
    }
    let (rest, _) = page(&u, dir, offset, 1000);
    assert_eq!(
        rest.len(),
        292,
        "the entries after the first 10 of the new listing"
    );
    assert!(
        !rest.iter().any(|n| head.contains(n)),
        "none of the first page again"
    );
    // FSYNCDIR without a handle: nothing to flush; ENOTDIR for a file.
    u.fsyncdir(&ctx(), dir, false, 0).unwrap();
    let file = u.lookup(&ctx(), dir, &c("new")).unwrap().inode;
    assert_eq!(errno_of(u.fsyncdir(&ctx(), file, false, 0)), libc::ENOTDIR);
    assert_eq!(
        errno_of(u.readdir(&ctx(), file, 0, 4096, 0, &mut |_| Ok(1))),
        libc::ENOTDIR
    );
}

/// `rm -rf` reads a directory a page at a time and removes what it read before reading on,
/// and reads every subdirectory in between: more than the 64 kept listings, so the one it
/// started in is gone when it reads on. It goes on in a new listing of what is left, where
/// it stands by the names it had: nothing is skipped (found by `scripts/bench-walk.sh`,
/// where `rm -rf` failed "Directory not empty" with `--cache always`).
#[test]
fn a_directory_emptied_while_read_without_a_handle_is_served_whole() {
    let d = tempfile::tempdir().unwrap();
    for i in 0..200 {
        fs::create_dir_all(d.path().join(format!("top/d{i}/sub"))).unwrap();
    }
    let u = union(
        d.path(),
        "cache.readdir=true,minfreespace=0",
        FsOptions::ZERO_MESSAGE_OPENDIR,
    );
    assert_eq!(opendir_answer(&u), Err(libc::ENOSYS));
    let top = walk(&u, "top").unwrap().inode;
    let (mut offset, mut removed) = (0, 0);
    loop {
        let (names, next) = page(&u, top, offset, 27);
        if names.is_empty() {
            break;
        }
        offset = next;
        for n in names.iter().filter(|n| !n.starts_with('.')) {
            // Its subdirectories are read (a listing each), then it goes.
            let child = walk(&u, &format!("top/{n}")).unwrap().inode;
            page(&u, child, 0, 100);
            let sub = walk(&u, &format!("top/{n}/sub")).unwrap().inode;
            page(&u, sub, 0, 100);
            u.rmdir(&ctx(), child, &c("sub")).unwrap();
            u.rmdir(&ctx(), top, &c(n)).unwrap();
            removed += 1;
        }
    }
    assert_eq!(removed, 200);
    assert_eq!(fs::read_dir(d.path().join("top")).unwrap().count(), 0);
}

/// The previous release answers a READDIR without a handle EBADF: a session whose guest may
/// read directories that way (its listings are kept: `cache.readdir`) does not go to it.
#[test]
fn a_guest_that_may_skip_opendir_is_not_handed_to_the_previous_release() {
    use union_virtiofsd::fs::session::Sessions;
    let d = tempfile::tempdir().unwrap();
    let offered = FsOptions::ZERO_MESSAGE_OPENDIR;
    let kept = union(d.path(), "cache.readdir=true,minfreespace=0", offered);
    assert!(kept.needs_after_v1().is_some(), "before any OPENDIR");
    let plain = union(d.path(), "minfreespace=0", offered);
    assert_eq!(plain.needs_after_v1(), None);
    // Listings kept at first, then not (a runtime change): the guest was told already.
    let changed = union(d.path(), "cache.readdir=true,minfreespace=0", offered);
    assert_eq!(opendir_answer(&changed), Err(libc::ENOSYS));
    changed
        .ctl_set("cache.readdir", "false", Vec::new())
        .unwrap();
    assert!(changed.needs_after_v1().is_some());
    assert_eq!(
        opendir_answer(&changed),
        Ok(true),
        "later opens get handles again"
    );
}
