//! Request dispatch tests: FUSE messages are built as descriptor chains in mock guest memory
//! (virtio-queue's `MockSplitQueue`) and the reply bytes are read back.

use std::ffi::CStr;
use std::io;
use std::mem::size_of;
use std::sync::Mutex;

use fuse_backend_rs::abi::fuse_abi::{
    FsOptions, InHeader, InitIn, InitOut, Opcode, OutHeader, ReadIn, WriteIn, WriteOut,
};
use fuse_backend_rs::api::filesystem::{Entry, ZeroCopyReader, ZeroCopyWriter};
use virtio_bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::{split::Descriptor as SplitDescriptor, RawDescriptor};
use virtio_queue::mock::MockSplitQueue;
use vm_memory::{ByteValued, Bytes, GuestAddress, GuestMemoryMmap};

use super::Dispatcher;
use crate::fuse::Filesystem;

const REQ_ADDR: u64 = 0x10_0000;
const REPLY_ADDR: u64 = 0x80_0000;
const FILE_LEN: u64 = 5000;

/// A one-file filesystem: reads return `(offset + i) % 251`, writes are recorded.
#[derive(Default)]
struct FakeFs {
    written: Mutex<Vec<u8>>,
}

impl crate::fs::session::Sessions for FakeFs {}

type Req<'a, 'r> = crate::fuse::Req<'a, 'r, FakeFs>;

impl Filesystem for FakeFs {
    type View = ();

    fn view(&self) {}

    fn init(&self, _capable: FsOptions) -> io::Result<FsOptions> {
        Ok(FsOptions::ASYNC_READ)
    }

    fn lookup(&self, _req: Req<'_, '_>, _parent: u64, name: &CStr) -> io::Result<Entry> {
        if name.to_bytes() == b"panic" {
            panic!("fake filesystem bug");
        }
        Err(io::Error::from_raw_os_error(libc::ENOENT))
    }

    fn read(
        &self,
        _req: Req<'_, '_>,
        _inode: u64,
        _handle: u64,
        w: &mut dyn ZeroCopyWriter,
        size: u32,
        offset: u64,
        _lock_owner: Option<u64>,
        _flags: u32,
    ) -> io::Result<usize> {
        let end = FILE_LEN.min(offset + u64::from(size));
        let data: Vec<u8> = (offset..end).map(|i| (i % 251) as u8).collect();
        w.write_all(&data)?;
        Ok(data.len())
    }

    fn write(
        &self,
        _req: Req<'_, '_>,
        _inode: u64,
        _handle: u64,
        r: &mut dyn ZeroCopyReader,
        size: u32,
        _offset: u64,
        _lock_owner: Option<u64>,
        _delayed_write: bool,
        _flags: u32,
        _fuse_flags: u32,
    ) -> io::Result<usize> {
        let mut buf = vec![0u8; size as usize];
        r.read_exact(&mut buf)?;
        *self.written.lock().unwrap() = buf;
        Ok(size as usize)
    }
}

fn memory() -> GuestMemoryMmap<crate::vhost::backend::Logged> {
    GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x200_0000)]).unwrap()
}

fn header(opcode: Opcode, unique: u64, body_len: usize) -> InHeader {
    InHeader {
        len: (size_of::<InHeader>() + body_len) as u32,
        opcode: opcode as u32,
        unique,
        nodeid: 1,
        ..Default::default()
    }
}

fn message(hdr: InHeader, parts: &[&[u8]]) -> Vec<u8> {
    let mut v = hdr.as_slice().to_vec();
    for p in parts {
        v.extend_from_slice(p);
    }
    v
}

