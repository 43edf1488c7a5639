//! The requests the router serves get the replies fuse-backend-rs's `Server` gives, byte for
//! byte: each request is served by this project's protocol server (through plain byte
//! buffers) and by a `Server` over the same filesystem (through a descriptor chain), from the
//! same bytes, and the replies are compared (successes, errors, listings cut by the guest's
//! buffer, malformed names).

use std::mem::size_of;
use std::sync::Arc;

use fuse_backend_rs::abi::fuse_abi::{
    AccessIn, BatchForgetIn, CreateIn, FallocateIn, FlushIn, ForgetIn, ForgetOne, FsyncIn,
    GetattrIn, GetxattrIn, InHeader, LseekIn, MkdirIn, Opcode, OpenIn, ReadIn, ReleaseIn,
    SetattrIn, SetattrValid,
};
use fuse_backend_rs::api::server::Server;
use fuse_backend_rs::transport::{Reader, VirtioFsWriter};
use virtio_bindings::virtio_ring::VRING_DESC_F_WRITE;
use virtio_queue::desc::{split::Descriptor as SplitDescriptor, RawDescriptor};
use virtio_queue::mock::MockSplitQueue;
use vm_memory::{ByteValued, Bytes, GuestAddress, GuestMemoryMmap};

use super::oracle_fs::{Echo, Ours};

type Mem = GuestMemoryMmap<()>;

const REQ_ADDR: u64 = 0x10_0000;
const REPLY_ADDR: u64 = 0x80_0000;

fn header(op: Opcode, node: u64, body_len: usize) -> InHeader {
    InHeader {
        len: (size_of::<InHeader>() + body_len) as u32,
        opcode: op as u32,
        unique: 0x1234_5678,
        nodeid: node,
        uid: 1000,
        gid: 1000,
        pid: 42,
        ..Default::default()
    }
}

fn request(op: Opcode, node: u64, parts: &[&[u8]]) -> Vec<u8> {
    let body: Vec<u8> = parts.concat();
    let mut v = header(op, node, body.len()).as_slice().to_vec();
    v.extend_from_slice(&body);
    v
}

/// The chain: the request in one readable descriptor, `reply_len` writable bytes.
fn chain_of<'m>(
    mem: &'m Mem,
    vq: &'m MockSplitQueue<'m, Mem>,
    request: &[u8],
    reply_len: u32,
) -> virtio_queue::DescriptorChain<&'m Mem> {
    mem.write_slice(request, GuestAddress(REQ_ADDR)).unwrap();
    mem.write_slice(&vec![0xee; reply_len as usize], GuestAddress(REPLY_ADDR))
        .unwrap();
    let descs = [
        RawDescriptor::from(SplitDescriptor::new(
            REQ_ADDR,
            request.len() as u32,
            virtio_bindings::virtio_ring::VRING_DESC_F_NEXT as u16,
            1,
        )),
        RawDescriptor::from(SplitDescriptor::new(
            REPLY_ADDR,
            reply_len,
            VRING_DESC_F_WRITE as u16,
            0,
        )),
    ];
    vq.build_desc_chain(&descs).unwrap()
}

fn reply_at(mem: &Mem, used: usize) -> Vec<u8> {
    let mut reply = vec![0u8; used];
    mem.read_slice(&mut reply, GuestAddress(REPLY_ADDR))
        .unwrap();
    reply
}

/// The errno the protocol layer answers a request the `Server` gave up on with.
fn errno_of(e: &fuse_backend_rs::Error) -> i32 {
    use fuse_backend_rs::Error as E;
    match e {
        E::DecodeMessage(_)
        | E::MissingParameter
        | E::InvalidCString(_)
        | E::InvalidHeaderLength
        | E::InvalidXattrSize(_)
        | E::InvalidMessage(_) => libc::EINVAL,
        E::FailedToRemapID(_) => libc::EPERM,
        _ => libc::EIO,
    }
}

/// (used length, reply bytes) from this project's protocol server (driven with plain byte
/// buffers, as a transport that is not virtio would) and from fuse-backend-rs's `Server`
/// (over a descriptor chain, the oracle).
fn both(request: &[u8], reply_len: u32) -> ((usize, Vec<u8>), (usize, Vec<u8>)) {
    let ours = super::Server::new(Arc::new(Ours(Echo)), 256);
    let mut req = request.to_vec();
    let mut reply = vec![0xee; reply_len as usize];
    let used = ours.serve_bytes(&mut req, &mut reply, 256);
    reply.truncate(used);
    let ours = (used, reply);
    let mem = Mem::from_ranges(&[(GuestAddress(0), 0x200_0000)]).unwrap();
    let vq = MockSplitQueue::new(&mem, 16);
    let server = Server::new(Arc::new(Echo));
    let chain = chain_of(&mem, &vq, request, reply_len);
    let r = Reader::from_descriptor_chain(&mem, chain.clone()).unwrap();
    let w = VirtioFsWriter::new(&mem, chain.clone()).unwrap();
    let used = match server.handle_message(r, w.into(), None, None) {
        Ok(n) => n,
        // A `Server` that gives up (a reply that does not fit, a malformed request) is
        // answered by the protocol layer with the errno it maps the failure to.
        Err(e) => {
            let mut w: fuse_backend_rs::transport::Writer<'_, _> =
                VirtioFsWriter::new(&mem, chain).unwrap().into();
            super::reply::reply_errno(&mut w, 0x1234_5678, errno_of(&e)).unwrap_or(0)
        }
    };
    let theirs = (used, reply_at(&mem, used));
    (ours, theirs)
}

