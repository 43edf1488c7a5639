//! mergerfs options through the `FileSystem` trait on real filesystems: create policies on
//! tmpfs branches of different sizes, minfreespace, path cloning, per-function policies,
//! statfs modes, cache flags, negative entries, nullrw, xattr modes, inodecalc.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use fuse_backend_rs::abi::fuse_abi::OpenOptions;
use fuse_backend_rs::api::filesystem::{GetxattrReply, ListxattrReply};
use testkit::calls::Calls;
use testkit::errno::errno_of;
use testkit::fsharness::*;
use testkit::tmpfs::Tmpfs;
use union_virtiofsd::fs::ROOT_ID;

/// Three tmpfs branches: 16M, 64M, 32M, so each space policy has one answer.
fn three() -> [Tmpfs; 3] {
    [Tmpfs::new("16M"), Tmpfs::new("64M"), Tmpfs::new("32M")]
}

fn paths(t: &[Tmpfs; 3]) -> [&Path; 3] {
    [t[0].path(), t[1].path(), t[2].path()]
}

fn holder(t: &[Tmpfs; 3], rel: &str) -> Vec<usize> {
    (0..3).filter(|&i| t[i].path().join(rel).exists()).collect()
}

#[test]
fn create_policies_place_files_by_space() {
    let t = three();
    let [a, b, c] = paths(&t);
    let rw = [(a, "RW"), (b, "RW"), (c, "RW")];
    // Each file placed changes the next answer: after ff and lfs put files on the 16M branch
    // and mfs one on the 64M branch, the 32M branch has the least used space.
    for (policy, want) in [("ff", 0), ("mfs", 1), ("lfs", 0), ("lus", 2)] {
        let fs = union_with(&rw, &format!("category.create={policy},minfreespace=0"));
        let name = format!("f-{policy}");
        create_file(&fs, ROOT_ID, &name, b"x").unwrap();
        assert_eq!(holder(&t, &name), [want], "{policy}");
    }
    // lfs skips the smallest branch once it is below minfreespace: 16M < 20M.
    let fs = union_with(&rw, "category.create=lfs,minfreespace=20M");
    create_file(&fs, ROOT_ID, "g", b"x").unwrap();
    assert_eq!(holder(&t, "g"), [2]);
    // ...and a per-branch value overrides the global one.
    let spec = [(a, "RW,1M"), (b, "RW"), (c, "RW")];
    let fs = union_with(&spec, "category.create=lfs,minfreespace=20M");
    create_file(&fs, ROOT_ID, "h", b"x").unwrap();
    assert_eq!(holder(&t, "h"), [0]);
    // Every branch under minfreespace: ENOSPC. Only RO/NC left: EROFS.
    let fs = union_with(&rw, "category.create=mfs,minfreespace=1G");
    assert_eq!(errno_of(create_file(&fs, ROOT_ID, "i", b"x")), libc::ENOSPC);
    let fs = union_with(&[(a, "RO"), (b, "NC"), (c, "RO")], "category.create=mfs");
    assert_eq!(errno_of(create_file(&fs, ROOT_ID, "j", b"x")), libc::EROFS);
}

#[test]
fn pfrd_is_the_default_and_only_picks_qualifying_branches() {
    let t = three();
    let [a, b, c] = paths(&t);
    // The 16M branch is under minfreespace and the 32M one is RO: every file lands on b.
    let fs = union_with(&[(a, "RW"), (b, "RW"), (c, "RO")], "minfreespace=20M");
    for i in 0..20 {
        create_file(&fs, ROOT_ID, &format!("p{i}"), b"x").unwrap();
        assert_eq!(holder(&t, &format!("p{i}")), [1]);
    }
}