/// Puts `request` in one readable descriptor and `reply_len` writable bytes after it, serves
/// it on a queue of `queue_size`, and returns (used length, reply bytes).
fn serve(
    d: &Dispatcher<FakeFs>,
    mem: &GuestMemoryMmap<crate::vhost::backend::Logged>,
    request: &[u8],
    reply_len: u32,
    queue_size: u16,
) -> (u32, Vec<u8>) {
    mem.write_slice(request, GuestAddress(REQ_ADDR)).unwrap();
    mem.write_slice(&vec![0xee; reply_len as usize], GuestAddress(REPLY_ADDR))
        .unwrap();
    let mut descs = vec![RawDescriptor::from(SplitDescriptor::new(
        REQ_ADDR,
        request.len() as u32,
        0,
        0,
    ))];
    if reply_len > 0 {
        descs.push(RawDescriptor::from(SplitDescriptor::new(
            REPLY_ADDR,
            reply_len,
            VRING_DESC_F_WRITE as u16,
            0,
        )));
    }
    let vq = MockSplitQueue::new(mem, 16);
    let chain = vq.build_desc_chain(&descs).unwrap();
    let ring = super::Ring {
        table: vq.desc_table_addr(),
        size: 16,
    };
    let used = d.handle(chain, ring, queue_size);
    let mut reply = vec![0u8; used as usize];
    mem.read_slice(&mut reply, GuestAddress(REPLY_ADDR))
        .unwrap();
    (used, reply)
}

fn out_header(reply: &[u8]) -> OutHeader {
    OutHeader::from_slice(&reply[..size_of::<OutHeader>()])
        .copied()
        .unwrap()
}

fn init(
    d: &Dispatcher<FakeFs>,
    mem: &GuestMemoryMmap<crate::vhost::backend::Logged>,
    queue_size: u16,
) -> InitOut {
    let arg = InitIn {
        major: 7,
        minor: 38,
        max_readahead: 0x20000,
        flags: (FsOptions::MAX_PAGES | FsOptions::BIG_WRITES | FsOptions::ASYNC_READ).bits() as u32,
    };
    let req = message(
        header(Opcode::Init, 1, size_of::<InitIn>()),
        &[arg.as_slice()],
    );
    let (used, reply) = serve(d, mem, &req, 16 + 64, queue_size);
    assert_eq!(used, 80);
    let h = out_header(&reply);
    assert_eq!((h.len, h.error, h.unique), (80, 0, 1));
    *InitOut::from_slice(&reply[16..]).unwrap()
}

fn read_req(unique: u64, offset: u64, size: u32) -> Vec<u8> {
    let arg = ReadIn {
        fh: 3,
        offset,
        size,
        ..Default::default()
    };
    message(
        header(Opcode::Read, unique, size_of::<ReadIn>()),
        &[arg.as_slice()],
    )
}

#[test]
fn init_reply_caps_max_pages_by_queue_size() {
    let mem = memory();
    let d = Dispatcher::new(FakeFs::default(), 1020);
    let out = init(&d, &mem, 1024);
    assert_eq!((out.major, out.minor), (7, 38));
    assert_eq!(out.max_pages, 1020);
    assert_eq!(out.max_write, 1020 * 4096);
    assert_eq!(out.max_readahead, 0x20000);
    assert_eq!(out.time_gran, 1);
    let flags = FsOptions::from_bits_truncate(u64::from(out.flags));
    assert!(flags.contains(FsOptions::MAX_PAGES | FsOptions::BIG_WRITES | FsOptions::ASYNC_READ));

    let out = init(&d, &mem, 128);
    assert_eq!(out.max_pages, 124);
    assert_eq!(d.limits().max_write, 124 * 4096);

    let d = Dispatcher::new(FakeFs::default(), 32);
    assert_eq!(init(&d, &mem, 1024).max_pages, 32);
}

#[test]
fn read_reply_carries_header_and_data() {
    let mem = memory();
    let d = Dispatcher::new(FakeFs::default(), 1020);
    init(&d, &mem, 1024);
    let (used, reply) = serve(&d, &mem, &read_req(7, 100, 300), 16 + 300, 1024);
    assert_eq!(used, 316);
    let h = out_header(&reply);
    assert_eq!((h.len, h.error, h.unique), (316, 0, 7));
    let expect: Vec<u8> = (100..400u64).map(|i| (i % 251) as u8).collect();
    assert_eq!(&reply[16..], &expect[..]);

    // Short read at end of file.
    let (used, reply) = serve(&d, &mem, &read_req(8, 4900, 4096), 16 + 4096, 1024);
    assert_eq!(used, 116);
    assert_eq!(out_header(&reply).len, 116);
}

