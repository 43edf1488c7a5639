//! Host-side locks through the daemon's socket, as the guest kernel sends them: POSIX record
//! locks per lock owner (conflicts between owners, none within one, GETLK reports the
//! holder), conflicts with a host process's own fcntl locks in both directions, SETLKW
//! waiting until the holder lets go, SETLKW interrupted by FUSE_INTERRUPT, an owner's locks
//! released by its FLUSH (a close), an open file description's own (OFD) locks released with
//! its handle, flock locks per open file released with the handle, and
//! a daemon with a waiting SETLKW still ending cleanly when the guest goes. Waits end by the
//! daemon's word: EDEADLK for a cycle of owners and after `lock-timeout`, EBADF when the
//! waiting owner closes the file, ENOLCK for a flock held outside after
//! `lock-wait-external`.

use std::os::fd::AsRawFd;
use std::time::Duration;

use testkit::daemon::Daemon;
use testkit::hostlocks;
use testkit::hostlocks::posix_lock;
use vufs_frontend::fuse_abi::{FileLock, LkOut};
use vufs_frontend::{ops, Device, REQUEST_QUEUE};

const WAIT: Duration = Duration::from_secs(10);

/// Opens `name` (made with `data` in the branch) read-write: (nodeid, fh).
fn open_rw(dev: &mut Device, name: &[u8]) -> (u64, u64) {
    let e = dev.lookup(ops::ROOT_ID, name).unwrap();
    let o = dev.open(e.nodeid, libc::O_RDWR as u32).unwrap();
    (e.nodeid, o.fh)
}

/// The errno of a reply (Ok for success).
fn answer(r: vufs_frontend::Result<vufs_frontend::FuseReply>) -> Result<(), i32> {
    match r.unwrap().errno() {
        None => Ok(()),
        Some(e) => Err(e),
    }
}

fn setlk(dev: &mut Device, node: u64, fh: u64, owner: u64, lk: FileLock) -> Result<(), i32> {
    answer(dev.send(&ops::setlk(node, fh, owner, lk, false, false)))
}

fn flock(dev: &mut Device, node: u64, fh: u64, kind: i32) -> Result<(), i32> {
    let lk = ops::file_lock(0, u64::MAX, kind);
    answer(dev.send(&ops::setlk(node, fh, fh, lk, true, false)))
}

fn getlk(dev: &mut Device, node: u64, fh: u64, owner: u64, lk: FileLock) -> FileLock {
    dev.send(&ops::getlk(node, fh, owner, lk))
        .unwrap()
        .parse::<LkOut>()
        .unwrap()
        .lk
}

fn daemon_with_file() -> Daemon {
    daemon_with_file_and(&[])
}

/// A daemon started with `extra` arguments over one branch holding a 4 KiB file `f`.
fn daemon_with_file_and(extra: &[&str]) -> Daemon {
    let d = Daemon::start(&["a"], extra);
    std::fs::write(d.branches[0].join("f"), vec![b'x'; 4096]).unwrap();
    d
}

/// The branch's `f` opened read-write by this (host) process.
fn host_file(d: &Daemon) -> std::fs::File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(d.branches[0].join("f"))
        .unwrap()
}