#[test]
fn non_path_preserving_create_clones_the_parent_path() {
    let t = three();
    let [a, b, c] = paths(&t);
    fs::create_dir_all(a.join("x/y/z")).unwrap();
    fs::set_permissions(a.join("x/y"), fs::Permissions::from_mode(0o750)).unwrap();
    xattr_set(&a.join("x/y"), "user.tag", b"kept");
    let fs = union_with(
        &[(a, "RW"), (b, "RW"), (c, "RW")],
        "category.create=mfs,minfreespace=0",
    );
    let z = walk(&fs, "x/y/z").unwrap();
    create_file(&fs, z.inode, "new", b"data").unwrap();
    assert_eq!(fs::read(b.join("x/y/z/new")).unwrap(), b"data");
    let m = fs::metadata(b.join("x/y")).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o750);
    assert_eq!(
        m.modified().unwrap(),
        fs::metadata(a.join("x/y")).unwrap().modified().unwrap()
    );
    assert_eq!(xattr_get(&b.join("x/y"), "user.tag"), b"kept");
    // A path-preserving policy never clones: with the parent only on a, the file goes there.
    let fs = union_with(
        &[(a, "RW"), (b, "RW"), (c, "RW")],
        "category.create=epmfs,minfreespace=0",
    );
    let z = walk(&fs, "x/y/z").unwrap();
    create_file(&fs, z.inode, "pp", b"1").unwrap();
    assert_eq!(
        holder(&t, "x/y/z/pp"),
        [1],
        "b now has x/y/z (cloned above) and the most space"
    );
    assert!(!c.join("x").exists());
}

#[test]
fn per_function_policies_override_the_category() {
    let t = three();
    let [a, b, c] = paths(&t);
    let fs = union_with(
        &[(a, "RW"), (b, "RW"), (c, "RW")],
        "category.create=mfs,func.mkdir=lfs,minfreespace=0",
    );
    fs.mkdir(&ctx(), ROOT_ID, &c_str("d"), 0o755, 0).unwrap();
    create_file(&fs, ROOT_ID, "f", b"x").unwrap();
    assert_eq!(holder(&t, "d"), [0]);
    assert_eq!(holder(&t, "f"), [1]);
    // all: mkdir on every qualifying branch.
    let fs = union_with(
        &[(a, "RW"), (b, "RO"), (c, "RW")],
        "func.mkdir=all,minfreespace=0",
    );
    fs.mkdir(&ctx(), ROOT_ID, &c_str("every"), 0o755, 0)
        .unwrap();
    assert_eq!(holder(&t, "every"), [0, 2]);
    // erofs: nothing may be created.
    let fs = union_with(&[(a, "RW")], "category.create=erofs");
    assert_eq!(
        errno_of(fs.mkdir(&ctx(), ROOT_ID, &c_str("no"), 0o755, 0)),
        libc::EROFS
    );
    // func.unlink=epff removes only the first copy.
    fs::write(a.join("dup"), "1").unwrap();
    fs::write(c.join("dup"), "3").unwrap();
    let fs = union_with(&[(a, "RW"), (b, "RW"), (c, "RW")], "func.unlink=epff");
    fs.unlink(&ctx(), ROOT_ID, &c_str("dup")).unwrap();
    assert_eq!(holder(&t, "dup"), [2]);
}

fn c_str(s: &str) -> std::ffi::CString {
    c(s)
}

fn xattr_set(p: &Path, k: &str, v: &[u8]) {
    rustix::fs::setxattr(p, k, v, rustix::fs::XattrFlags::empty()).unwrap();
}

