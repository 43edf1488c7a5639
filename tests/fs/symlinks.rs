//! follow-symlinks (always confined to the branch), link_cow and symlinkify on real directories.

use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

use testkit::calls::Calls;
use testkit::errno::errno_of;
use testkit::fsharness::*;
use union_virtiofsd::fs::ROOT_ID;

#[test]
fn follow_symlinks_modes_stay_inside_the_branch() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    fs::create_dir(p.join("real")).unwrap();
    fs::write(p.join("real/f"), "inside").unwrap();
    symlink("real", p.join("to_dir")).unwrap();
    symlink("real/f", p.join("to_file")).unwrap();
    // An absolute target is resolved as if the branch were the root: /real/f inside the branch.
    symlink("/real/f", p.join("abs")).unwrap();
    // Climbing out is clamped at the branch root too.
    symlink("../../../../etc/hostname", p.join("climb")).unwrap();
    let kind = |opts: &str, name: &str| {
        let fs = union_with(&[(p, "RW")], opts);
        walk(&fs, name).map(|e| e.attr.st_mode & libc::S_IFMT)
    };
    let (dir, reg, lnk) = (libc::S_IFDIR, libc::S_IFREG, libc::S_IFLNK);
    assert_eq!(kind("follow-symlinks=never", "to_dir").unwrap(), lnk);
    assert_eq!(kind("follow-symlinks=directory", "to_dir").unwrap(), dir);
    assert_eq!(kind("follow-symlinks=directory", "to_file").unwrap(), lnk);
    assert_eq!(kind("follow-symlinks=regular", "to_file").unwrap(), reg);
    assert_eq!(kind("follow-symlinks=regular", "to_dir").unwrap(), lnk);
    assert_eq!(kind("follow-symlinks=all", "abs").unwrap(), reg);
    // /etc/hostname exists on the host, but not inside the branch: stays a symlink.
    assert_eq!(kind("follow-symlinks=all", "climb").unwrap(), lnk);

    let fs = union_with(&[(p, "RW")], "follow-symlinks=all");
    assert_eq!(
        read_file(&fs, walk(&fs, "abs").unwrap().inode).unwrap(),
        b"inside"
    );
    assert_eq!(
        read_file(&fs, walk(&fs, "to_dir/f").unwrap().inode).unwrap(),
        b"inside"
    );
    let names: Vec<_> = list(&fs, walk(&fs, "to_dir").unwrap().inode)
        .into_iter()
        .map(|x| x.0)
        .collect();
    assert_eq!(names, [".", "..", "f"]);
    // Without following, paths through a symlink do not resolve at all.
    let fs = union_with(&[(p, "RW")], "follow-symlinks=never");
    assert!(walk(&fs, "to_dir/f").is_err());
}

#[test]
fn link_cow_breaks_hard_links_on_write_open() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    fs::write(p.join("orig"), "shared").unwrap();
    fs::hard_link(p.join("orig"), p.join("alias")).unwrap();
    fs::write(p.join(".alias.link_cow"), "keep").unwrap();
    let fs = union_with(&[(p, "RW")], "link_cow=true");
    let a = walk(&fs, "alias").unwrap();
    // A read-only open leaves the link alone.
    let (fh, _, _) = fs.open(&ctx(), a.inode, libc::O_RDONLY as u32, 0).unwrap();
    fs.release(&ctx(), a.inode, 0, fh.unwrap(), false, false, None)
        .unwrap();
    assert_eq!(fs::metadata(p.join("orig")).unwrap().nlink(), 2);
    let (fh, _, _) = fs.open(&ctx(), a.inode, libc::O_WRONLY as u32, 0).unwrap();
    let w = &mut SliceReader(b"CHANGED".to_vec(), 0);
    fs.write(&ctx(), a.inode, fh.unwrap(), w, 7, 0, None, false, 0, 0)
        .unwrap();
    fs.release(&ctx(), a.inode, 0, fh.unwrap(), false, false, None)
        .unwrap();
    assert_eq!(fs::read(p.join("orig")).unwrap(), b"shared");
    assert_eq!(fs::read(p.join("alias")).unwrap(), b"CHANGED");
    // The copy went through a fresh temporary: a guest file that looks like one is untouched,
    // and nothing is left behind.
    assert_eq!(fs::read(p.join(".alias.link_cow")).unwrap(), b"keep");
    let leftovers: Vec<_> = fs::read_dir(p)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".uvfs."))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert_eq!(fs::metadata(p.join("orig")).unwrap().nlink(), 1);
    // Without the option the write goes through both names.
    fs::hard_link(p.join("orig"), p.join("alias2")).unwrap();
    let fs = union_with(&[(p, "RW")], "link_cow=false");
    let a = walk(&fs, "alias2").unwrap();
    let (fh, _, _) = fs.open(&ctx(), a.inode, libc::O_WRONLY as u32, 0).unwrap();
    let w = &mut SliceReader(b"BOTH".to_vec(), 0);
    fs.write(&ctx(), a.inode, fh.unwrap(), w, 4, 0, None, false, 0, 0)
        .unwrap();
    assert_eq!(&fs::read(p.join("orig")).unwrap()[..4], b"BOTH");
}

