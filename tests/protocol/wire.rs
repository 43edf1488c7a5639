//! Protocol tests: union-virtiofsd driven over its vhost-user socket by the vufs-frontend driver
//! (no VM). Asserts FUSE_INIT negotiation, op round trips (bytes, errnos, what lands on the host),
//! limits, malformed frames (errno or drop, daemon keeps serving) and reconnect behaviour.

use std::fs;
use std::time::Duration;

use fuse_backend_rs::abi::fuse_abi::{InHeader, Opcode, ReadIn};
use testkit::daemon::Daemon;
use vm_memory::ByteValued;
use vufs_frontend::request::{IN_HEADER_LEN, OUT_HEADER_LEN};
use vufs_frontend::{ops, Device, Error, FuseRequest, RawSegment, REQUEST_QUEUE};

/// `FUSE_MAX_PAGES` init flag.
const MAX_PAGES_FLAG: u32 = 1 << 22;
/// Wait used for frames the daemon may legitimately drop.
const DROP_WAIT: Duration = Duration::from_secs(2);

fn rw() -> Daemon {
    Daemon::start(&["rw=RW", "ro=RO"], &[])
}

/// The daemon still answers a plain GETATTR of the root.
fn assert_serving(d: &mut Daemon, dev: &mut Device, after: &str) {
    d.assert_alive();
    let a = dev
        .getattr(ops::ROOT_ID)
        .unwrap_or_else(|e| panic!("GETATTR after {after}: {e}\n{}", d.log()));
    assert_eq!(a.attr.mode & libc::S_IFMT, libc::S_IFDIR, "after {after}");
}

/// Send a raw chain; `Some(errno)` if answered with an error, `None` if dropped. Panics on a
/// success reply.
fn expect_errno_or_drop(dev: &mut Device, chain: &[RawSegment], what: &str) -> Option<i32> {
    let t = dev.timeout();
    dev.set_timeout(DROP_WAIT);
    let r = dev.send_raw(REQUEST_QUEUE, chain);
    dev.set_timeout(t);
    match r {
        Err(Error::Timeout(_)) => None,
        Err(e) => panic!("{what}: driver error {e}"),
        Ok(c) => {
            let reply = c.into_reply();
            match reply.errno() {
                Some(e) => Some(e),
                None if reply.used_len == 0 => None,
                None => panic!("{what}: unexpected success reply {:?}", reply.header()),
            }
        }
    }
}

fn header(opcode: u32, nodeid: u64, len: u32, unique: u64) -> Vec<u8> {
    InHeader {
        len,
        opcode,
        unique,
        nodeid,
        ..Default::default()
    }
    .as_slice()
    .to_vec()
}

#[test]
fn init_negotiates_max_pages_from_queue_size_and_flag() {
    for (extra, qsize, want) in [
        (vec![], 1024u16, 1020u16),
        (vec!["--max-pages", "32"], 1024, 32),
        (vec![], 128, 124),
    ] {
        let d = Daemon::start(&["rw"], &extra);
        let mut dev = d.connect_with(qsize);
        let init = dev.init(ops::DEFAULT_INIT_FLAGS).expect("INIT");
        assert_eq!((init.major, init.minor >= 31), (7, true), "version");
        assert_ne!(init.flags & MAX_PAGES_FLAG, 0, "MAX_PAGES acked");
        assert_eq!(
            u64::from(init.flags)
                & !ops::DEFAULT_INIT_FLAGS
                & !(ops::INIT_EXT | 0xffff_ffff_0000_0000),
            0,
            "only offered flags are enabled: {:#x}",
            init.flags
        );
        assert_eq!(init.max_pages, want, "{extra:?} queue {qsize}");
        // WRITEs stop at --max-write's default, 512 KiB.
        assert_eq!(init.max_write, (u32::from(want) * 4096).min(512 << 10));
    }
}