fn xattr_get(p: &Path, k: &str) -> Vec<u8> {
    let mut buf = vec![0u8; 256];
    let n = rustix::fs::getxattr(p, k, &mut buf[..]).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn statfs_full_and_ignore() {
    let t = three();
    let [a, b, c] = paths(&t);
    fs::create_dir(a.join("only_a")).unwrap();
    let spec = [(a, "RW"), (b, "RO"), (c, "NC")];
    let total = |fs: &union_virtiofsd::fs::UnionFs, ino| {
        let st = fs.statfs(&ctx(), ino).unwrap();
        (
            (st.f_blocks * st.f_frsize) >> 20,
            (st.f_bavail * st.f_frsize) >> 20,
        )
    };
    let base = union_with(&spec, "statfs=base");
    let d = walk(&base, "only_a").unwrap().inode;
    assert_eq!(total(&base, d), (112, 112));
    let full = union_with(&spec, "statfs=full");
    let d = walk(&full, "only_a").unwrap().inode;
    assert_eq!(total(&full, d), (16, 16));
    assert_eq!(total(&full, ROOT_ID), (112, 112));
    let ro = union_with(&spec, "statfs-ignore=ro");
    assert_eq!(total(&ro, ROOT_ID), (112, 16));
    let nc = union_with(&spec, "statfs_ignore=nc");
    assert_eq!(total(&nc, ROOT_ID), (112, 80));
}

#[test]
fn cache_flags_negative_entries_and_nullrw() {
    let d = tempfile::tempdir().unwrap();
    fs::write(d.path().join("f"), b"contents").unwrap();
    let br = [(d.path(), "RW")];
    let open = |opts: &str| {
        let fs = union_with(&br, opts);
        let f = walk(&fs, "f").unwrap();
        let (_, o1, _) = fs.open(&ctx(), f.inode, 0, 0).unwrap();
        let (_, o2, _) = fs.open(&ctx(), f.inode, 0, 0).unwrap();
        (o1, o2)
    };
    assert_eq!(open(""), (OpenOptions::empty(), OpenOptions::empty()));
    assert_eq!(open("cache.files=off").0, OpenOptions::DIRECT_IO);
    assert_eq!(open("direct_io").0, OpenOptions::DIRECT_IO);
    assert_eq!(open("cache.files=full").0, OpenOptions::KEEP_CACHE);
    // auto-full: the first open drops the cache, a second one with the file unchanged keeps it.
    assert_eq!(
        open("cache.files=auto-full"),
        (OpenOptions::empty(), OpenOptions::KEEP_CACHE)
    );

    let fs = union_with(&br, "cache.negative-entry=5");
    let e = fs.lookup(&ctx(), ROOT_ID, &c("missing")).unwrap();
    assert_eq!((e.inode, e.entry_timeout.as_secs()), (0, 5));
    let fs = union_with(&br, "");
    assert_eq!(
        errno_of(fs.lookup(&ctx(), ROOT_ID, &c("missing"))),
        libc::ENOENT
    );

    let fs = union_with(&br, "nullrw=true");
    let f = walk(&fs, "f").unwrap();
    let (fh, _, _) = fs.open(&ctx(), f.inode, libc::O_RDWR as u32, 0).unwrap();
    let fh = fh.unwrap();
    let n = fs
        .write(
            &ctx(),
            f.inode,
            fh,
            &mut SliceReader(b"XXXXXXXX".to_vec(), 0),
            8,
            0,
            None,
            false,
            0,
            0,
        )
        .unwrap();
    assert_eq!(n, 8);
    assert_eq!(
        fs::read(d.path().join("f")).unwrap(),
        b"contents",
        "nullrw never writes"
    );
    let mut w = VecWriter::default();
    assert_eq!(
        fs.read(&ctx(), f.inode, fh, &mut w, 4096, 0, None, 0)
            .unwrap(),
        4096
    );
    assert!(w.0.is_empty(), "nullrw never reads");
}

#[test]
fn xattr_modes() {
    let d = tempfile::tempdir().unwrap();
    fs::write(d.path().join("f"), b"").unwrap();
    xattr_set(&d.path().join("f"), "user.k", b"v");
    let br = [(d.path(), "RW")];
    let fs = union_with(&br, "xattr=noattr");
    let f = walk(&fs, "f").unwrap().inode;
    assert_eq!(
        errno_of(fs.getxattr(&ctx(), f, &c("user.k"), 64)),
        libc::ENODATA
    );
    assert!(matches!(
        fs.listxattr(&ctx(), f, 0).unwrap(),
        ListxattrReply::Count(0)
    ));
    assert_eq!(
        errno_of(fs.setxattr(&ctx(), f, &c("user.n"), b"v", 0)),
        libc::ENOTSUP
    );
    let fs = union_with(&br, "xattr=nosys");
    let f = walk(&fs, "f").unwrap().inode;
    assert_eq!(
        errno_of(fs.getxattr(&ctx(), f, &c("user.k"), 64)),
        libc::ENOSYS
    );
    let fs = union_with(&br, "xattr=passthrough");
    let f = walk(&fs, "f").unwrap().inode;
    assert!(
        matches!(fs.getxattr(&ctx(), f, &c("user.k"), 64).unwrap(), GetxattrReply::Value(v) if v == b"v")
    );
}

#[test]
fn inodecalc_modes() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    fs::write(a.path().join("f"), b"").unwrap();
    fs::create_dir(a.path().join("d")).unwrap();
    fs::create_dir(b.path().join("d")).unwrap();
    let host_ino = fs::metadata(a.path().join("f")).unwrap().ino();
    let br = [(a.path(), "RW"), (b.path(), "RW")];
    let ino = |opts: &str, p: &str| walk(&union_with(&br, opts), p).unwrap().attr.st_ino;
    use std::os::unix::fs::MetadataExt;
    assert_eq!(ino("inodecalc=passthrough", "f"), host_ino);
    assert_ne!(ino("inodecalc=devino-hash", "f"), host_ino);
    assert!(ino("inodecalc=devino-hash32", "f") <= u64::from(u32::MAX));
    assert!(ino("inodecalc=path-hash32", "d") <= u64::from(u32::MAX));
    // path-hash depends only on the path; hybrid uses it for directories only.
    assert_eq!(
        ino("inodecalc=path-hash", "d"),
        ino("inodecalc=hybrid-hash", "d")
    );
    assert_ne!(
        ino("inodecalc=path-hash", "f"),
        ino("inodecalc=hybrid-hash", "f")
    );
    assert_eq!(
        ino("inodecalc=devino-hash", "f"),
        ino("inodecalc=hybrid-hash", "f")
    );
}