#[test]
fn posix_locks_conflict_between_owners_and_not_within_one() {
    let d = daemon_with_file();
    let mut dev = d.session();
    let (node, fh) = open_rw(&mut dev, b"f");
    let (_, fh2) = open_rw(&mut dev, b"f");
    let (a, b) = (0xa, 0xb);
    setlk(&mut dev, node, fh, a, ops::file_lock(0, 99, libc::F_WRLCK)).unwrap();
    // The same owner through another handle: no conflict with itself (range extended).
    setlk(
        &mut dev,
        node,
        fh2,
        a,
        ops::file_lock(50, 199, libc::F_WRLCK),
    )
    .unwrap();
    // Another owner: EAGAIN on any overlap, fine past the end of a's range.
    eprintln!("{}", d.log());
    assert_eq!(
        setlk(
            &mut dev,
            node,
            fh,
            b,
            ops::file_lock(150, 150, libc::F_RDLCK)
        ),
        Err(libc::EAGAIN)
    );
    setlk(
        &mut dev,
        node,
        fh,
        b,
        ops::file_lock(200, 299, libc::F_WRLCK),
    )
    .unwrap();
    // GETLK names the conflicting lock: a's merged 0..=199, exclusive.
    let got = getlk(&mut dev, node, fh, b, ops::file_lock(10, 10, libc::F_RDLCK));
    assert_eq!(
        (got.type_ as i32, got.start, got.end),
        (libc::F_WRLCK, 0, 199)
    );
    let free = getlk(
        &mut dev,
        node,
        fh,
        b,
        ops::file_lock(300, 400, libc::F_WRLCK),
    );
    assert_eq!(free.type_ as i32, libc::F_UNLCK);
    // a unlocks the middle: b may take it; a still holds the rest.
    setlk(
        &mut dev,
        node,
        fh,
        a,
        ops::file_lock(100, 149, libc::F_UNLCK),
    )
    .unwrap();
    setlk(
        &mut dev,
        node,
        fh,
        b,
        ops::file_lock(100, 149, libc::F_WRLCK),
    )
    .unwrap();
    assert_eq!(
        setlk(&mut dev, node, fh, b, ops::file_lock(99, 99, libc::F_WRLCK)),
        Err(libc::EAGAIN)
    );
}

#[test]
fn guest_locks_and_host_locks_see_each_other() {
    let d = daemon_with_file();
    let file = host_file(&d);
    let mut dev = d.session();
    let (node, fh) = open_rw(&mut dev, b"f");
    // Guest holds 0..=9: a host process cannot lock it, and sees it with F_GETLK.
    setlk(&mut dev, node, fh, 1, ops::file_lock(0, 9, libc::F_WRLCK)).unwrap();
    assert_eq!(posix_lock(&file, libc::F_RDLCK, 5, 1), Err(libc::EAGAIN));
    posix_lock(&file, libc::F_WRLCK, 10, 10).unwrap();
    // Host holds 10..=19: the guest gets EAGAIN there, and GETLK reports it (pid 0).
    assert_eq!(
        setlk(&mut dev, node, fh, 1, ops::file_lock(15, 15, libc::F_RDLCK)),
        Err(libc::EAGAIN)
    );
    let got = getlk(&mut dev, node, fh, 1, ops::file_lock(12, 30, libc::F_RDLCK));
    assert_eq!(
        (got.type_ as i32, got.start, got.end, got.pid),
        (libc::F_WRLCK, 10, 19, 0)
    );
    // flock locks conflict with a host flock on the same file.
    // SAFETY: flock on a valid descriptor.
    let held = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(held, 0);
    assert_eq!(flock(&mut dev, node, fh, libc::F_RDLCK), Err(libc::EAGAIN));
    // SAFETY: as above.
    assert_eq!(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) }, 0);
    flock(&mut dev, node, fh, libc::F_RDLCK).unwrap();
}

#[test]
fn setlkw_waits_for_the_holder_and_flush_releases_an_owners_locks() {
    let d = daemon_with_file();
    let mut dev = d.session();
    let (node, fh) = open_rw(&mut dev, b"f");
    let (_, fh2) = open_rw(&mut dev, b"f");
    setlk(&mut dev, node, fh, 1, ops::file_lock(0, 0, libc::F_WRLCK)).unwrap();
    let lk = ops::file_lock(0, 0, libc::F_WRLCK);
    let t = dev
        .queue_request(REQUEST_QUEUE, &ops::setlk(node, fh2, 2, lk, false, true))
        .unwrap();
    dev.kick(REQUEST_QUEUE).unwrap();
    // Other requests are still served while it waits (no worker, no queue thread held).
    for _ in 0..20 {
        dev.getattr(node).unwrap();
    }
    // Owner 1 closes a descriptor of the file (FLUSH): its locks go, and owner 2 gets the lock.
    answer(dev.send(&ops::flush(node, fh, 1))).unwrap();
    assert_eq!(waited(&mut dev, t), 0);
    // Owner 1 now conflicts with owner 2.
    assert_eq!(
        setlk(&mut dev, node, fh, 1, ops::file_lock(0, 0, libc::F_RDLCK)),
        Err(libc::EAGAIN)
    );
}