/// `--allow-mmap` (virtiofsd's meaning): FUSE_DIRECT_IO_ALLOW_MMAP, flags2 bit 4, is enabled
/// when the guest offers it, and only then; without the flag it never is.
#[test]
fn allow_mmap_negotiates_direct_io_allow_mmap() {
    const ALLOW_MMAP: u64 = 1 << 36;
    for (extra, offer, want) in [
        (&["--allow-mmap", "--cache=never"][..], true, true),
        (&["--allow-mmap"][..], false, false),
        (&["--cache=never"][..], true, false),
    ] {
        let d = Daemon::start(&["rw"], extra);
        let mut dev = d.connect_with(1024);
        let flags = ops::DEFAULT_INIT_FLAGS | if offer { ALLOW_MMAP } else { 0 };
        let init = dev.init(flags).expect("INIT");
        assert_eq!(
            init.flags2 & (1 << 4) != 0,
            want,
            "{extra:?}, offered {offer}"
        );
        if want {
            assert_ne!(u64::from(init.flags) & ops::INIT_EXT, 0, "INIT_EXT echoed");
        }
    }
}

#[test]
fn file_and_directory_round_trips() {
    let mut d = rw();
    fs::write(d.branches[1].join("ro.txt"), b"from the RO branch").unwrap();
    let mut dev = d.session();

    let dir = dev.mkdir(ops::ROOT_ID, b"dir", 0o755).expect("MKDIR");
    assert_eq!(
        dev.mkdir(ops::ROOT_ID, b"dir", 0o755).unwrap_err().errno(),
        Some(libc::EEXIST)
    );
    let (e, o) = dev
        .create(dir.nodeid, b"f.txt", 0o644, libc::O_RDWR as u32)
        .expect("CREATE");
    let body: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
    assert_eq!(
        dev.write(e.nodeid, o.fh, 0, &body).unwrap(),
        body.len() as u32
    );
    assert_eq!(dev.read(e.nodeid, o.fh, 0, 20_000).unwrap(), body);
    assert_eq!(
        dev.read(e.nodeid, o.fh, 9_990, 100).unwrap(),
        &body[9_990..]
    );
    assert!(
        dev.read(e.nodeid, o.fh, 20_000, 100).unwrap().is_empty(),
        "read past EOF"
    );
    dev.release(e.nodeid, o.fh).unwrap();
    assert_eq!(
        fs::read(d.branches[0].join("dir/f.txt")).unwrap(),
        body,
        "lands on RW branch"
    );

    let l = dev.lookup(dir.nodeid, b"f.txt").expect("LOOKUP");
    assert_eq!(l.nodeid, e.nodeid);
    let a = dev.getattr(e.nodeid).unwrap();
    assert_eq!((a.attr.size, a.attr.mode & 0o7777), (10_000, 0o644));
    assert_eq!(
        dev.lookup(dir.nodeid, b"nope").unwrap_err().errno(),
        Some(libc::ENOENT)
    );

    let ro = dev
        .lookup(ops::ROOT_ID, b"ro.txt")
        .expect("LOOKUP in RO branch");
    let fh = dev.open(ro.nodeid, libc::O_RDONLY as u32).unwrap().fh;
    assert_eq!(
        dev.read(ro.nodeid, fh, 0, 4096).unwrap(),
        b"from the RO branch"
    );
    dev.release(ro.nodeid, fh).unwrap();

    let dh = dev.opendir(dir.nodeid).unwrap().fh;
    let names: Vec<Vec<u8>> = dev
        .readdir_all(dir.nodeid, dh)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(names.contains(&b"f.txt".to_vec()), "{names:?}");
    let plus = dev.readdirplus(dir.nodeid, dh, 0, 65536).unwrap();
    let f = plus
        .iter()
        .find(|x| x.name == b"f.txt")
        .expect("READDIRPLUS has f.txt");
    if let Some(en) = f.entry.filter(|en| en.nodeid != 0) {
        assert_eq!(en.attr.size, 10_000);
        dev.forget(en.nodeid, 1).unwrap();
    }
    dev.releasedir(dir.nodeid, dh).unwrap();

    assert_eq!(
        dev.rmdir(ops::ROOT_ID, b"dir").unwrap_err().errno(),
        Some(libc::ENOTEMPTY)
    );
    dev.unlink(dir.nodeid, b"f.txt").expect("UNLINK");
    assert_eq!(
        dev.lookup(dir.nodeid, b"f.txt").unwrap_err().errno(),
        Some(libc::ENOENT)
    );
    assert_eq!(
        dev.unlink(dir.nodeid, b"f.txt").unwrap_err().errno(),
        Some(libc::ENOENT)
    );
    assert!(!d.branches[0].join("dir/f.txt").exists());
    dev.forget(e.nodeid, 2).unwrap();

    let st = dev.statfs(ops::ROOT_ID).expect("STATFS");
    assert!(st.bsize > 0 && st.blocks > 0 && st.namelen > 0, "{st:?}");
    assert_serving(&mut d, &mut dev, "round trips");
}