#[test]
fn oversized_or_unbuffered_reads_get_einval() {
    let mem = memory();
    let d = Dispatcher::new(FakeFs::default(), 32);
    init(&d, &mem, 1024);
    let (_, reply) = serve(
        &d,
        &mem,
        &read_req(9, 0, 32 * 4096 + 1),
        16 + 32 * 4096 + 1,
        1024,
    );
    assert_eq!(out_header(&reply).error, -libc::EINVAL);
    // Reply buffer smaller than the requested size.
    let (used, reply) = serve(&d, &mem, &read_req(10, 0, 4096), 100, 1024);
    assert_eq!(used, 16);
    assert_eq!(out_header(&reply).error, -libc::EINVAL);
    assert_eq!(out_header(&reply).unique, 10);
    // No room even for a header: nothing written.
    assert_eq!(serve(&d, &mem, &read_req(11, 0, 4096), 8, 1024).0, 0);
}

#[test]
fn write_larger_than_fuse_backend_cap_is_served() {
    let mem = memory();
    let d = Dispatcher::new(FakeFs::default(), 1020);
    init(&d, &mem, 1024);
    let size = 2 << 20; // 2 MiB: fuse-backend-rs's Server would answer ENOMEM.
    let payload: Vec<u8> = (0..size).map(|i| (i % 253) as u8).collect();
    let arg = WriteIn {
        fh: 3,
        size: size as u32,
        ..Default::default()
    };
    let req = message(
        header(Opcode::Write, 12, size_of::<WriteIn>() + size),
        &[arg.as_slice(), &payload],
    );
    let (used, reply) = serve(&d, &mem, &req, 16 + 8, 1024);
    assert_eq!(used, 24);
    let h = out_header(&reply);
    assert_eq!((h.len, h.error, h.unique), (24, 0, 12));
    assert_eq!(
        WriteOut::from_slice(&reply[16..]).unwrap().size,
        size as u32
    );
    assert!(*d.fs_for_tests().written.lock().unwrap() == payload);

    // Claiming more payload than the chain carries is rejected.
    let arg = WriteIn {
        size: 8192,
        ..Default::default()
    };
    let req = message(
        header(Opcode::Write, 13, 40 + 100),
        &[arg.as_slice(), &[1; 100]],
    );
    let (_, reply) = serve(&d, &mem, &req, 24, 1024);
    assert_eq!(out_header(&reply).error, -libc::EINVAL);
}

#[test]
fn malformed_messages_get_errno_or_are_dropped() {
    let mem = memory();
    let d = Dispatcher::new(FakeFs::default(), 1020);
    // Truncated header: no reply at all.
    assert_eq!(serve(&d, &mem, &[0u8; 20], 64, 1024).0, 0);
    // Truncated INIT body.
    let req = message(header(Opcode::Init, 20, 4), &[&[7, 0, 0, 0]]);
    let (_, reply) = serve(&d, &mem, &req, 80, 1024);
    assert_eq!(out_header(&reply).error, -libc::EINVAL);
    assert_eq!(out_header(&reply).unique, 20);
    // SYMLINK without a second name: fuse-backend-rs returns Err without replying.
    let req = message(header(Opcode::Symlink, 21, 3), &[b"ab\0"]);
    let (used, reply) = serve(&d, &mem, &req, 160, 1024);
    assert_eq!(used, 16);
    assert_eq!(out_header(&reply).error, -libc::EINVAL);
    assert_eq!(out_header(&reply).unique, 21);
    // Opcodes in the gaps of fuse-backend-rs's enum, and unknown ones: ENOSYS.
    for op in [7u32, 19, 53, 4096] {
        let mut h = header(Opcode::Lookup, 22, 0);
        h.opcode = op;
        let (_, reply) = serve(&d, &mem, h.as_slice(), 16, 1024);
        assert_eq!(out_header(&reply).error, -libc::ENOSYS, "opcode {op}");
    }
    // Truncated FORGET: never a reply.
    let req = message(header(Opcode::Forget, 23, 2), &[&[1, 2]]);
    assert_eq!(serve(&d, &mem, &req, 16, 1024).0, 0);
    // Ordinary ops go through fuse-backend-rs.
    let req = message(header(Opcode::Lookup, 24, 4), &[b"abc\0"]);
    let (_, reply) = serve(&d, &mem, &req, 160, 1024);
    assert_eq!(out_header(&reply).error, -libc::ENOENT);
    // A panicking filesystem answers EIO and the dispatcher keeps serving.
    let req = message(header(Opcode::Lookup, 25, 6), &[b"panic\0"]);
    let (_, reply) = serve(&d, &mem, &req, 160, 1024);
    assert_eq!(out_header(&reply).error, -libc::EIO);
    let (_, reply) = serve(&d, &mem, &read_req(26, 0, 10), 26, 1024);
    assert_eq!(out_header(&reply).len, 26);
}