fn same(what: &str, request: &[u8], reply_len: u32) {
    let (ours, theirs) = both(request, reply_len);
    assert_eq!(ours, theirs, "{what}");
}

#[test]
fn metadata_replies_are_the_servers_byte_for_byte() {
    use Opcode as O;
    let name = b"file\0".as_slice();
    let failing = b"e\x0d\0".as_slice(); // EACCES
    for n in [name, failing] {
        same("lookup", &request(O::Lookup, 9, &[n]), 4096);
        same("unlink", &request(O::Unlink, 9, &[n]), 4096);
        same("rmdir", &request(O::Rmdir, 9, &[n]), 4096);
        let mk = MkdirIn {
            mode: 0o755,
            umask: 0o22,
        };
        same("mkdir", &request(O::Mkdir, 9, &[mk.as_slice(), n]), 4096);
        let cr = CreateIn {
            flags: libc::O_RDWR as u32,
            mode: 0o644,
            umask: 0o22,
            fuse_flags: 0,
        };
        same("create", &request(O::Create, 9, &[cr.as_slice(), n]), 4096);
    }
    // A name with bytes after its NUL is cut at the NUL, as the Server's bytes_to_cstr does.
    same("name+junk", &request(O::Lookup, 9, &[b"ab\0cd\0"]), 4096);
    for node in [5, 66] {
        for (flags, fh) in [(0, 0), (1, 77)] {
            let g = GetattrIn {
                flags,
                dummy: 0,
                fh,
            };
            same("getattr", &request(O::Getattr, node, &[g.as_slice()]), 4096);
        }
        let s = SetattrIn {
            valid: (SetattrValid::MODE.bits() | 0x40),
            fh: 12,
            mode: 0o600,
            ..Default::default()
        };
        same("setattr", &request(O::Setattr, node, &[s.as_slice()]), 4096);
        let o = OpenIn {
            flags: libc::O_RDONLY as u32,
            fuse_flags: 0,
        };
        same("open", &request(O::Open, node, &[o.as_slice()]), 4096);
        same("opendir", &request(O::Opendir, node, &[o.as_slice()]), 4096);
        let f = FlushIn {
            fh: 3,
            unused: 0,
            padding: 0,
            lock_owner: 9,
        };
        same("flush", &request(O::Flush, node, &[f.as_slice()]), 4096);
        let rel = ReleaseIn {
            fh: 3,
            flags: 0,
            release_flags: 1,
            lock_owner: 9,
        };
        same(
            "release",
            &request(O::Release, node, &[rel.as_slice()]),
            4096,
        );
        same(
            "releasedir",
            &request(O::Releasedir, node, &[rel.as_slice()]),
            4096,
        );
        // Extended attributes: values and lists, size queries, errors, replies that do not fit.
        for (size, reply) in [(0, 4096), (16, 4096), (300, 4096), (300, 100), (64, 16)] {
            let g = GetxattrIn { size, padding: 0 };
            for n in [name, failing] {
                same(
                    "getxattr",
                    &request(O::Getxattr, node, &[g.as_slice(), n]),
                    reply,
                );
            }
            same(
                "listxattr",
                &request(O::Listxattr, node, &[g.as_slice()]),
                reply,
            );
        }
        let g = GetxattrIn {
            size: 8,
            padding: 0,
        };
        same(
            "getxattr, no NUL",
            &request(O::Getxattr, node, &[g.as_slice(), b"abc"]),
            4096,
        );
        same(
            "getxattr, short",
            &request(O::Getxattr, node, &[&[1, 2]]),
            4096,
        );
        for (fh, flags) in [(3, 0), (9, 0), (9, 1)] {
            let f = FsyncIn {
                fh,
                fsync_flags: flags,
                padding: 0,
            };
            same("fsync", &request(O::Fsync, node, &[f.as_slice()]), 4096);
            same(
                "fsyncdir",
                &request(O::Fsyncdir, node, &[f.as_slice()]),
                4096,
            );
        }
        for (fh, mode) in [(30, 0), (31, 0), (30, 1)] {
            let f = FallocateIn {
                fh,
                offset: 10,
                length: 20,
                mode,
                padding: 0,
            };
            same(
                "fallocate",
                &request(O::Fallocate, node, &[f.as_slice()]),
                4096,
            );
        }
        let l = LseekIn {
            fh: 4,
            offset: 100,
            whence: libc::SEEK_DATA as u32,
            padding: 0,
        };
        same("lseek", &request(O::Lseek, node, &[l.as_slice()]), 4096);
        same(
            "lseek, no room",
            &request(O::Lseek, node, &[l.as_slice()]),
            20,
        );
        for mask in [0, 2, 4] {
            let a = AccessIn { mask, padding: 0 };
            same("access", &request(O::Access, node, &[a.as_slice()]), 4096);
        }
        same("statfs", &request(O::Statfs, node, &[]), 4096);
        same("statfs, no room", &request(O::Statfs, node, &[]), 64);
        // Listings from several offsets, into buffers that cut them at every padding case.
        for (offset, size) in [
            (0, 4096),
            (3, 300),
            (10, 97),
            (39, 4096),
            (40, 4096),
            (0, 0),
        ] {
            let r = ReadIn {
                offset,
                size,
                ..Default::default()
            };
            same("readdir", &request(O::Readdir, node, &[r.as_slice()]), 4096);
            same(
                "readdirplus",
                &request(O::Readdirplus, node, &[r.as_slice()]),
                4096,
            );
        }
        // A listing larger than the reply buffer: ENOMEM from both.
        let r = ReadIn {
            size: 8192,
            ..Default::default()
        };
        same(
            "readdir ENOMEM",
            &request(O::Readdirplus, node, &[r.as_slice()]),
            4096,
        );
    }
    // A length over the Server's cap (1 MiB and 4 KiB): ENOMEM from both, whatever follows.
    let mut big = request(O::Lookup, 9, &[name]);
    big[..4].copy_from_slice(&(2u32 << 20).to_ne_bytes());
    same("oversized", &big, 4096);
    // No replies to forgets.
    let f = ForgetIn { nlookup: 3 };
    same("forget", &request(O::Forget, 9, &[f.as_slice()]), 4096);
    let b = BatchForgetIn { count: 2, dummy: 0 };
    let one = ForgetOne {
        nodeid: 5,
        nlookup: 1,
    };
    same(
        "batch_forget",
        &request(
            O::BatchForget,
            0,
            &[b.as_slice(), one.as_slice(), one.as_slice()],
        ),
        4096,
    );
}