#[test]
fn write_of_max_write_succeeds_and_one_page_more_is_refused() {
    let mut d = Daemon::start(&["rw"], &["--max-pages", "64"]);
    let mut dev = d.connect_with(1024);
    let init = dev.init(ops::DEFAULT_INIT_FLAGS).unwrap();
    assert_eq!(init.max_write, 64 * 4096);
    let (e, o) = dev
        .create(ops::ROOT_ID, b"big", 0o644, libc::O_RDWR as u32)
        .unwrap();
    let max = vec![0x5Au8; init.max_write as usize];
    assert_eq!(dev.write(e.nodeid, o.fh, 0, &max).unwrap(), init.max_write);
    let over = vec![0x5Bu8; init.max_write as usize + 4096];
    let r = dev.write(e.nodeid, o.fh, 0, &over);
    assert!(
        r.as_ref().err().and_then(Error::errno).is_some(),
        "oversized WRITE: {r:?}"
    );
    assert_eq!(
        fs::read(d.branches[0].join("big")).unwrap(),
        max,
        "nothing of it written"
    );
    dev.release(e.nodeid, o.fh).unwrap();
    assert_serving(&mut d, &mut dev, "oversized write");
}

/// `--max-write` bounds WRITEs only: its default is 512 KiB (a WRITE one page larger is
/// refused, nothing written) while READs still take every page; raised to 1020 pages, a
/// WRITE of that size goes through.
#[test]
fn max_write_bounds_writes_but_not_reads() {
    for (extra, want) in [
        (&[][..], 512u32 << 10),
        (&["--max-write", "4177920"][..], 1020 * 4096),
        (&["--max-write", "8192"][..], 8192),
    ] {
        let mut d = Daemon::start(&["rw"], extra);
        let mut dev = d.connect_with(1024);
        let init = dev.init(ops::DEFAULT_INIT_FLAGS).unwrap();
        assert_eq!((init.max_pages, init.max_write), (1020, want), "{extra:?}");
        let (e, o) = dev
            .create(ops::ROOT_ID, b"f", 0o644, libc::O_RDWR as u32)
            .unwrap();
        let full = vec![0x42u8; want as usize];
        assert_eq!(
            dev.write(e.nodeid, o.fh, 0, &full).unwrap(),
            want,
            "{extra:?}"
        );
        if want < 1020 * 4096 {
            let over = vec![0x43u8; want as usize + 4096];
            let r = dev.write(e.nodeid, o.fh, 0, &over);
            assert!(
                r.as_ref().err().and_then(Error::errno) == Some(libc::EINVAL),
                "WRITE over --max-write {extra:?}: {r:?}"
            );
        }
        fs::write(d.branches[0].join("f"), vec![0x44u8; 1020 * 4096]).unwrap();
        let got = dev.read(e.nodeid, o.fh, 0, 1020 * 4096).unwrap();
        assert!(
            got.len() == 1020 * 4096 && got.iter().all(|&b| b == 0x44),
            "a 1020-page READ {extra:?}: {} bytes",
            got.len()
        );
        dev.release(e.nodeid, o.fh).unwrap();
        assert_serving(&mut d, &mut dev, "max_write");
    }
}