#[test]
fn an_interrupt_ends_a_waiting_setlkw_with_eintr() {
    let d = daemon_with_file();
    let file = host_file(&d);
    posix_lock(&file, libc::F_WRLCK, 0, 0).unwrap();
    let mut dev = d.session();
    let (node, fh) = open_rw(&mut dev, b"f");
    for flock_kind in [false, true] {
        if flock_kind {
            // SAFETY: flock on a valid descriptor.
            assert_eq!(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) }, 0);
        }
        let lk = ops::file_lock(0, u64::MAX, libc::F_WRLCK);
        let req = ops::setlk(node, fh, 7, lk, flock_kind, true);
        let t = dev.queue_request(REQUEST_QUEUE, &req).unwrap();
        dev.kick(REQUEST_QUEUE).unwrap();
        // The kernel sends INTERRUPT after the request, whenever the daemon has picked it up.
        dev.send(&ops::interrupt(t.seq))
            .unwrap_or_else(|_| panic!("{}", d.log()));
        let c = dev.wait(t, WAIT).unwrap().into_reply();
        assert_eq!(
            c.header().unwrap().error,
            -libc::EINTR,
            "flock={flock_kind}"
        );
    }
    // Served as before.
    dev.getattr(node).unwrap();
}

#[test]
fn release_drops_flock_and_a_waiting_setlkw_does_not_keep_the_daemon_alive() {
    let mut d = daemon_with_file();
    let mut dev = d.session();
    let (node, fh) = open_rw(&mut dev, b"f");
    let (_, fh2) = open_rw(&mut dev, b"f");
    flock(&mut dev, node, fh, libc::F_WRLCK).unwrap();
    assert_eq!(flock(&mut dev, node, fh2, libc::F_WRLCK), Err(libc::EAGAIN));
    dev.release(node, fh).unwrap();
    flock(&mut dev, node, fh2, libc::F_WRLCK).unwrap();
    // A SETLKW waiting on a lock held through fh2 when the guest goes away.
    let (_, fh3) = open_rw(&mut dev, b"f");
    let lk = ops::file_lock(0, u64::MAX, libc::F_WRLCK);
    dev.queue_request(REQUEST_QUEUE, &ops::setlk(node, fh3, fh3, lk, true, true))
        .unwrap();
    dev.kick(REQUEST_QUEUE).unwrap();
    dev.getattr(node).unwrap();
    d.assert_alive();
    drop(dev);
    let st = d.proc.wait_exit(WAIT).unwrap().expect("the daemon exits");
    assert!(st.success(), "{st}\n{}", d.log());
}