#[test]
fn dropcacheonclose_drops_the_host_page_cache() {
    // A real disk filesystem (not tmpfs, whose pages are its storage).
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    fs::write(d.path().join("f"), vec![7u8; 1 << 20]).unwrap();
    rustix::fs::fsync(fs::File::open(d.path().join("f")).unwrap()).unwrap();
    let resident = || {
        let out = std::process::Command::new("fincore")
            .args(["--noheadings", "--raw", "--output", "PAGES"])
            .arg(d.path().join("f"))
            .output()
            .expect("fincore from util-linux");
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    for (opts, dropped) in [
        ("dropcacheonclose=false", false),
        ("dropcacheonclose=true", true),
    ] {
        let fs = union_with(&[(d.path(), "RW")], opts);
        let f = walk(&fs, "f").unwrap().inode;
        assert_eq!(read_file(&fs, f).unwrap().len(), 1 << 20);
        assert_eq!(resident() == 0, dropped, "{opts}");
    }
}

fn write_at(
    fs: &union_virtiofsd::fs::UnionFs,
    ino: u64,
    fh: u64,
    data: &[u8],
    off: u64,
) -> std::io::Result<usize> {
    let r = &mut SliceReader(data.to_vec(), 0);
    fs.write(
        &ctx(),
        ino,
        fh,
        r,
        data.len() as u32,
        off,
        None,
        false,
        0,
        0,
    )
}

#[test]
fn moveonenospc_moves_the_file_and_loses_no_byte() {
    let small = Tmpfs::new("1M");
    let big = Tmpfs::new("16M");
    let (a, b) = (small.path(), big.path());
    fs::create_dir(a.join("dir")).unwrap();
    fs::set_permissions(a.join("dir"), fs::Permissions::from_mode(0o711)).unwrap();
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i * 7 % 251) as u8).collect();
    let chunk = 256 << 10;

    // Without the option the full branch answers ENOSPC.
    let fs = union_with(&[(a, "RW"), (b, "RW")], "category.create=ff,minfreespace=0");
    let dir = walk(&fs, "dir").unwrap();
    let e = create_file(&fs, dir.inode, "plain", b"").unwrap();
    let (fh, _, _) = fs.open(&ctx(), e.inode, libc::O_WRONLY as u32, 0).unwrap();
    let res: Result<Vec<_>, _> = data
        .chunks(chunk)
        .enumerate()
        .map(|(i, c)| write_at(&fs, e.inode, fh.unwrap(), c, (i * chunk) as u64))
        .collect();
    assert_eq!(errno_of(res), libc::ENOSPC);
    fs.release(&ctx(), e.inode, 0, fh.unwrap(), false, false, None)
        .unwrap();
    fs.unlink(&ctx(), dir.inode, &c("plain")).unwrap();

    let fs = union_with(
        &[(a, "RW"), (b, "RW")],
        "category.create=ff,minfreespace=0,moveonenospc=mfs",
    );
    let dir = walk(&fs, "dir").unwrap();
    let e = create_file(&fs, dir.inode, "big", b"").unwrap();
    assert!(
        a.join("dir/big").exists(),
        "ff puts it on the small branch first"
    );
    let (fh, _, _) = fs.open(&ctx(), e.inode, libc::O_WRONLY as u32, 0).unwrap();
    let fh = fh.unwrap();
    for (i, c) in data.chunks(chunk).enumerate() {
        assert_eq!(
            write_at(&fs, e.inode, fh, c, (i * chunk) as u64).unwrap(),
            c.len()
        );
    }
    fs.release(&ctx(), e.inode, 0, fh, false, false, None)
        .unwrap();
    assert!(!a.join("dir/big").exists(), "the original is gone");
    assert_eq!(
        fs::read(b.join("dir/big")).unwrap(),
        data,
        "every byte arrived, in order"
    );
    let m = fs::metadata(b.join("dir")).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o711, "parent path cloned");
    assert_eq!(read_file(&fs, e.inode).unwrap().len(), data.len());
}