/// Large READs: every byte lands where it belongs, at any offset, and a read past the end of
/// the file is short exactly there. With more than one CPU, those of 2 MiB or more are
/// filled in pieces by several threads (src/vhost/split.rs), ends of file inside any piece
/// included.
#[test]
fn large_reads_are_exact_at_any_offset_and_at_the_end_of_the_file() {
    let extra = ["--thread-pool-size", "4", "--log-level", "debug"];
    let mut d = Daemon::start(&["rw"], &extra);
    let len = (3 << 20) + 1234;
    let data: Vec<u8> = (0..len as u64)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    fs::write(d.branches[0].join("big"), &data).unwrap();
    let mut dev = d.connect_with(1024);
    let init = dev.init(ops::DEFAULT_INIT_FLAGS).unwrap();
    // 1020 pages: a little under 4 MiB (READs are not bound by max_write).
    let max = usize::from(init.max_pages) * 4096;
    assert_eq!(max, 1020 * 4096);
    let e = dev.lookup(ops::ROOT_ID, b"big").unwrap();
    let fh = dev.open(e.nodeid, libc::O_RDONLY as u32).unwrap().fh;
    for (offset, size) in [
        (0usize, 1usize << 20),
        (4096 * 3 + 17, (2 << 20) + 5),
        (len - (1 << 20) + 100, 1 << 20),
        (len - 10, max),
        (len + 4096, 1 << 20),
        (1, max),
    ] {
        let got = dev.read(e.nodeid, fh, offset as u64, size as u32).unwrap();
        let want = &data[offset.min(len)..(offset + size).min(len)];
        assert!(
            got == want,
            "READ {size} at {offset}: {} bytes, want {}",
            got.len(),
            want.len()
        );
    }
    dev.release(e.nodeid, fh).unwrap();
    assert_serving(&mut d, &mut dev, "large reads");
    // READs of 2 MiB or more are split: one piece per MiB, per thread that can run (this
    // one and 4 workers, never all busy here), per CPU. The 1 MiB ones are not.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let log = d.log();
    let split = log.lines().filter(|l| l.contains(" pieces")).count();
    if cpus > 1 {
        let want = format!("READ in {} pieces", cpus.min(5).min(max >> 20));
        assert!(log.contains(&want), "no '{want}' with {cpus} CPUs:\n{log}");
        assert!(log.contains("READ in 2 pieces"), "the 2 MiB READ:\n{log}");
        assert_eq!(split, 3, "split READs of 6 (3 of 2 MiB or more):\n{log}");
    } else {
        assert_eq!(split, 0, "split on one CPU:\n{log}");
    }
}

#[test]
fn malformed_frames_get_an_errno_or_are_dropped() {
    let mut d = rw();
    fs::write(d.branches[0].join("f"), vec![1u8; 8192]).unwrap();
    let mut dev = d.session();
    let getattr_len = (IN_HEADER_LEN + 16) as u32;

    // A header cut short.
    let h = header(Opcode::Getattr as u32, ops::ROOT_ID, getattr_len, 9001);
    expect_errno_or_drop(
        &mut dev,
        &[RawSegment::In(h[..20].to_vec()), RawSegment::Out(4096)],
        "short header",
    );
    assert_serving(&mut d, &mut dev, "short header");

    // `len` claims more than the chain holds, and less than the header itself.
    for len in [4096, 8] {
        let mut h = header(Opcode::Lookup as u32, ops::ROOT_ID, len, 9002);
        h.extend_from_slice(b"f\0");
        expect_errno_or_drop(
            &mut dev,
            &[RawSegment::In(h), RawSegment::Out(4096)],
            "lying len",
        );
        assert_serving(&mut d, &mut dev, "lying len");
    }

    // Unknown opcode.
    let h = header(4242, ops::ROOT_ID, IN_HEADER_LEN as u32, 9003);
    let r = dev
        .send_raw(REQUEST_QUEUE, &[RawSegment::In(h), RawSegment::Out(4096)])
        .unwrap();
    assert_eq!(r.into_reply().errno(), Some(libc::ENOSYS), "unknown opcode");

    // Bogus nodeid and file handle.
    assert!(
        dev.getattr(0xdead_beef).unwrap_err().errno().is_some(),
        "bogus nodeid"
    );
    assert!(
        dev.lookup(0xdead_beef, b"f").unwrap_err().errno().is_some(),
        "bogus parent"
    );
    let f = dev.lookup(ops::ROOT_ID, b"f").unwrap();
    assert!(
        dev.read(f.nodeid, 0xbad_f00d, 0, 4096)
            .unwrap_err()
            .errno()
            .is_some(),
        "bogus fh"
    );
    assert_eq!(
        dev.release(f.nodeid, 0xbad_f00d).unwrap_err().errno(),
        Some(libc::EBADF),
        "bogus release"
    );

    // FORGET of more references than were looked up, then the name still resolves.
    dev.forget(f.nodeid, 1000).unwrap();
    assert_serving(&mut d, &mut dev, "over-forget");
    let again = dev
        .lookup(ops::ROOT_ID, b"f")
        .expect("lookup after over-forget");
    assert_eq!(dev.getattr(again.nodeid).unwrap().attr.size, 8192);

    // READ whose reply buffer is smaller than the data asked for.
    let fh = dev.open(again.nodeid, libc::O_RDONLY as u32).unwrap().fh;
    let mut small = ops::read(again.nodeid, fh, 0, 4096);
    small.reply_capacity = (OUT_HEADER_LEN + 100) as u32;
    let t = dev.timeout();
    dev.set_timeout(DROP_WAIT);
    match dev.send(&small) {
        Ok(r) => assert!(
            r.errno().is_some(),
            "READ into a too-small buffer succeeded: {:?}",
            r.header()
        ),
        Err(Error::Timeout(_)) => {}
        Err(e) => panic!("small READ: {e}"),
    }
    dev.set_timeout(t);
    // No room even for the out header.
    let mut tiny = ops::getattr(ops::ROOT_ID, None);
    tiny.reply_capacity = 8;
    let _ = expect_errno_or_drop(&mut dev, &raw_of(&tiny, 9004), "8-byte reply buffer");
    assert_serving(&mut d, &mut dev, "small reply buffers");

    // Writable descriptor before the readable ones; descriptor outside guest RAM.
    let mut h = header(Opcode::Getattr as u32, ops::ROOT_ID, getattr_len, 9005);
    h.extend_from_slice(&[0u8; 16]);
    expect_errno_or_drop(
        &mut dev,
        &[RawSegment::Out(4096), RawSegment::In(h.clone())],
        "W before R",
    );
    expect_errno_or_drop(
        &mut dev,
        &[
            RawSegment::In(h),
            RawSegment::Addr {
                addr: 1 << 46,
                len: 4096,
                writable: true,
            },
        ],
        "reply outside RAM",
    );
    assert_serving(&mut d, &mut dev, "bad descriptors");
    dev.release(again.nodeid, fh).unwrap();
}

