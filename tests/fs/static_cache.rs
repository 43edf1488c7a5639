//! `static` branches (`PATH=RO,static`): what lives only there is cached by the guest for a
//! day (entry and attr windows, FOPEN_KEEP_CACHE, FOPEN_CACHE_DIR); what an RW branch holds,
//! shadows or merges keeps the configured windows.

use std::fs;
use std::time::Duration;

use fuse_backend_rs::abi::fuse_abi::OpenOptions;
use testkit::calls::Calls;
use testkit::errno::errno_of;
use testkit::fsharness::*;
use union_virtiofsd::fs::ROOT_ID;

const DAY: Duration = Duration::from_secs(24 * 60 * 60);
const SECOND: Duration = Duration::from_secs(1);

/// An RW upper and a static RO base: `base/only/f`, `base/merged/f`, `upper/merged/g`,
/// `base/shadowed` and `upper/shadowed`, `upper/mine`.
fn layers() -> (tempfile::TempDir, tempfile::TempDir) {
    let (upper, base) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for d in ["only", "merged"] {
        fs::create_dir(base.path().join(d)).unwrap();
        fs::write(base.path().join(d).join("f"), b"base").unwrap();
    }
    fs::create_dir(upper.path().join("merged")).unwrap();
    fs::write(upper.path().join("merged/g"), b"upper").unwrap();
    fs::write(base.path().join("shadowed"), b"base").unwrap();
    fs::write(upper.path().join("shadowed"), b"upper").unwrap();
    fs::write(upper.path().join("mine"), b"upper").unwrap();
    (upper, base)
}

/// Entry window, attr window, GETATTR's window and the open flags of `path`.
fn windows(fs: &union_virtiofsd::fs::UnionFs, path: &str) -> (Duration, Duration, Duration) {
    let e = walk(fs, path).unwrap();
    let (_, attr) = fs.getattr(&ctx(), e.inode, None).unwrap();
    (e.entry_timeout, e.attr_timeout, attr)
}

/// Whether all three are the configured second (an entry window a little less when the
/// lookup memo answered: it caps them by what is left of its own).
fn configured((entry, attr, getattr): (Duration, Duration, Duration)) -> bool {
    entry <= SECOND && !entry.is_zero() && attr == SECOND && getattr == SECOND
}

fn file_open(fs: &union_virtiofsd::fs::UnionFs, path: &str) -> OpenOptions {
    let e = walk(fs, path).unwrap();
    fs.open(&ctx(), e.inode, 0, 0).unwrap().1
}

fn dir_open(fs: &union_virtiofsd::fs::UnionFs, path: &str) -> OpenOptions {
    let inode = if path.is_empty() {
        ROOT_ID
    } else {
        walk(fs, path).unwrap().inode
    };
    fs.opendir(&ctx(), inode, 0).unwrap().1
}

#[test]
fn only_what_static_branches_alone_hold_is_cached_long() {
    let (upper, base) = layers();
    let fs = union_with(&[(upper.path(), "RW"), (base.path(), "RO,static")], "");
    let long = (DAY, DAY, DAY);
    // Only on the static base: a day, the page cache and the listing kept.
    assert_eq!(windows(&fs, "only"), long);
    assert_eq!(windows(&fs, "only/f"), long);
    assert_eq!(file_open(&fs, "only/f"), OpenOptions::KEEP_CACHE);
    assert_eq!(
        dir_open(&fs, "only"),
        OpenOptions::CACHE_DIR | OpenOptions::KEEP_CACHE
    );
    // A directory merged with the RW branch, and what is on the RW branch: configured.
    assert!(configured(windows(&fs, "merged")));
    assert_eq!(dir_open(&fs, "merged"), OpenOptions::empty());
    assert_eq!(dir_open(&fs, ""), OpenOptions::empty());
    assert!(configured(windows(&fs, "merged/g")));
    assert!(configured(windows(&fs, "mine")));
    assert_eq!(file_open(&fs, "mine"), OpenOptions::empty());
    // A base file under a merged directory is still the base's alone.
    assert_eq!(windows(&fs, "merged/f"), long);
    // A name the RW branch also holds (here shadowing the base's copy): configured.
    assert!(configured(windows(&fs, "shadowed")));
    assert_eq!(file_open(&fs, "shadowed"), OpenOptions::empty());
    // Missing names: the RW branch may gain them, so no negative entry (the default 0)...
    assert_eq!(
        errno_of(fs.lookup(&ctx(), walk(&fs, "only").unwrap().inode, &c("nope"))),
        libc::ENOENT
    );
    // ...and the configured one when set.
    let fs = union_with(
        &[(upper.path(), "RW"), (base.path(), "RO,static")],
        "cache.negative-entry=5",
    );
    let only = walk(&fs, "only").unwrap().inode;
    let e = fs.lookup(&ctx(), only, &c("nope")).unwrap();
    assert_eq!(e.inode, 0);
    assert!(e.entry_timeout <= Duration::from_secs(5) && !e.entry_timeout.is_zero());
}

#[test]
fn the_same_layers_without_static_keep_the_configured_windows() {
    let (upper, base) = layers();
    let fs = union_with(&[(upper.path(), "RW"), (base.path(), "RO")], "");
    for path in ["only", "only/f", "merged/f", "mine"] {
        assert!(configured(windows(&fs, path)), "{path}");
    }
    assert_eq!(file_open(&fs, "only/f"), OpenOptions::empty());
    assert_eq!(dir_open(&fs, "only"), OpenOptions::empty());
    // Direct I/O asked for stays direct on a static branch.
    let fs = union_with(&[(base.path(), "RO,static")], "cache.files=off");
    assert_eq!(file_open(&fs, "only/f"), OpenOptions::DIRECT_IO);
    // A longer configured window is not shortened.
    let fs = union_with(&[(base.path(), "RO,static")], "cache.entry=100000");
    assert_eq!(
        walk(&fs, "only/f").unwrap().entry_timeout.as_secs(),
        100_000
    );
}

#[test]
fn an_all_static_union_caches_missing_names_and_its_root() {
    let (_upper, base) = layers();
    let other = tempfile::tempdir().unwrap();
    fs::write(other.path().join("extra"), b"x").unwrap();
    let fs = union_with(
        &[(base.path(), "RO,static"), (other.path(), "RO,static")],
        "",
    );
    // Nothing but the guest adds names: a negative entry for a day.
    let e = fs.lookup(&ctx(), ROOT_ID, &c("nope")).unwrap();
    assert_eq!((e.inode, e.entry_timeout), (0, DAY));
    // The root, merged only across static branches, is static too.
    assert_eq!(
        dir_open(&fs, ""),
        OpenOptions::CACHE_DIR | OpenOptions::KEEP_CACHE
    );
    assert_eq!(windows(&fs, "extra"), (DAY, DAY, DAY));
}
