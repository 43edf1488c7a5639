//! Nodes hold their host objects without holding a descriptor each: the union keeps at most
//! `node-fds` node descriptors open and reopens the others by file handle or by path, in each
//! `--inode-file-handles` mode, with their identity unchanged (hard links one node, renames
//! followed, open-unlinked files usable) and ESTALE, never another file, when the object is
//! gone or replaced on the host. Real tmpfs branches, the `FileSystem` impl called directly.

use testkit::alone;
use testkit::calls::Calls;
use testkit::fsharness::*;
use testkit::tmpfs::Tmpfs;
use union_virtiofsd::fs::{UnionFs, ROOT_ID};

const MODES: [&str; 3] = ["never", "prefer", "mandatory"];

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn union_in(t: &Tmpfs, mode: &str) -> UnionFs {
    union_with(
        &[(t.path(), "RW")],
        &format!("minfreespace=0,node-fds=8,inode-file-handles={mode}"),
    )
}

/// (ino, size) as the guest sees them.
fn attr(fs: &UnionFs, node: u64) -> std::io::Result<(u64, i64)> {
    fs.getattr(&ctx(), node, None)
        .map(|(st, _)| (st.st_ino, st.st_size))
}

#[test]
fn a_walk_holds_at_most_node_fds_descriptors_and_every_node_still_answers() {
    // It counts the process's descriptors: no other test may open or close any meanwhile.
    alone::in_own_process(|| {
        let t = Tmpfs::new("16M");
        for d in 0..4 {
            std::fs::create_dir(t.path().join(format!("d{d}"))).unwrap();
            for f in 0..50 {
                std::fs::write(t.path().join(format!("d{d}/f{f}")), vec![b'x'; f]).unwrap();
            }
        }
        for mode in MODES {
            let fs = union_in(&t, mode);
            let before = open_fds();
            let mut seen = Vec::new();
            for d in 0..4 {
                let dir = fs.lookup(&ctx(), ROOT_ID, &c(&format!("d{d}"))).unwrap();
                for f in 0..50 {
                    let e = fs.lookup(&ctx(), dir.inode, &c(&format!("f{f}"))).unwrap();
                    seen.push((e.inode, e.attr.st_ino, f as i64));
                }
            }
            assert_eq!(fs.inode_count(), 1 + 4 + 200, "{mode}");
            assert!(fs.node_fd_count() <= 8, "{mode}: {}", fs.node_fd_count());
            let held = open_fds() - before;
            assert!(
                held <= 8 + 2,
                "{mode}: the walk left {held} descriptors open"
            );
            // Every node answers with its own object, reopened by handle or path: GETATTR, and
            // STATX (which answers from the statx that checked a reopened object).
            for &(node, ino, size) in &seen {
                assert_eq!(attr(&fs, node).unwrap(), (ino, size), "{mode}");
            }
            assert!(fs.node_fd_count() <= 8, "{mode}");
            for &(node, ino, size) in &seen {
                let (st, _, _) = fs.statx(&ctx(), node, None).unwrap();
                assert_eq!((st.st_ino, st.st_size), (ino, size), "{mode}: statx");
            }
            assert!(fs.node_fd_count() <= 8, "{mode}");
        }
    });
}

/// Looks up enough other entries that the table closes `node`'s descriptor.
fn push_out(fs: &UnionFs, t: &Tmpfs) {
    for i in 0..16 {
        let name = format!("filler{i}");
        if !t.path().join(&name).exists() {
            std::fs::write(t.path().join(&name), "").unwrap();
        }
        fs.lookup(&ctx(), ROOT_ID, &c(&name)).unwrap();
    }
}

#[test]
fn identity_survives_closing_hard_links_renames_and_open_unlinked_files() {
    for mode in MODES {
        let t = Tmpfs::new("16M");
        std::fs::write(t.path().join("a"), "hard").unwrap();
        std::fs::hard_link(t.path().join("a"), t.path().join("b")).unwrap();
        std::fs::write(t.path().join("moved"), "mv").unwrap();
        std::fs::write(t.path().join("gone"), "open").unwrap();
        let fs = union_in(&t, mode);
        let a = fs.lookup(&ctx(), ROOT_ID, &c("a")).unwrap();
        let m = fs.lookup(&ctx(), ROOT_ID, &c("moved")).unwrap();
        let g = fs.lookup(&ctx(), ROOT_ID, &c("gone")).unwrap();
        let (fh, _, _) = fs.open(&ctx(), g.inode, libc::O_RDONLY as u32, 0).unwrap();
        push_out(&fs, &t);
        // Hard links: the other name is the same node, closed or not.
        let b = fs.lookup(&ctx(), ROOT_ID, &c("b")).unwrap();
        assert_eq!(b.inode, a.inode, "{mode}");
        // A rename through the union: the node follows.
        push_out(&fs, &t);
        fs.rename(&ctx(), ROOT_ID, &c("moved"), ROOT_ID, &c("renamed"), 0)
            .unwrap();
        push_out(&fs, &t);
        assert_eq!(attr(&fs, m.inode).unwrap().1, 2, "{mode}");
        // Unlinked through the union while open: the node keeps its object.
        push_out(&fs, &t);
        fs.unlink(&ctx(), ROOT_ID, &c("gone")).unwrap();
        push_out(&fs, &t);
        assert_eq!(attr(&fs, g.inode).unwrap(), (g.attr.st_ino, 4), "{mode}");
        assert_eq!(read_file(&fs, g.inode).unwrap(), b"open", "{mode}");
        fs.release(&ctx(), g.inode, 0, fh.unwrap(), false, false, None)
            .unwrap();
    }
}

#[test]
fn an_object_gone_or_replaced_on_the_host_answers_estale() {
    for mode in MODES {
        let t = Tmpfs::new("16M");
        for n in ["deleted", "replaced", "hostmoved"] {
            std::fs::write(t.path().join(n), n).unwrap();
        }
        let fs = union_in(&t, mode);
        let del = fs.lookup(&ctx(), ROOT_ID, &c("deleted")).unwrap();
        let rep = fs.lookup(&ctx(), ROOT_ID, &c("replaced")).unwrap();
        let mov = fs.lookup(&ctx(), ROOT_ID, &c("hostmoved")).unwrap();
        push_out(&fs, &t);
        std::fs::remove_file(t.path().join("deleted")).unwrap();
        std::fs::remove_file(t.path().join("replaced")).unwrap();
        std::fs::write(t.path().join("replaced"), "another file").unwrap();
        std::fs::rename(t.path().join("hostmoved"), t.path().join("elsewhere")).unwrap();
        for node in [del.inode, rep.inode] {
            let e = attr(&fs, node).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::ESTALE), "{mode}: {e}");
        }
        // Moved behind the daemon's back: a handle still finds it, a path cannot.
        match (mode, attr(&fs, mov.inode)) {
            ("never", Err(e)) => assert_eq!(e.raw_os_error(), Some(libc::ESTALE)),
            (_, r) => assert_eq!(r.unwrap(), (mov.attr.st_ino, 9), "{mode}"),
        }
    }
}