/// A request as a raw chain (header+args, reply buffer), with `unique` set by hand.
fn raw_of(r: &FuseRequest, unique: u64) -> Vec<RawSegment> {
    let mut v = vec![RawSegment::In(r.head_bytes(unique))];
    if r.reply_capacity > 0 {
        v.push(RawSegment::Out(r.reply_capacity));
    }
    v
}

#[test]
fn odd_descriptor_splits_are_reassembled() {
    let mut d = rw();
    fs::write(d.branches[0].join("f"), b"0123456789abcdef").unwrap();
    let mut dev = d.session();
    let f = dev.lookup(ops::ROOT_ID, b"f").unwrap();
    let fh = dev.open(f.nodeid, libc::O_RDONLY as u32).unwrap().fh;
    let read_in = ReadIn {
        fh,
        offset: 0,
        size: 16,
        ..Default::default()
    };
    let mut frame = header(
        Opcode::Read as u32,
        f.nodeid,
        (IN_HEADER_LEN + 40) as u32,
        77,
    );
    frame.extend_from_slice(read_in.as_slice());
    // Readable split mid-header and mid-args; writable split mid-out-header.
    let chain = [
        RawSegment::In(frame[..13].to_vec()),
        RawSegment::In(frame[13..45].to_vec()),
        RawSegment::In(frame[45..].to_vec()),
        RawSegment::Out(7),
        RawSegment::Out(9),
        RawSegment::Out(5),
        RawSegment::Out(100),
    ];
    let reply = dev
        .send_raw(REQUEST_QUEUE, &chain)
        .expect("split READ")
        .into_reply();
    let h = reply.header().expect("out header");
    assert_eq!((h.error, h.unique, h.len), (0, 77, reply.used_len), "{h:?}");
    assert_eq!(reply.payload().unwrap(), b"0123456789abcdef");
    dev.release(f.nodeid, fh).unwrap();
    assert_serving(&mut d, &mut dev, "split chains");
}

