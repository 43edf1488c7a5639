//! File operations through the host mount: the bytes read back, the errno of what must fail,
//! and which branch holds what was made or changed.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use testkit::errno::errno_of;
use testkit::hostmount::HostMount;
use testkit::tmpfs::Tmpfs;

/// The options of a mount over small tmpfs branches (mergerfs's default minfreespace is 4G).
pub const SMALL: &[&str] = &["-o", "minfreespace=1M"];

/// Two branches, `a` empty and `b` holding `b.txt` and `d/in-d`, mounted with `ff` creates
/// (the first branch) so that where a new file lands is known.
fn two_branches() -> (Tmpfs, Tmpfs, HostMount) {
    let (a, b) = (Tmpfs::new("64M"), Tmpfs::new("64M"));
    fs::write(b.path().join("b.txt"), "from b").unwrap();
    fs::create_dir(b.path().join("d")).unwrap();
    fs::write(b.path().join("d/in-d"), "deep").unwrap();
    let m = HostMount::new(
        &[a.path(), b.path()],
        &["-o", "category.create=ff,minfreespace=1M"],
    );
    (a, b, m)
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn reads_and_writes_land_where_the_policies_say() {
    let (a, b, m) = two_branches();
    let p = m.path();
    assert_eq!(fs::read_to_string(p.join("b.txt")).unwrap(), "from b");
    assert_eq!(fs::read_to_string(p.join("d/in-d")).unwrap(), "deep");
    // A new file goes to the first branch; a changed one stays where it is.
    fs::write(p.join("new.txt"), "hello world").unwrap();
    assert_eq!(fs::read(a.path().join("new.txt")).unwrap(), b"hello world");
    assert!(!b.path().join("new.txt").exists());
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(p.join("b.txt"))
        .unwrap();
    f.write_all(b"!").unwrap();
    drop(f);
    assert_eq!(
        fs::read_to_string(b.path().join("b.txt")).unwrap(),
        "from b!"
    );
    assert!(!a.path().join("b.txt").exists());
    // A file in a directory only `b` has: ff clones the directory onto `a`.
    fs::write(p.join("d/made"), "x").unwrap();
    assert!(a.path().join("d/made").is_file());
    assert_eq!(names(&p.join("d")), ["in-d", "made"]);
    fs::create_dir(p.join("m")).unwrap();
    assert!(a.path().join("m").is_dir());
    assert_eq!(names(p), ["b.txt", "d", "m", "new.txt"]);
}

#[test]
fn namespace_changes_and_attributes() {
    let (a, _b, m) = two_branches();
    let p = m.path();
    fs::write(p.join("f"), "0123456789").unwrap();
    std::os::unix::fs::symlink("f", p.join("s")).unwrap();
    assert_eq!(fs::read_link(p.join("s")).unwrap(), Path::new("f"));
    assert_eq!(fs::read_to_string(p.join("s")).unwrap(), "0123456789");
    fs::hard_link(p.join("f"), p.join("h")).unwrap();
    assert_eq!(fs::metadata(p.join("f")).unwrap().nlink(), 2);
    assert_eq!(
        fs::metadata(a.path().join("h")).unwrap().ino(),
        fs::metadata(a.path().join("f")).unwrap().ino()
    );
    fs::set_permissions(p.join("f"), fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(fs::metadata(p.join("f")).unwrap().mode() & 0o7777, 0o640);
    assert_eq!(
        fs::metadata(a.path().join("f")).unwrap().mode() & 0o7777,
        0o640
    );
    fs::OpenOptions::new()
        .write(true)
        .open(p.join("f"))
        .unwrap()
        .set_len(4)
        .unwrap();
    assert_eq!(fs::read_to_string(p.join("h")).unwrap(), "0123");
    fs::rename(p.join("f"), p.join("g")).unwrap();
    assert!(a.path().join("g").is_file() && !a.path().join("f").exists());
    fs::remove_file(p.join("g")).unwrap();
    assert!(!a.path().join("g").exists());
    assert_eq!(fs::metadata(p.join("h")).unwrap().nlink(), 1);
    fs::create_dir(p.join("dir")).unwrap();
    fs::rename(p.join("dir"), p.join("dir2")).unwrap();
    fs::remove_dir(p.join("dir2")).unwrap();
    assert!(!a.path().join("dir2").exists());
}

#[test]
fn failures_carry_the_errno() {
    let (_a, b, m) = two_branches();
    let p = m.path();
    assert_eq!(errno_of(fs::read(p.join("missing"))), libc::ENOENT);
    assert_eq!(errno_of(fs::create_dir(p.join("d"))), libc::EEXIST);
    assert_eq!(errno_of(fs::remove_dir(p.join("d"))), libc::ENOTEMPTY);
    assert_eq!(errno_of(fs::remove_file(p.join("d"))), libc::EISDIR);
    assert_eq!(errno_of(fs::read_dir(p.join("b.txt"))), libc::ENOTDIR);
    assert_eq!(
        errno_of(fs::rename(p.join("d"), p.join("d/in-d/x"))),
        libc::ENOTDIR
    );
    fs::create_dir_all(p.join("e/f")).unwrap();
    assert_eq!(
        errno_of(fs::rename(p.join("e"), p.join("e/f/g"))),
        libc::EINVAL
    );
    assert!(b.path().join("d/in-d").is_file());
}

#[test]
fn a_read_only_branch_gives_erofs() {
    let a = Tmpfs::new("16M");
    fs::write(a.path().join("f"), "ro").unwrap();
    let ro = format!("{}=RO", a.path().display());
    let m = HostMount::new(&[Path::new(&ro)], &[]);
    assert_eq!(fs::read_to_string(m.path().join("f")).unwrap(), "ro");
    assert_eq!(errno_of(fs::write(m.path().join("g"), "x")), libc::EROFS);
    assert_eq!(errno_of(fs::remove_file(m.path().join("f"))), libc::EROFS);
}

#[test]
fn large_reads_and_writes_round_trip() {
    let a = Tmpfs::new("64M");
    let m = HostMount::new(&[a.path()], &["-o", "minfreespace=1M"]);
    let data: Vec<u8> = (0..(5 << 20) + 123)
        .map(|i: u32| (i * 7 % 251) as u8)
        .collect();
    let mut f = fs::File::create(m.path().join("big")).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(fs::read(a.path().join("big")).unwrap(), data);
    let mut f = fs::File::open(m.path().join("big")).unwrap();
    let mut back = Vec::new();
    f.read_to_end(&mut back).unwrap();
    assert!(back == data, "the 5 MiB read back differ");
    let mut tail = [0u8; 100];
    f.seek(SeekFrom::Start(5 << 20)).unwrap();
    f.read_exact(&mut tail).unwrap();
    assert_eq!(&tail[..], &data[5 << 20..(5 << 20) + 100]);
}

/// `rm -rf` of a tree whose directories the kernel opens without OPENDIR (`cache.readdir`
/// with `default_permissions`): it reads each directory while removing what it read and
/// reading the subdirectories, more than the daemon keeps listings for, and it empties the
/// tree (before name-keyed offsets it stopped "Directory not empty" with half of it left).
#[test]
fn a_tree_read_without_opendir_is_removed_whole() {
    let b = Tmpfs::new("64M");
    for i in 0..400 {
        fs::create_dir_all(b.path().join(format!("top/d{i}/sub"))).unwrap();
        fs::write(b.path().join(format!("top/d{i}/f")), "").unwrap();
    }
    let m = HostMount::new(
        &[b.path()],
        &[
            "-o",
            "cache.readdir=true,default_permissions,minfreespace=1M",
            "--log-level",
            "debug",
        ],
    );
    fs::remove_dir_all(m.path().join("top")).unwrap();
    assert!(!b.path().join("top").exists());
    let log = m.log();
    let opendirs = testkit::guest::logged_requests(&log, 27);
    assert_eq!(opendirs, 1, "only the first OPENDIR (ENOSYS): {opendirs}");
}

/// READ requests a rewrite of a 4 MiB file in 8 KiB blocks (read a block, seek back, write
/// it: bonnie++'s rewrite) sends through a mount with `extra` options.
fn reads_of_a_rewrite(extra: &str) -> usize {
    let b = Tmpfs::new("64M");
    fs::write(b.path().join("f"), vec![7u8; 4 << 20]).unwrap();
    let opts = format!("minfreespace=1M{extra}");
    let m = HostMount::new(&[b.path()], &["-o", &opts, "--log-level", "debug"]);
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path().join("f"))
        .unwrap();
    let mut block = vec![0u8; 8192];
    for _ in 0..(4 << 20) / 8192 {
        f.read_exact(&mut block).unwrap();
        f.seek(SeekFrom::Current(-8192)).unwrap();
        f.write_all(&block).unwrap();
    }
    drop(f);
    testkit::guest::logged_requests(&m.log(), 15)
}

/// mergerfs's `cache.auto_inval_data=false`, a host mount's default as mergerfs's: the
/// file's pages stay across the mount's own writes, so a rewrite reads each page once; with
/// FUSE_AUTO_INVAL_DATA (`=true`, the vhost-user daemon's default) each write's new mtime
/// makes the kernel drop them and read the next block again.
#[test]
fn without_auto_inval_data_a_rewrite_reads_each_page_once() {
    let with = reads_of_a_rewrite(",cache.auto_inval_data=true");
    let without = reads_of_a_rewrite("");
    assert!(with >= 256, "READs with AUTO_INVAL_DATA: {with}");
    assert!(without <= 64, "READs without: {without}");
}