/// The move copies the file behind the handle, never whatever now sits at its path: a host
/// device node swapped in under the file's name is neither read nor removed.
#[test]
fn moveonenospc_copies_the_handles_own_file_not_its_path() {
    let small = Tmpfs::new("1M");
    let big = Tmpfs::new("16M");
    let (a, b) = (small.path(), big.path());
    let fs = union_with(
        &[(a, "RW"), (b, "RW")],
        "category.create=ff,minfreespace=0,moveonenospc=mfs",
    );
    let e = create_file(&fs, ROOT_ID, "f", b"").unwrap();
    let (fh, _, _) = fs.open(&ctx(), e.inode, libc::O_WRONLY as u32, 0).unwrap();
    let fh = fh.unwrap();
    let head: Vec<u8> = (0..600u32 << 10).map(|i| (i % 253) as u8).collect();
    assert_eq!(write_at(&fs, e.inode, fh, &head, 0).unwrap(), head.len());
    // The path and the handle drift apart: the file is renamed away on the host and a
    // device node (/dev/null's numbers) takes its name.
    fs::rename(a.join("f"), a.join("elsewhere")).unwrap();
    let ok = std::process::Command::new("mknod")
        .arg(a.join("f"))
        .args(["c", "1", "3"])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    // Fill the small branch: the next write fails with ENOSPC and triggers the move.
    let tail: Vec<u8> = vec![7u8; 600 << 10];
    assert_eq!(
        write_at(&fs, e.inode, fh, &tail, head.len() as u64).unwrap(),
        tail.len()
    );
    fs.release(&ctx(), e.inode, 0, fh, false, false, None)
        .unwrap();
    let moved = fs::read(b.join("f")).unwrap();
    assert_eq!(moved.len(), head.len() + tail.len());
    assert!(
        moved[..head.len()] == head[..],
        "the handle's own data was copied"
    );
    use std::os::unix::fs::FileTypeExt;
    assert!(
        fs::symlink_metadata(a.join("f"))
            .unwrap()
            .file_type()
            .is_char_device(),
        "the device node that took the name is left alone"
    );
}