#[test]
fn symlinkify_shows_old_unwritable_files_as_links_to_their_host_path() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    fs::write(p.join("old"), "x").unwrap();
    fs::write(p.join("writable"), "x").unwrap();
    fs::set_permissions(p.join("old"), fs::Permissions::from_mode(0o444)).unwrap();
    // ctime cannot be set back, so the timeout is what makes these files "old enough".
    let fs = union_with(&[(p, "RW")], "symlinkify=true,symlinkify_timeout=0");
    let target = format!("{}/old", p.display());
    let old = walk(&fs, "old").unwrap();
    // Files changed within the current second are not yet older than 0 s: wait out the second
    // by polling the clock (a condition, not a fixed sleep).
    let start = std::time::SystemTime::now();
    let mut old = old;
    while old.attr.st_mode & libc::S_IFMT != libc::S_IFLNK {
        assert!(
            start.elapsed().unwrap().as_secs() < 3,
            "symlinkify never applied"
        );
        fs.forget(&ctx(), old.inode, 1);
        old = walk(&fs, "old").unwrap();
    }
    assert_eq!(old.attr.st_size as usize, target.len());
    assert_eq!(fs.readlink(&ctx(), old.inode).unwrap(), target.as_bytes());
    assert_eq!(
        walk(&fs, "writable").unwrap().attr.st_mode & libc::S_IFMT,
        libc::S_IFREG
    );
    let fs = union_with(&[(p, "RW")], "symlinkify=true,symlinkify_timeout=3600");
    assert_eq!(
        walk(&fs, "old").unwrap().attr.st_mode & libc::S_IFMT,
        libc::S_IFREG
    );
}

/// A symlink shown as a directory (follow-symlinks) must not let a rename make a directory its
/// own ancestor: the node table refuses it (EINVAL), nothing moves on the host, and every path
/// walk still ends (getattr, lookup and a listing keep answering).
#[test]
fn a_rename_never_makes_a_directory_its_own_ancestor() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    fs::create_dir_all(p.join("t/inner")).unwrap();
    symlink("t", p.join("s")).unwrap();
    let fs = union_with(&[(p, "RW")], "follow-symlinks=directory,minfreespace=0");
    let t = walk(&fs, "t").unwrap();
    let s = walk(&fs, "s").unwrap();
    let inner = walk(&fs, "s/inner").unwrap();
    assert_eq!(s.attr.st_mode & libc::S_IFMT, libc::S_IFDIR);
    // Move t into what is t itself seen through s, or into its own child.
    for (newdir, what) in [(s.inode, "s"), (inner.inode, "s/inner"), (t.inode, "t")] {
        assert_eq!(
            errno_of(fs.rename(&ctx(), ROOT_ID, &c("t"), newdir, &c("loop"), 0)),
            libc::EINVAL,
            "rename t into {what}"
        );
    }
    assert!(p.join("t/inner").is_dir() && !p.join("t/loop").exists());
    // The daemon keeps serving and every walk ends.
    fs.getattr(&ctx(), inner.inode, None).unwrap();
    walk(&fs, "t/inner").unwrap();
    walk(&fs, "s/inner").unwrap();
    assert!(list(&fs, s.inode).iter().any(|(n, _)| n == "inner"));
}