/// The opcodes fuse-backend-rs's `Server` answered before the router served every opcode:
/// the same replies, byte for byte.
#[test]
fn the_servers_former_opcodes_get_its_replies() {
    use fuse_backend_rs::abi::fuse_abi::{LinkIn, MknodIn, Rename2In, RenameIn};
    use Opcode as O;
    for node in [5, 66] {
        same("readlink", &request(O::Readlink, node, &[]), 4096);
        same("readlink, no room", &request(O::Readlink, node, &[]), 20);
    }
    for (name, target) in [
        (b"ln\0".as_slice(), b"/some/where\0".as_slice()),
        (b"e\x0d\0", b"x\0"),
        (b"ln\0", b"ex\0"),
        (b"ln\0", b"no-nul"),
        (b"ln\0", b""),
        (b"no-nul-at-all", b""),
    ] {
        same("symlink", &request(O::Symlink, 9, &[name, target]), 4096);
        // No room for the entry: refused before the filesystem acts (EINVAL), where the
        // `Server` made the link and then failed to say so (EIO).
        let ((used, reply), _) = both(&request(O::Symlink, 9, &[name, target]), 100);
        assert_eq!(used, 16);
        assert_eq!(
            i32::from_ne_bytes(reply[4..8].try_into().unwrap()),
            -libc::EINVAL
        );
    }
    for name in [b"dev\0".as_slice(), b"e\x11\0", b"unterminated"] {
        let m = MknodIn {
            mode: libc::S_IFCHR | 0o600,
            rdev: 0x0103,
            umask: 0o22,
            padding: 0,
        };
        same("mknod", &request(O::Mknod, 9, &[m.as_slice(), name]), 4096);
        same("mknod, short", &request(O::Mknod, 9, &[&[1, 2, 3]]), 4096);
        let l = LinkIn { oldnodeid: 77 };
        same("link", &request(O::Link, 9, &[l.as_slice(), name]), 4096);
        same("removexattr", &request(O::Removexattr, 9, &[name]), 4096);
    }
    for (old, new) in [
        (b"a\0".as_slice(), b"b\0".as_slice()),
        (b"abc\0", b"defg\0"),
        (b"e\x02\0", b"b\0"),
        (b"a\0", b""),
        (b"a\0", b"b"),
    ] {
        let r = RenameIn { newdir: 12 };
        same(
            "rename",
            &request(O::Rename, 9, &[r.as_slice(), old, new]),
            4096,
        );
        for flags in [0, libc::RENAME_NOREPLACE, libc::RENAME_EXCHANGE | 0x100] {
            let r = Rename2In {
                newdir: 12,
                flags,
                padding: 0,
            };
            same(
                "rename2",
                &request(O::Rename2, 9, &[r.as_slice(), old, new]),
                4096,
            );
        }
    }
    // DESTROY: the `Server` writes the header but reports 0 bytes written; the guest is told
    // the 16 it got.
    let ((used, reply), _) = both(&request(O::Destroy, 0, &[]), 4096);
    let done = fuse_backend_rs::abi::fuse_abi::OutHeader {
        len: 16,
        error: 0,
        unique: 0x1234_5678,
    };
    assert_eq!((used, &reply[..]), (16, done.as_slice()));
}
