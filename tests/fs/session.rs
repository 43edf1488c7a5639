//! The session moving between two filesystem instances over the same branch, as a migration
//! moves it between two daemons (without the VM: `tests/guest/migration.rs` does it with QEMU):
//! nodes, open files and directory listings, hard links, POSIX and flock locks (the source
//! lets go, the destination takes them again, as the host sees in /proc/locks), and what
//! happens to what cannot be found again: `abort` refuses and leaves nothing behind,
//! `guest-error` answers EIO for that file only.

use fuse_backend_rs::abi::fuse_abi::FileLock;
use fuse_backend_rs::api::filesystem::DirEntry;
use testkit::calls::Calls;
use testkit::errno::errno_of;
use testkit::fsharness::{c, create_file, ctx, union, walk, VecWriter};
use testkit::hostlocks;
use union_virtiofsd::fs::session::{ExportOptions, FindBy, OnError, Sessions};
use union_virtiofsd::fs::ROOT_ID;

fn opts(find_by: FindBy) -> ExportOptions {
    ExportOptions {
        handles_allowed: true,
        find_by,
        verify_handles: false,
        confirm_paths: false,
    }
}

fn lock(fs: &impl Calls, inode: u64, fh: u64, owner: u64, flock: bool) -> std::io::Result<()> {
    let lk = FileLock {
        start: 0,
        end: u64::MAX >> 1,
        type_: libc::F_WRLCK as u32,
        pid: 42,
    };
    fs.lock_set(&ctx(), inode, fh, owner, lk, flock, false, &|| None)
}

fn read_at(fs: &impl Calls, inode: u64, fh: u64) -> Vec<u8> {
    let mut w = VecWriter::default();
    fs.read(&ctx(), inode, fh, &mut w, 4096, 0, None, 0)
        .unwrap();
    w.0
}

#[test]
fn session_moves_with_its_files_listings_and_locks() {
    let dir = tempfile::tempdir().unwrap();
    let b = dir.path();
    let src = union(&[(b, "RW")]);
    let d = src.mkdir(&ctx(), ROOT_ID, &c("d"), 0o755, 0).unwrap();
    for name in ["a", "b", "c"] {
        create_file(&src, d.inode, name, name.as_bytes()).unwrap();
    }
    let a = walk(&src, "d/a").unwrap();
    src.link(&ctx(), a.inode, ROOT_ID, &c("a-link")).unwrap();
    let (fh, _, _) = src.open(&ctx(), a.inode, libc::O_RDWR as u32, 0).unwrap();
    let fh = fh.unwrap();
    let (dh, _) = src.opendir(&ctx(), d.inode, 0).unwrap();
    let dh = dh.unwrap();
    // Read two entries of the listing; the rest is read after the move.
    let mut first = Vec::new();
    src.readdir(&ctx(), d.inode, dh, 4096, 0, &mut |e: DirEntry| {
        first.push(e.name.to_vec());
        if first.len() == 2 {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        Ok(1)
    })
    .ok();
    lock(&src, a.inode, fh, 7, false).unwrap();
    let host_file = b.join("d/a");
    assert_eq!(hostlocks::locks_on_file(&host_file).len(), 1);

    let image = src.export(opts(FindBy::Paths));
    let n = src.release_host_locks();
    assert_eq!(n, 1);
    assert!(
        hostlocks::locks_on_file(&host_file).is_empty(),
        "the source let go"
    );

    let dst = union(&[(b, "RW")]);
    let done = dst.import(image.clone(), OnError::Abort).unwrap();
    assert_eq!((done.handles, done.locks, done.lost), (2, 1, 0));
    assert_eq!(dst.inode_count(), src.inode_count());
    assert_eq!(
        hostlocks::locks_on_file(&host_file).len(),
        1,
        "the destination holds it"
    );
    // The same node ids, the open file, the hard link as one node, the listing's offsets.
    assert_eq!(read_at(&dst, a.inode, fh), b"a");
    assert_eq!(
        dst.lookup(&ctx(), ROOT_ID, &c("a-link")).unwrap().inode,
        a.inode
    );
    let mut rest = Vec::new();
    dst.readdir(&ctx(), d.inode, dh, 4096, 2, &mut |e: DirEntry| {
        rest.push(e.name.to_vec());
        Ok(1)
    })
    .unwrap();
    assert_eq!(first.len() + rest.len(), 5, "., .., a, b, c once each");
    // The lock is the guest owner's on the destination: another owner is refused.
    let (fh2, _, _) = dst.open(&ctx(), a.inode, libc::O_RDWR as u32, 0).unwrap();
    let e = lock(&dst, a.inode, fh2.unwrap(), 8, false).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));

    // Had the move failed, the source would take its lock back: not while it is held.
    assert_eq!(src.retake_host_locks(), 1, "held by the destination now");
    drop(dst);
    let src2 = union(&[(b, "RW")]);
    src2.import(image, OnError::Abort).unwrap();
    assert_eq!(hostlocks::locks_on_file(&host_file).len(), 1);
}

#[test]
fn what_cannot_be_found_again_aborts_or_gives_eio() {
    let dir = tempfile::tempdir().unwrap();
    let b = dir.path();
    let src = union(&[(b, "RW")]);
    create_file(&src, ROOT_ID, "keep", b"k").unwrap();
    let gone = create_file(&src, ROOT_ID, "gone", b"g").unwrap();
    let keep = walk(&src, "keep").unwrap();
    let (fh, _, _) = src
        .open(&ctx(), gone.inode, libc::O_RDONLY as u32, 0)
        .unwrap();
    let fh = fh.unwrap();
    let (kh, _, _) = src
        .open(&ctx(), keep.inode, libc::O_RDONLY as u32, 0)
        .unwrap();
    let kh = kh.unwrap();
    lock(&src, keep.inode, kh, 1, true).unwrap();
    let image = src.export(opts(FindBy::Paths));
    src.release_host_locks();
    std::fs::remove_file(b.join("gone")).unwrap();

    let dst = union(&[(b, "RW")]);
    let e = dst.import(image.clone(), OnError::Abort).unwrap_err();
    assert!(e.to_string().contains("(gone)"), "{e}");
    assert_eq!(dst.inode_count(), 1, "nothing stays after a refused import");
    assert!(
        hostlocks::locks_on_file(&b.join("keep")).is_empty(),
        "no lock stays either"
    );

    let done = dst.import(image, OnError::GuestError).unwrap();
    assert_eq!(done.lost, 2, "the node and its open file");
    assert_eq!(read_at(&dst, keep.inode, kh), b"k");
    let mut w = VecWriter::default();
    let e = dst.read(&ctx(), gone.inode, fh, &mut w, 10, 0, None, 0);
    assert_eq!(errno_of(e), libc::EIO);
    assert_eq!(errno_of(dst.getattr(&ctx(), gone.inode, None)), libc::EIO);
    dst.release(&ctx(), gone.inode, 0, fh, false, false, None)
        .unwrap();
    assert_eq!(
        hostlocks::locks_on_file(&b.join("keep")).len(),
        1,
        "the flock moved"
    );
}