/// The size a guest names for GETXATTR/LISTXATTR is capped before anything is allocated
/// (4 GiB asked, the value still comes back whole).
#[test]
fn xattr_sizes_from_the_guest_are_capped() {
    let d = tempfile::tempdir().unwrap();
    fs::write(d.path().join("f"), "x").unwrap();
    let value = vec![b'v'; 3000];
    xattr_set(&d.path().join("f"), "user.big", &value);
    let fs = union_with(&[(d.path(), "RW")], "minfreespace=0");
    let f = walk(&fs, "f").unwrap();
    match fs
        .getxattr(&ctx(), f.inode, &c("user.big"), u32::MAX)
        .unwrap()
    {
        GetxattrReply::Value(v) => assert!(v == value),
        GetxattrReply::Count(n) => panic!("expected the value, got a count {n}"),
    }
    match fs.listxattr(&ctx(), f.inode, u32::MAX).unwrap() {
        ListxattrReply::Names(n) => assert_eq!(n, b"user.big\0"),
        ListxattrReply::Count(n) => panic!("expected names, got a count {n}"),
    }
}

/// This process's descriptors that refer to `path` (by number).
fn fds_on(path: &Path) -> Vec<String> {
    fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter(|e| fs::read_link(e.path()).ok().as_deref() == Some(path))
        .map(|e| e.file_name().into_string().unwrap())
        .collect()
}

/// The descriptors this process holds for `path` that were not in `before` (from
/// [`fds_on`]), with their open flags from /proc/self/fdinfo (O_PATH node descriptors left
/// out).
fn new_fd_flags(path: &Path, before: &[String]) -> Vec<u32> {
    let mut out = Vec::new();
    for name in fds_on(path) {
        if before.contains(&name) {
            continue;
        }
        let Ok(info) = fs::read_to_string(format!("/proc/self/fdinfo/{name}")) else {
            continue;
        };
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .map(|f| u32::from_str_radix(f.trim(), 8).unwrap())
            .unwrap();
        if flags & libc::O_PATH as u32 == 0 {
            out.push(flags);
        }
    }
    out
}

/// `--preserve-noatime` (virtiofsd's meaning): the guest's O_NOATIME reaches the host
/// descriptor only when asked for; by default it is dropped.
#[test]
fn o_noatime_is_dropped_unless_preserved() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("f");
    fs::write(&file, b"x").unwrap();
    for preserve in [false, true] {
        let opts = union_virtiofsd::fs::options::UnionOptions {
            preserve_noatime: preserve,
            ..Default::default()
        };
        let branch = format!("{}=RW", d.path().display()).parse().unwrap();
        let fs = union_virtiofsd::fs::UnionFs::new(union_virtiofsd::fs::FsConfig {
            branches: vec![branch],
            opts,
            ids: Default::default(),
        })
        .unwrap();
        let e = walk(&fs, "f").unwrap();
        let before = fds_on(&file);
        let flags = (libc::O_RDONLY | libc::O_NOATIME) as u32;
        let (fh, _, _) = fs.open(&ctx(), e.inode, flags, 0).unwrap();
        let opened = new_fd_flags(&file, &before);
        assert_eq!(opened.len(), 1, "{opened:?}");
        let noatime = opened[0] & libc::O_NOATIME as u32 != 0;
        assert_eq!(noatime, preserve, "flags {:o}", opened[0]);
        fs.release(&ctx(), e.inode, 0, fh.unwrap(), false, false, None)
            .unwrap();
    }
}
