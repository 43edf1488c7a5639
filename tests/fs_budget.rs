//! The guest cannot exhaust the daemon's descriptors: nodes and handles count against a budget
//! derived from RLIMIT_NOFILE (ENFILE/EMFILE past it, memory and descriptors returned on
//! FORGET/RELEASE), and a branch probe that fails for lack of descriptors reports EMFILE, never
//! "no such file". Its own test binary: it changes the process's open-file limit.

#[path = "support/fsharness.rs"]
mod fsharness;

use std::fs;

use fsharness::*;
use fuse_backend_rs::api::filesystem::FileSystem;
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
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

fn open_fds() -> u64 {
    fs::read_dir("/proc/self/fd").unwrap().count() as u64
}

#[test]
fn nodes_and_handles_are_bounded_and_emfile_is_never_enoent() {
    let branch = tempfile::tempdir().unwrap();
    for i in 0..400 {
        fs::write(branch.path().join(format!("f{i}")), "x").unwrap();
    }
    set_soft_nofile(512);
    let fs = union(&[(branch.path(), "RW")]);
    // 512 minus the 256 kept back for the daemon.
    assert_eq!(fs.fd_budget(), 256);
    let mut held = Vec::new();
    let mut first_err = None;
    for i in 0..400 {
        match fs.lookup(&ctx(), ROOT_ID, &c(&format!("f{i}"))) {
            Ok(e) => held.push(e.inode),
            Err(e) => {
                first_err = Some(e.raw_os_error());
                break;
            }
        }
    }
    assert_eq!(first_err, Some(Some(libc::ENFILE)));
    assert_eq!(fs.inode_count(), 256, "the root and 255 nodes");
    // An open needs a handle: refused as EMFILE while the guest holds the whole budget.
    let dir = fs.opendir(&ctx(), ROOT_ID, 0);
    assert_eq!(dir.unwrap_err().raw_os_error(), Some(libc::EMFILE));
    // The daemon itself still works (its reserve is untouched): statfs, getattr.
    fs.statfs(&ctx(), ROOT_ID).unwrap();
    fs.getattr(&ctx(), held[0], None).unwrap();
    for id in held.drain(..) {
        fs.forget(&ctx(), id, 1);
    }
    assert_eq!(fs.inode_count(), 1);
    let e = fs.lookup(&ctx(), ROOT_ID, &c("f399")).unwrap();

    // Now leave no descriptor free at all: a lookup must say EMFILE, not ENOENT.
    set_soft_nofile(open_fds());
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
}
