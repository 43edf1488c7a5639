//! The guest cannot exhaust the daemon's descriptors: it may look at more files than the open
//! file limit (the node table keeps a quarter of the budget open and closes the least recently
//! used), open files count against a budget derived from RLIMIT_NOFILE (EMFILE past it,
//! descriptors returned on RELEASE), and a branch probe that fails for lack of descriptors
//! reports EMFILE, never "no such file". It changes the open-file limit of its process: it runs
//! in a process of its own.

use std::fs;

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
use testkit::alone;
use testkit::calls::Calls;
use testkit::fsharness::*;
use union_virtiofsd::fs::ROOT_ID;

fn set_soft_nofile(n: u64) {
    let cur = getrlimit(Resource::Nofile);
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(n),
            maximum: cur.maximum,
        },
    )
    .unwrap();
}

fn open_fds() -> usize {
    fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn descriptors_are_bounded_and_emfile_is_never_enoent() {
    // It lowers RLIMIT_NOFILE, which every thread shares, and counts the process's descriptors.
    alone::in_own_process(|| {
        let branch = tempfile::tempdir().unwrap();
        for i in 0..400 {
            fs::write(branch.path().join(format!("f{i}")), "x").unwrap();
        }
        set_soft_nofile(512);
        let fs = union(&[(branch.path(), "RW")]);
        // 512 minus the 256 kept back for the daemon; a quarter of it for node descriptors.
        assert_eq!(fs.fd_budget(), 256);
        // The guest may look at more files than the limit: nodes cost memory, not descriptors.
        let before = open_fds();
        let held: Vec<u64> = (0..400)
            .map(|i| {
                fs.lookup(&ctx(), ROOT_ID, &c(&format!("f{i}")))
                    .unwrap()
                    .inode
            })
            .collect();
        assert_eq!(fs.inode_count(), 401);
        assert!(fs.node_fd_count() <= 64, "{}", fs.node_fd_count());
        assert!(open_fds() - before <= 64 + 2);
        // Open files are what the budget bounds: EMFILE past it, never ENOENT.
        let mut handles = Vec::new();
        let err = loop {
            match fs.open(&ctx(), held[handles.len()], libc::O_RDONLY as u32, 0) {
                Ok((fh, _, _)) => handles.push(fh.unwrap()),
                Err(e) => break e,
            }
        };
        assert_eq!(err.raw_os_error(), Some(libc::EMFILE));
        assert!(handles.len() + fs.node_fd_count() <= 256);
        assert!(handles.len() >= 256 - 64 - 1, "{} opened", handles.len());
        // The daemon itself still works (its reserve is untouched): statfs, getattr of a node
        // whose descriptor was closed.
        fs.statfs(&ctx(), ROOT_ID).unwrap();
        fs.getattr(&ctx(), held[399], None).unwrap();
        for (i, fh) in handles.drain(..).enumerate() {
            fs.release(&ctx(), held[i], 0, fh, false, false, None)
                .unwrap();
        }
        for id in held {
            fs.forget(&ctx(), id, 1);
        }
        assert_eq!(fs.inode_count(), 1);
        assert_eq!(fs.node_fd_count(), 0);
        let e = fs.lookup(&ctx(), ROOT_ID, &c("f399")).unwrap();

        // Now leave no descriptor free at all: a lookup must say EMFILE, not ENOENT.
        set_soft_nofile(open_fds() as u64);
        // Fill every free slot below the limit (holes included).
        let mut fillers = Vec::new();
        while let Ok(f) = fs::File::open("/dev/null") {
            fillers.push(f);
        }
        let r = fs.lookup(&ctx(), ROOT_ID, &c("f398"));
        drop(fillers);
        set_soft_nofile(512);
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EMFILE));
        fs.forget(&ctx(), e.inode, 1);
    });
}