/// An OFD lock's owner is the guest's struct file, which no FLUSH names (FLUSH carries the
/// closing process's file table): the guest sends no unlock when the description closes, only
/// its RELEASE. That RELEASE ends the lock, and the host description carrying it, while a
/// process's POSIX lock through another handle stays.
#[test]
fn release_ends_the_ofd_locks_of_its_description() {
    let d = daemon_with_file();
    let host = d.branches[0].join("f");
    let mut dev = d.session();
    let (node, fh_a) = open_rw(&mut dev, b"f");
    let (_, fh_b) = open_rw(&mut dev, b"f");
    let (_, fh_c) = open_rw(&mut dev, b"f");
    let (ofd_a, posix, ofd_c) = (0xa0, 0xb0, 0xc0);
    setlk(
        &mut dev,
        node,
        fh_a,
        ofd_a,
        ops::file_lock(0, 9, libc::F_WRLCK),
    )
    .unwrap();
    setlk(
        &mut dev,
        node,
        fh_b,
        posix,
        ops::file_lock(20, 29, libc::F_WRLCK),
    )
    .unwrap();
    // A GETLK alone opens a host description for its owner: it goes with the handle too.
    let got = getlk(
        &mut dev,
        node,
        fh_c,
        ofd_c,
        ops::file_lock(0, 99, libc::F_WRLCK),
    );
    assert_eq!(got.type_ as i32, libc::F_WRLCK);
    assert!(
        [(0, 9), (20, 29)].contains(&(got.start, got.end)),
        "{got:?}"
    );
    assert_eq!(hostlocks::locks_on_file(&host).len(), 2);
    // The process closes the duplicate it had (FLUSH names its owner): its lock goes.
    answer(dev.send(&ops::flush(node, fh_a, posix))).unwrap();
    assert_eq!(
        setlk(
            &mut dev,
            node,
            fh_c,
            ofd_c,
            ops::file_lock(5, 5, libc::F_RDLCK)
        ),
        Err(libc::EAGAIN)
    );
    setlk(
        &mut dev,
        node,
        fh_b,
        posix,
        ops::file_lock(20, 29, libc::F_WRLCK),
    )
    .unwrap();
    // The last descriptor of description A closes: RELEASE, with no lock owner.
    dev.release(node, fh_a).unwrap();
    setlk(
        &mut dev,
        node,
        fh_c,
        ofd_c,
        ops::file_lock(0, 9, libc::F_WRLCK),
    )
    .unwrap();
    let got = getlk(
        &mut dev,
        node,
        fh_c,
        ofd_c,
        ops::file_lock(0, 99, libc::F_WRLCK),
    );
    assert_eq!(
        (got.type_ as i32, got.start, got.end),
        (libc::F_WRLCK, 20, 29)
    );
    let held = hostlocks::locks_on_file(&host);
    assert_eq!(held.len(), 2, "C's and the process's, not A's: {held:?}");
    // Both remaining descriptions close: nothing is left on the host.
    dev.release(node, fh_c).unwrap();
    answer(dev.send(&ops::flush(node, fh_b, posix))).unwrap();
    dev.release(node, fh_b).unwrap();
    assert_eq!(hostlocks::locks_on_file(&host), Vec::<String>::new());
    hostlocks::try_posix_lock(&host, libc::F_WRLCK, 0, 0).unwrap();
}

/// The error of the reply to `t` (0 for success), once it comes.
fn waited(dev: &mut Device, t: vufs_frontend::Ticket) -> i32 {
    dev.wait(t, WAIT)
        .unwrap()
        .into_reply()
        .header()
        .unwrap()
        .error
}

/// Releases every POSIX lock of `owner` on `node`.
fn unlock_all(dev: &mut Device, node: u64, fh: u64, owner: u64) {
    setlk(
        dev,
        node,
        fh,
        owner,
        ops::file_lock(0, u64::MAX, libc::F_UNLCK),
    )
    .unwrap();
}

/// Queues a SETLKW of `lk` for `owner` through `fh` (POSIX) and kicks it: its ticket.
fn setlkw(dev: &mut Device, node: u64, fh: u64, owner: u64, lk: FileLock) -> vufs_frontend::Ticket {
    let t = dev
        .queue_request(REQUEST_QUEUE, &ops::setlk(node, fh, owner, lk, false, true))
        .unwrap();
    dev.kick(REQUEST_QUEUE).unwrap();
    t
}