#[test]
fn backend_serves_a_queue_through_the_worker_pool() {
    use super::backend::{FsBackend, Vring};
    use vhost_user_backend::{VhostUserBackend, VringT};
    use vm_memory::GuestMemoryAtomic;
    use vmm_sys_util::epoll::EventSet;

    let mem = memory();
    let vq = MockSplitQueue::new(&mem, 16);
    let read = read_req(31, 10, 100);
    let lookup = message(header(Opcode::Lookup, 32, 4), &[b"abc\0"]);
    // UNLINK is costly enough for a worker (the other two are served on the queue thread).
    let unlink = message(header(Opcode::Unlink, 33, 2), &[b"x\0"]);
    let (req2, reply2) = (REQ_ADDR + 0x1000, REPLY_ADDR + 0x1000);
    let (req3, reply3) = (REQ_ADDR + 0x2000, REPLY_ADDR + 0x2000);
    mem.write_slice(&read, GuestAddress(REQ_ADDR)).unwrap();
    mem.write_slice(&lookup, GuestAddress(req2)).unwrap();
    mem.write_slice(&unlink, GuestAddress(req3)).unwrap();
    let (next, wr) = (VRING_DESC_F_NEXT as u16, VRING_DESC_F_WRITE as u16);
    let descs = [
        SplitDescriptor::new(REQ_ADDR, read.len() as u32, next, 1),
        SplitDescriptor::new(REPLY_ADDR, 116, wr, 0),
        SplitDescriptor::new(req2, lookup.len() as u32, next, 3),
        SplitDescriptor::new(reply2, 144, wr, 0),
        SplitDescriptor::new(req3, unlink.len() as u32, next, 5),
        SplitDescriptor::new(reply3, 16, wr, 0),
    ]
    .map(RawDescriptor::from);
    vq.add_desc_chains(&descs, 0).unwrap();

    let atomic = GuestMemoryAtomic::new(mem.clone());
    let vring = Vring::new(atomic.clone(), 16).unwrap();
    vring.set_queue_size(16);
    vring
        .set_queue_info(vq.desc_table_addr().0, vq.avail_addr().0, vq.used_addr().0)
        .unwrap();
    vring.set_queue_ready(true);
    vring.set_enabled(true);

    let backend = FsBackend::new(
        Dispatcher::new(FakeFs::default(), 1020),
        1,
        2,
        None,
        Default::default(),
    )
    .unwrap();
    assert_eq!(backend.num_queues(), 2);
    assert_eq!(backend.queues_per_thread(), vec![1, 2]);
    backend.update_memory(atomic).unwrap();
    backend
        .handle_event(0, EventSet::IN, std::slice::from_ref(&vring), 1)
        .unwrap();
    for _ in 0..500 {
        if vq.used().idx().load() == 3 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(vq.used().idx().load(), 3);
    let mut used: Vec<(u32, u32)> = (0..3)
        .map(|i| {
            let e = vq.used().ring().ref_at(i).unwrap().load();
            (e.id(), e.len())
        })
        .collect();
    used.sort();
    assert_eq!(used, vec![(0, 116), (2, 16), (4, 16)]);
    let mut reply = [0u8; 116];
    mem.read_slice(&mut reply, GuestAddress(REPLY_ADDR))
        .unwrap();
    assert_eq!(
        (out_header(&reply).unique, out_header(&reply).error),
        (31, 0)
    );
    assert_eq!(reply[16], 10);
    let mut reply = [0u8; 16];
    mem.read_slice(&mut reply, GuestAddress(reply2)).unwrap();
    assert_eq!(out_header(&reply).error, -libc::ENOENT);
    backend.shutdown();
}

#[test]
fn costly_requests_are_told_apart_from_cheap_ones() {
    use super::dispatch::Place;
    let d = Dispatcher::new(FakeFs::default(), 1020);
    let mem = memory();
    // Where the dispatcher would have the request served (the chain comes back unserved);
    // `None` when it dropped the chain without asking.
    let placement =
        |chain: virtio_queue::DescriptorChain<&GuestMemoryMmap<crate::vhost::backend::Logged>>,
         table| {
            let ring = super::Ring { table, size: 16 };
            let mut seen = None;
            let r = d.serve_or_defer(chain, ring, 16, |p| {
                seen = Some(p);
                false
            });
            assert!(
                r.is_err() == seen.is_some(),
                "a chain asked about comes back"
            );
            seen.unwrap_or(Place::Here)
        };
    let place = |msg: &[u8]| {
        mem.write_slice(msg, GuestAddress(REQ_ADDR)).unwrap();
        let vq = MockSplitQueue::new(&mem, 16);
        let descs = [RawDescriptor::from(SplitDescriptor::new(
            REQ_ADDR,
            msg.len() as u32,
            0,
            0,
        ))];
        placement(vq.build_desc_chain(&descs).unwrap(), vq.desc_table_addr())
    };
    let heavy = |msg: &[u8]| place(msg) == Place::Worker;
    assert!(!heavy(&read_req(1, 0, 4096)));
    assert!(heavy(&read_req(1, 0, 64 * 1024)));
    let write = |size: u32| {
        let arg = WriteIn {
            fh: 1,
            offset: 0,
            size,
            ..Default::default()
        };
        message(
            header(Opcode::Write, 2, size_of::<WriteIn>()),
            &[arg.as_slice()],
        )
    };
    assert!(!heavy(&write(128 * 1024)));
    assert!(heavy(&write(1024 * 1024)));
    assert!(!heavy(&message(
        header(Opcode::Getattr, 3, 16),
        &[&[0u8; 16]]
    )));
    assert!(!heavy(&message(header(Opcode::Lookup, 4, 2), &[b"x\0"])));
    assert!(!heavy(&message(header(Opcode::Unlink, 5, 2), &[b"x\0"])));
    assert!(heavy(&message(
        header(Opcode::Readdirplus, 6, 40),
        &[&[0u8; 40]]
    )));
    // A request too short for its header is dropped where it is, never handed on.
    assert_eq!(place(&read_req(1, 0, 1 << 20)[..20]), Place::Here);
    // A Linux guest's layout: the header alone, the arguments in the next descriptor.
    let split = |msg: &[u8]| {
        mem.write_slice(msg, GuestAddress(REQ_ADDR)).unwrap();
        let vq = MockSplitQueue::new(&mem, 16);
        let hdr = size_of::<InHeader>();
        let descs = [
            RawDescriptor::from(SplitDescriptor::new(
                REQ_ADDR,
                hdr as u32,
                VRING_DESC_F_NEXT as u16,
                1,
            )),
            RawDescriptor::from(SplitDescriptor::new(
                REQ_ADDR + hdr as u64,
                (msg.len() - hdr) as u32,
                0,
                0,
            )),
        ];
        placement(vq.build_desc_chain(&descs).unwrap(), vq.desc_table_addr())
    };
    assert_eq!(split(&read_req(1, 0, 1 << 20)), Place::Worker);
    assert_eq!(split(&read_req(1, 0, 4096)), Place::Here);
    assert_eq!(split(&write(1 << 20)), Place::Worker);
    assert_eq!(split(&write(4096)), Place::Here);
    // A lock wait gets a thread of its own; a lock attempt that cannot wait, a worker.
    let lk = [0u8; 48];
    assert_eq!(
        place(&message(header(Opcode::Setlkw, 7, 48), &[&lk])),
        Place::OwnThread
    );
    assert_eq!(
        place(&message(header(Opcode::Setlk, 8, 48), &[&lk])),
        Place::Worker
    );
}

/// The protocol server parses the header the dispatcher read, never guest memory again: a guest that
/// rewrites its request after the dispatcher looked at it cannot change what is served.
#[test]
fn a_request_is_decoded_from_guest_memory_once() {
    let mem = memory();
    // What the dispatcher read: GETATTR (the fake filesystem answers ENOSYS).
    let seen = header(Opcode::Getattr, 7, 16);
    // What guest memory holds by the time the request is served: a LOOKUP of "x" (ENOENT).
    let rewritten = message(header(Opcode::Lookup, 7, 2), &[b"x\0"]);
    mem.write_slice(&rewritten, GuestAddress(REQ_ADDR)).unwrap();
    let descs = [
        RawDescriptor::from(SplitDescriptor::new(
            REQ_ADDR,
            (rewritten.len() + 14) as u32,
            0,
            0,
        )),
        RawDescriptor::from(SplitDescriptor::new(
            REPLY_ADDR,
            256,
            VRING_DESC_F_WRITE as u16,
            0,
        )),
    ];
    let vq = MockSplitQueue::new(&mem, 16);
    let chain = vq.build_desc_chain(&descs).unwrap();
    let ring = super::Ring {
        table: vq.desc_table_addr(),
        size: 16,
    };
    let parts = super::chain::Parts::of_chain(&mem, &chain, ring).unwrap();
    let mut r = parts.reader();
    r.read_obj::<InHeader>().unwrap();
    let server = crate::fuse::Server::new(std::sync::Arc::new(FakeFs::default()), 256);
    let n = server.serve(&seen, r, parts.writer(), &crate::fuse::Plain(256));
    let mut reply = vec![0u8; n];
    mem.read_slice(&mut reply, GuestAddress(REPLY_ADDR))
        .unwrap();
    let h = out_header(&reply);
    assert_eq!((h.unique, h.error), (7, -libc::ENOSYS), "served as GETATTR");
}

#[test]
fn a_request_served_elsewhere_is_the_one_the_walk_found() {
    // The queue thread walks a 4 KiB READ and hands it on (as it does a costly request);
    // before the other thread serves it, the guest rewrites the request's header and points
    // its reply descriptor elsewhere. The request served is the one walked: its unique id,
    // its reply buffer. (Walking the chain again would put the reply at `MOVED`.)
    const MOVED: u64 = 0x40_0000;
    let d = Dispatcher::new(FakeFs::default(), 1020);
    let mem = memory();
    init(&d, &mem, 16);
    let request = read_req(41, 0, 4096);
    mem.write_slice(&request, GuestAddress(REQ_ADDR)).unwrap();
    for at in [REPLY_ADDR, MOVED] {
        mem.write_slice(&[0xee; 4112], GuestAddress(at)).unwrap();
    }
    let descs = [
        RawDescriptor::from(SplitDescriptor::new(
            REQ_ADDR,
            request.len() as u32,
            VRING_DESC_F_NEXT as u16,
            1,
        )),
        RawDescriptor::from(SplitDescriptor::new(
            REPLY_ADDR,
            4112,
            VRING_DESC_F_WRITE as u16,
            0,
        )),
    ];
    let vq = MockSplitQueue::new(&mem, 16);
    let chain = vq.build_desc_chain(&descs).unwrap();
    let ring = super::Ring {
        table: vq.desc_table_addr(),
        size: 16,
    };
    let Err((deferred, _)) = d.serve_or_defer(chain, ring, 16, |_| false) else {
        panic!("the request was served where it was asked not to be");
    };
    // The guest's rewrites: a new unique id in the header, the reply descriptor (entry
    // `head + 1` of the table, 16 bytes each, its address first) moved.
    let mut moved_header = request.clone();
    moved_header[8..16].copy_from_slice(&99u64.to_le_bytes());
    mem.write_slice(&moved_header, GuestAddress(REQ_ADDR))
        .unwrap();
    let reply_desc = vq.desc_table_addr().0 + 16 * (u64::from(deferred.head()) + 1);
    mem.write_obj(MOVED, GuestAddress(reply_desc)).unwrap();

    let used = d.serve_deferred(*deferred, 16);
    assert_eq!(used, 4112);
    let mut reply = vec![0u8; 4112];
    mem.read_slice(&mut reply, GuestAddress(REPLY_ADDR))
        .unwrap();
    assert_eq!(
        (out_header(&reply).unique, out_header(&reply).error),
        (41, 0)
    );
    assert!(reply[16..]
        .iter()
        .enumerate()
        .all(|(i, &b)| b == (i % 251) as u8));
    mem.read_slice(&mut reply, GuestAddress(MOVED)).unwrap();
    assert!(
        reply.iter().all(|&b| b == 0xee),
        "nothing written where the guest moved the reply"
    );
}