#[test]
fn pipelined_requests_all_complete() {
    let mut d = rw();
    let mut dev = d.session();
    let mut seen = vec![false; 3000];
    dev.submit_many(
        (0..3000).map(|_| ops::getattr(ops::ROOT_ID, None)),
        128,
        |i, r| {
            assert!(r.errno().is_none());
            seen[i] = true;
            Ok(())
        },
    )
    .unwrap();
    assert!(seen.iter().all(|&s| s));
    assert_serving(&mut d, &mut dev, "pipelining");
}

#[test]
fn reconnect_after_frontend_disconnect_or_clean_exit() {
    let mut d = rw();
    let mut dev = d.session();
    dev.create(ops::ROOT_ID, b"kept", 0o644, libc::O_WRONLY as u32)
        .unwrap();
    dev.disconnect();
    // Either the daemon exits cleanly, or it accepts a new frontend that sees the same files.
    match d.proc.wait_exit(Duration::from_secs(2)).unwrap() {
        Some(st) => assert_eq!(
            st.code(),
            Some(0),
            "exit after disconnect: {st}\n{}",
            d.log()
        ),
        None => {
            let mut dev = d.session();
            let e = dev
                .lookup(ops::ROOT_ID, b"kept")
                .expect("file survives reconnect");
            assert_ne!(e.nodeid, 0);
            assert_serving(&mut d, &mut dev, "reconnect");
        }
    }
}

/// `--tag` is offered in the device config space (VHOST_USER_PROTOCOL_F_CONFIG), as virtiofsd
/// does; without it the feature is not offered and the frontend supplies the tag.
#[test]
fn tag_is_offered_in_the_config_space_only_when_given() {
    let d = Daemon::start(&["rw=RW"], &["--tag", "mytag"]);
    let dev = d.connect_with(256);
    assert_eq!(dev.negotiated().tag.as_deref(), Some("mytag"));
    assert_eq!(dev.negotiated().num_request_queues, Some(1));
    let d = Daemon::start(&["rw=RW"], &[]);
    let dev = d.connect_with(256);
    assert_eq!(dev.negotiated().tag, None);
}

#[test]
fn a_request_that_panics_answers_eio_and_the_session_keeps_serving() {
    // The hidden test hook makes a LOOKUP of "boom" panic while it holds the node table's
    // lock: the lock is poisoned, and every later request needs that table.
    let mut d = Daemon::start(&["a"], &["--test-panic-on-lookup", "boom"]);
    fs::write(d.branches[0].join("f"), b"data").unwrap();
    fs::write(d.branches[0].join("boom"), b"").unwrap();
    let mut dev = d.session();
    let e = dev.lookup(ops::ROOT_ID, b"boom").unwrap_err();
    assert_eq!(e.errno(), Some(libc::EIO), "{e}\n{}", d.log());
    // Every later request is served: lookups, a create, a read, a listing, a removal.
    let f = dev.lookup(ops::ROOT_ID, b"f").unwrap();
    let fh = dev.open(f.nodeid, libc::O_RDONLY as u32).unwrap().fh;
    assert_eq!(dev.read(f.nodeid, fh, 0, 100).unwrap(), b"data");
    dev.release(f.nodeid, fh).unwrap();
    let dir = dev.mkdir(ops::ROOT_ID, b"d", 0o755).unwrap();
    let names: Vec<Vec<u8>> = {
        let dh = dev.opendir(ops::ROOT_ID).unwrap().fh;
        let all = dev.readdir_all(ops::ROOT_ID, dh).unwrap();
        dev.releasedir(ops::ROOT_ID, dh).unwrap();
        all.into_iter().map(|e| e.name).collect()
    };
    assert!(
        names.contains(&b"d".to_vec()) && names.contains(&b"f".to_vec()),
        "{names:?}"
    );
    dev.rmdir(ops::ROOT_ID, b"d").unwrap();
    assert!(!d.branches[0].join("d").exists());
    dev.forget(dir.nodeid, 1).unwrap();
    assert_serving(&mut d, &mut dev, "a panicking request");
    // The recovery is logged once.
    let log = fs::read_to_string(d.tmp.path().join("run/daemon.log")).unwrap();
    assert_eq!(
        log.matches("a request panicked while holding a lock")
            .count(),
        1,
        "{log}"
    );
}