#[test]
fn a_wait_that_would_close_a_cycle_answers_edeadlk() {
    let d = daemon_with_file();
    let mut dev = d.session();
    let (node, fh) = open_rw(&mut dev, b"f");
    let byte = |b| ops::file_lock(b, b, libc::F_WRLCK);
    setlk(&mut dev, node, fh, 1, byte(0)).unwrap();
    setlk(&mut dev, node, fh, 2, byte(1)).unwrap();
    // Each waits for the other's byte. Whichever the daemon takes second closes the cycle
    // and is answered EDEADLK at once, the other keeps waiting.
    let t1 = setlkw(&mut dev, node, fh, 1, byte(1));
    let t2 = setlkw(&mut dev, node, fh, 2, byte(0));
    let (first, c) = dev
        .reap(REQUEST_QUEUE, WAIT)
        .unwrap_or_else(|e| panic!("{e}\n{}", d.log()));
    assert_eq!(c.into_reply().header().unwrap().error, -libc::EDEADLK);
    // The refused owner lets go of everything (as a program does on EDEADLK): the other is
    // granted.
    let (refused, other) = if first.seq == t1.seq {
        (1, t2)
    } else {
        (2, t1)
    };
    unlock_all(&mut dev, node, fh, refused);
    assert_eq!(waited(&mut dev, other), 0);
}

#[test]
fn the_waiting_owners_close_ends_its_wait_and_leaves_no_lock() {
    let d = daemon_with_file_and(&["--log-level", "debug"]);
    let mut dev = d.session();
    let (node, fh) = open_rw(&mut dev, b"f");
    let (_, fh2) = open_rw(&mut dev, b"f");
    let all = || ops::file_lock(0, u64::MAX, libc::F_WRLCK);
    setlk(&mut dev, node, fh, 1, all()).unwrap();
    let t = setlkw(&mut dev, node, fh2, 2, all());
    d.wait_for_log(&format!("SETLKW node {node} owner 0x2 Some(Write)"));
    // Owner 2 closes a descriptor of the file (FLUSH) while it waits: after that close it
    // must hold nothing, so the wait may not be granted later.
    answer(dev.send(&ops::flush(node, fh2, 2))).unwrap();
    assert_eq!(waited(&mut dev, t), -libc::EBADF);
    unlock_all(&mut dev, node, fh, 1);
    let left = hostlocks::locks_on_file(&d.branches[0].join("f"));
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn waits_end_after_their_bounds() {
    let d = daemon_with_file_and(&["-o", "lock-timeout=0.3,lock-wait-external=0.3"]);
    let file = host_file(&d);
    let mut dev = d.session();
    let (node, fh) = open_rw(&mut dev, b"f");
    let all = || ops::file_lock(0, u64::MAX, libc::F_WRLCK);
    // A guest owner's lock whose holder never lets go (it waits for the waiter to exit, as
    // stress-ng's lockf parent does): EDEADLK after lock-timeout.
    setlk(&mut dev, node, fh, 1, all()).unwrap();
    let t = setlkw(&mut dev, node, fh, 2, all());
    assert_eq!(waited(&mut dev, t), -libc::EDEADLK);
    unlock_all(&mut dev, node, fh, 1);
    // A host process's POSIX lock: the same.
    posix_lock(&file, libc::F_WRLCK, 0, 0).unwrap();
    let t = setlkw(&mut dev, node, fh, 2, all());
    assert_eq!(waited(&mut dev, t), -libc::EDEADLK);
    // A host process's flock: ENOLCK after lock-wait-external.
    // SAFETY: flock on a valid descriptor.
    let held = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(held, 0);
    let req = ops::setlk(node, fh, fh, all(), true, true);
    let t = dev.queue_request(REQUEST_QUEUE, &req).unwrap();
    dev.kick(REQUEST_QUEUE).unwrap();
    assert_eq!(waited(&mut dev, t), -libc::ENOLCK);
    // Once the host lets go, both are granted.
    drop(file);
    flock(&mut dev, node, fh, libc::F_WRLCK).unwrap();
    let t = setlkw(&mut dev, node, fh, 2, all());
    assert_eq!(waited(&mut dev, t), 0);
}
