//! Turns fuzzer bytes into FUSE requests. A session input is a short header (option set, INIT
//! arguments) then records, one request each: an opcode byte, a caller byte, then the opcode's
//! arguments. Node ids, handles and names are mostly picked from what the session has learned
//! or from small dictionaries, so that requests reach deep into the filesystem; any of them
//! can also be raw. Every read past the end yields zeros, so every input is a valid session.
//! Knows the FUSE wire format, nothing of descriptors or of the daemon.

use std::mem::size_of;

use fuse_backend_rs::abi::fuse_abi::{EntryOut, InHeader, OpenOut, OutHeader};
use vm_memory::ByteValued;

pub use crate::input::Input;

/// Opcodes a record can name (the byte is taken modulo the table's length). `RAW` sends any
/// opcode with any body.
pub const OPS: &[u32] = &[
    1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 20, 21, 22, 23, 24, 25, 26, 27, 28,
    29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52,
    RAW,
];

/// Not an opcode: a record with a raw opcode and body.
pub const RAW: u32 = u32::MAX;
/// FUSE_SETLKW, served on a thread of its own (it may wait).
pub const SETLKW: u32 = 33;
/// FUSE_INTERRUPT.
pub const INTERRUPT: u32 = 36;
/// FUSE_DESTROY.
pub const DESTROY: u32 = 38;
/// FUSE_INIT.
pub const INIT: u32 = 26;
/// FUSE_INIT_EXT (flags bit 30): `fuse_init_in` has a second part.
const INIT_EXT: u32 = 1 << 30;

/// Names the guest may use, plus `n0`…`n15` and raw bytes (see [`State::name`]).
const NAMES: &[&[u8]] = &[
    b"d",
    b"f0",
    b"f1",
    b"d/f",
    b"link",
    b"esc",
    b"abs",
    b"up",
    b"root",
    b"fifo",
    b"hl",
    b"x",
    b"ro",
    b"rodir",
    b"empty",
    b"g",
    b"h",
    b"e",
    b".",
    b"..",
    b"",
    b"sentinel",
];

/// Symlink targets.
const TARGETS: &[&[u8]] = &[
    b"f0",
    b"d",
    b"..",
    b"../sentinel",
    b"../../sentinel/keep",
    b"/",
    b"/etc/passwd",
    b"d/../..",
    b"link",
    b"self",
    b"",
];

/// Extended attribute names.
const XATTRS: &[&[u8]] = &[
    b"user.a",
    b"user.b",
    b"trusted.x",
    b"security.capability",
    b"security.selinux",
    b"system.posix_acl_access",
    b"system.posix_acl_default",
    b"user.",
    b"",
];

/// IOCTL commands: the inode-flag and fsxattr ones the daemon passes on, and others.
const IOCTLS: &[u32] = &[
    0x8008_6601,
    0x4008_6602,
    0x8004_6601,
    0x4004_6602,
    0x801c_581f,
    0x401c_5820,
    0x5401,
    0xc020_660b,
];

/// What a session has learned from replies, to aim later requests at real nodes and handles.
pub struct State {
    /// Node ids the guest was given (the root first).
    pub nodes: Vec<u64>,
    /// File and directory handles the guest was given.
    pub handles: Vec<u64>,
    /// Unique ids of SETLKW requests still waiting.
    pub waiting: Vec<u64>,
    next_unique: u64,
    /// Whether device nodes may be created (the branches are on a `nodev` mount).
    nodev: bool,
}

/// One request, ready for guest memory.
pub struct Request {
    /// Header and body.
    pub bytes: Vec<u8>,
    /// Its opcode.
    pub opcode: u32,
    /// Its unique id.
    pub unique: u64,
}

const MAX_LEARNED: usize = 64;

impl Request {
    /// The node id in its header (0 if the header is cut short).
    pub fn node(&self) -> u64 {
        let mut b = [0u8; 8];
        if let Some(s) = self.bytes.get(16..24) {
            b.copy_from_slice(s);
        }
        u64::from_le_bytes(b)
    }
}

impl State {
    /// A new session; `nodev` as [`crate::env::Env::nodev`].
    pub fn new(nodev: bool) -> Self {
        State {
            nodes: vec![1],
            handles: Vec::new(),
            waiting: Vec::new(),
            next_unique: 1,
            nodev,
        }
    }

    fn pick(list: &[u64], b: u8, input: &mut Input<'_>) -> u64 {
        match b {
            0..=0xef if list.is_empty() => u64::from(b),
            0..=0xef => list[b as usize % list.len()],
            0xf0 => u64::MAX,
            _ => input.u64(),
        }
    }

    /// A node id: a learned one, or raw.
    pub fn node(&self, input: &mut Input<'_>) -> u64 {
        let b = input.u8();
        Self::pick(&self.nodes, b, input)
    }

    /// A handle: a learned one, or raw.
    pub fn handle(&self, input: &mut Input<'_>) -> u64 {
        let b = input.u8();
        Self::pick(&self.handles, b, input)
    }

    /// A name: from the dictionary, `n0`…`n15`, or raw bytes (which may hold `/` or NUL).
    pub fn name(&self, input: &mut Input<'_>) -> Vec<u8> {
        let b = input.u8();
        match b as usize {
            i if i < NAMES.len() => NAMES[i].to_vec(),
            0xfd => vec![b'n'; 255],
            0xfe => vec![b'n'; 256],
            0xff => input.blob().to_vec(),
            i => format!("n{}", i % 16).into_bytes(),
        }
    }

    fn from_list(list: &[&[u8]], input: &mut Input<'_>) -> Vec<u8> {
        let b = input.u8() as usize;
        if b < list.len() {
            list[b].to_vec()
        } else if b < 0xf0 {
            list[b % list.len()].to_vec()
        } else {
            input.blob().to_vec()
        }
    }

    /// A file mode: a type (device types only on a `nodev` mount) and permission bits.
    fn mode(&self, input: &mut Input<'_>) -> u32 {
        let kind = match input.u8() % 8 {
            0 | 1 => libc::S_IFREG,
            2 => libc::S_IFIFO,
            3 => libc::S_IFSOCK,
            4 if self.nodev => libc::S_IFCHR,
            5 if self.nodev => libc::S_IFBLK,
            6 => libc::S_IFDIR,
            7 => 0,
            _ => libc::S_IFREG,
        };
        kind | u32::from(input.u16() & 0o7777)
    }

    fn unique(&mut self) -> u64 {
        let u = self.next_unique;
        self.next_unique += 1;
        u
    }

    /// The request described by the next record of `input` (header honest about the length).
    pub fn request(&mut self, input: &mut Input<'_>) -> Request {
        let mut opcode = OPS[input.u8() as usize % OPS.len()];
        let who = input.u8();
        // 0xff: no caller (uid and gid -1), as a guest that took FUSE_ALLOW_IDMAP sends for
        // requests that create nothing.
        let (uid, gid) = if who == 0xff {
            (u32::MAX, u32::MAX)
        } else if who < 0x80 {
            (0, 0)
        } else {
            (1000 + u32::from(who & 3), 1000 + u32::from((who >> 2) & 3))
        };
        let node = self.node(input);
        let mut b = Body::default();
        match opcode {
            // LOOKUP, UNLINK, RMDIR, REMOVEXATTR-like: a name.
            1 | 10 | 11 => {
                b.name(&self.name(input));
            }
            2 => {
                b.u64(input.size());
            }
            3 => {
                let flags = u32::from(input.u8() & 1);
                b.u32(flags).u32(0).u64(self.handle(input));
            }
            4 => {
                let (valid, fh) = (input.u32() & 0x1ffff, self.handle(input));
                let (size, owner) = (input.size(), u64::from(input.u8()));
                b.u32(valid).u32(0).u64(fh).u64(size).u64(owner);
                b.u64(input.u64()).u64(input.u64()).u64(input.u64());
                b.u32(input.u32()).u32(input.u32()).u32(input.u32());
                b.u32(self.mode(input)).u32(0);
                b.u32(input.u32() % 1004).u32(input.u32() % 1004).u32(0);
            }
            5 | 17 | DESTROY => {}
            6 => {
                let (name, target) = (self.name(input), Self::from_list(TARGETS, input));
                b.name(&name).name(&target);
            }
            8 => {
                let (mode, rdev) = (self.mode(input), input.u32());
                b.u32(mode).u32(if self.nodev { rdev } else { 0 });
                b.u32(u32::from(input.u16() & 0o777)).u32(0);
                b.name(&self.name(input));
            }
            9 => {
                b.u32(self.mode(input)).u32(u32::from(input.u16() & 0o777));
                b.name(&self.name(input));
            }
            12 | 45 => {
                let newdir = self.node(input);
                b.u64(newdir);
                if opcode == 45 {
                    let flags = match input.u8() {
                        f @ 0..=7 => u32::from(f),
                        _ => input.u32(),
                    };
                    b.u32(flags).u32(0);
                }
                let (old, new) = (self.name(input), self.name(input));
                b.name(&old).name(&new);
            }
            13 => {
                b.u64(self.node(input));
                b.name(&self.name(input));
            }
            14 | 27 => {
                b.u32(open_flags(input)).u32(u32::from(input.u8()));
            }
            15 | 28 | 44 => {
                let (fh, off, size) = (self.handle(input), input.size(), input.size() as u32);
                b.u64(fh).u64(off).u32(size).u32(u32::from(input.u8() & 3));
                b.u64(u64::from(input.u8())).u32(open_flags(input)).u32(0);
            }
            16 => {
                let (fh, off) = (self.handle(input), input.size());
                let data = input.blob().to_vec();
                let size = match input.u8() {
                    0..=0xef => data.len() as u32,
                    _ => input.u32(),
                };
                b.u64(fh).u64(off).u32(size).u32(u32::from(input.u8() & 7));
                b.u64(u64::from(input.u8())).u32(open_flags(input)).u32(0);
                b.raw(&data);
            }
            18 | 29 => {
                b.u64(self.handle(input)).u32(open_flags(input));
                b.u32(u32::from(input.u8() & 3)).u64(u64::from(input.u8()));
            }
            20 | 30 => {
                b.u64(self.handle(input))
                    .u32(u32::from(input.u8() & 1))
                    .u32(0);
            }
            21 => {
                let name = Self::from_list(XATTRS, input);
                let value = input.blob().to_vec();
                let size = match input.u8() {
                    0..=0xef => value.len() as u32,
                    _ => input.u32(),
                };
                b.u32(size).u32(u32::from(input.u8() & 3));
                if input.u8() & 1 == 1 {
                    // FUSE_SETXATTR_EXT's longer struct.
                    b.u32(input.u32()).u32(0);
                }
                b.name(&name).raw(&value);
            }
            22 | 23 => {
                b.u32(input.size() as u32).u32(0);
                if opcode == 22 {
                    b.name(&Self::from_list(XATTRS, input));
                }
            }
            24 => {
                b.name(&Self::from_list(XATTRS, input));
            }
            25 => {
                b.u64(self.handle(input))
                    .u32(0)
                    .u32(0)
                    .u64(u64::from(input.u8()));
            }
            INIT => init_body(&mut b, input),
            31..=33 => {
                let (fh, owner) = (self.handle(input), u64::from(input.u8() % 4));
                let (start, len) = (input.size(), input.size());
                let end = match input.u8() {
                    0..=0x7f => start.saturating_add(len),
                    _ => u64::MAX,
                };
                let kind = match input.u8() % 4 {
                    0 => libc::F_RDLCK,
                    1 => libc::F_WRLCK,
                    2 => libc::F_UNLCK,
                    _ => input.u32() as i32,
                };
                b.u64(fh)
                    .u64(owner)
                    .u64(start)
                    .u64(end)
                    .u32(kind as u32)
                    .u32(1000);
                b.u32(u32::from(input.u8() & 1)).u32(0);
            }
            34 => {
                b.u32(u32::from(input.u8() & 7)).u32(0);
            }
            35 | 51 => {
                b.u32(open_flags(input))
                    .u32(self.mode(input) | libc::S_IFREG);
                b.u32(u32::from(input.u16() & 0o777))
                    .u32(u32::from(input.u8()));
                b.name(&self.name(input));
            }
            INTERRUPT => {
                let b0 = input.u8();
                let unique = if b0 < 0xf0 && !self.waiting.is_empty() {
                    self.waiting[b0 as usize % self.waiting.len()]
                } else {
                    u64::from(b0)
                        .wrapping_add(self.next_unique)
                        .wrapping_sub(0xf0)
                };
                b.u64(unique);
            }
            37 => {
                b.u64(input.size()).u32(input.u32()).u32(0);
            }
            39 => {
                let fh = self.handle(input);
                let cmd = match input.u8() as usize {
                    i if i < IOCTLS.len() * 16 => IOCTLS[i % IOCTLS.len()],
                    _ => input.u32(),
                };
                let flags = u32::from(input.u8() & 0x1f);
                let data = input.blob().to_vec();
                let out_size = input.size() as u32;
                b.u64(fh).u32(flags).u32(cmd).u64(u64::from(input.u8()));
                b.u32(data.len() as u32).u32(out_size).raw(&data);
            }
            40 => {
                b.u64(self.handle(input))
                    .u64(input.u64())
                    .u32(input.u32())
                    .u32(input.u32());
            }
            42 => {
                let n = input.u8() % 8;
                let count = if input.u8() < 0xf0 {
                    u32::from(n)
                } else {
                    input.u32()
                };
                b.u32(count).u32(0);
                for _ in 0..n {
                    b.u64(self.node(input)).u64(input.size());
                }
            }
            43 => {
                let (fh, off, len) = (self.handle(input), input.size(), input.size());
                b.u64(fh)
                    .u64(off)
                    .u64(len)
                    .u32(u32::from(input.u8() & 0x7f))
                    .u32(0);
            }
            46 => {
                let (fh, off) = (self.handle(input), input.size());
                b.u64(fh).u64(off).u32(u32::from(input.u8() % 6)).u32(0);
            }
            47 => {
                let (fh_in, off_in) = (self.handle(input), input.size());
                let (node_out, fh_out) = (self.node(input), self.handle(input));
                // (fuzz/regressions/session/copy-file-range-overlap-byte-by-byte: copying
                // forward within one file once fed the fallback loop its own output.)
                let (off_out, len) = (input.size(), input.size());
                b.u64(fh_in)
                    .u64(off_in)
                    .u64(node_out)
                    .u64(fh_out)
                    .u64(off_out)
                    .u64(len);
                b.u64(u64::from(input.u8() & 1));
            }
            50 => {
                b.u64(0);
            }
            52 => {
                let flags = u32::from(input.u8() & 1);
                b.u32(flags).u32(0).u64(self.handle(input));
                b.u32(input.u32()).u32(input.u32());
            }
            RAW => {
                opcode = input.u32();
                b.raw(input.blob());
            }
            _ => {
                b.raw(input.blob());
            }
        }
        // Creates may carry a request extension (FUSE_SECURITY_CTX): a well-formed security
        // context, or any 8-byte-aligned bytes.
        let mut total_extlen = 0u32;
        if matches!(opcode, 6 | 8 | 9 | 35 | 51 | RAW) && input.u8() & 3 == 3 {
            let ext = extension(input);
            total_extlen = (ext.len() / 8) as u32;
            b.raw(&ext);
        }
        let unique = self.unique();
        let len = (size_of::<InHeader>() + b.0.len()) as u32;
        let hdr = InHeader {
            len,
            opcode,
            unique,
            nodeid: node,
            uid,
            gid,
            pid: 1000 + u32::from(who),
            padding: total_extlen & 0xffff,
        };
        let mut bytes = hdr.as_slice().to_vec();
        bytes.extend_from_slice(&b.0);
        Request {
            bytes,
            opcode,
            unique,
        }
    }

    /// The first request of a session: INIT, with the guest's flags and version from `input`.
    pub fn init(&mut self, input: &mut Input<'_>) -> Request {
        let mut b = Body::default();
        init_body(&mut b, input);
        self.plain(INIT, 0, &b.0)
    }

    /// A request with `opcode` on `node` with body `body`, from root.
    pub fn plain(&mut self, opcode: u32, node: u64, body: &[u8]) -> Request {
        let unique = self.unique();
        let hdr = InHeader {
            len: (size_of::<InHeader>() + body.len()) as u32,
            opcode,
            unique,
            nodeid: node,
            ..Default::default()
        };
        let mut bytes = hdr.as_slice().to_vec();
        bytes.extend_from_slice(body);
        Request {
            bytes,
            opcode,
            unique,
        }
    }

    /// Learns the node ids and handles a successful `reply` to `opcode` gives the guest.
    pub fn learn(&mut self, opcode: u32, reply: &[u8]) {
        let Some(h) = out_header(reply) else {
            return;
        };
        if h.error != 0 {
            return;
        }
        let body = &reply[size_of::<OutHeader>()..];
        let entry = |at: usize| {
            body.get(at..at + size_of::<EntryOut>())
                .and_then(EntryOut::from_slice)
                .map(|e| e.nodeid)
        };
        let open = |at: usize| {
            body.get(at..at + size_of::<OpenOut>())
                .and_then(OpenOut::from_slice)
                .map(|o| o.fh)
        };
        match opcode {
            1 | 6 | 8 | 9 | 13 => self.add_node(entry(0)),
            14 | 27 => self.add_handle(open(0)),
            35 | 51 => {
                self.add_node(entry(0));
                self.add_handle(open(size_of::<EntryOut>()));
            }
            44 => {
                // fuse_direntplus: entry_out, then fuse_dirent (ino, off, namelen, type,
                // name padded to 8 bytes).
                let mut at = 0;
                while let Some(id) = entry(at) {
                    self.add_node(Some(id));
                    at += size_of::<EntryOut>();
                    let Some(n) = body.get(at + 16..at + 20) else {
                        break;
                    };
                    let namelen = u32::from_le_bytes(n.try_into().unwrap_or_default()) as usize;
                    at += (24 + namelen).next_multiple_of(8);
                }
            }
            _ => {}
        }
    }

    fn add_node(&mut self, id: Option<u64>) {
        if let Some(id) = id.filter(|&id| id != 0 && !self.nodes.contains(&id)) {
            if self.nodes.len() < MAX_LEARNED {
                self.nodes.push(id);
            }
        }
    }

    fn add_handle(&mut self, fh: Option<u64>) {
        if let Some(fh) = fh.filter(|fh| !self.handles.contains(fh)) {
            if self.handles.len() < MAX_LEARNED {
                self.handles.push(fh);
            }
        }
    }
}

/// The reply header at the start of `reply`, if there is one.
pub fn out_header(reply: &[u8]) -> Option<OutHeader> {
    reply
        .get(..size_of::<OutHeader>())
        .and_then(OutHeader::from_slice)
        .copied()
}

fn init_body(b: &mut Body, input: &mut Input<'_>) {
    let minor = match input.u8() {
        m @ 0..=0x7f => 27 + u32::from(m % 16),
        m => u32::from(m),
    };
    let major = if input.u8() < 0xf8 { 7 } else { input.u32() };
    let flags = input.u32();
    b.u32(major)
        .u32(minor)
        .u32(input.u32() & 0x3ff_ffff)
        .u32(flags);
    if flags & INIT_EXT != 0 {
        b.u32(input.u32());
        b.raw(&[0u8; 44]);
    }
}

/// A request extension block: mostly one security context as the kernel sends it (the
/// count 0 or 1, a name, a value, padding to 8), sometimes raw bytes.
fn extension(input: &mut Input<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    match input.u8() {
        0..=0xdf => {
            let n = u32::from(input.u8() & 1);
            let mut body = Vec::new();
            if n == 1 {
                let name: &[u8] = match input.u8() % 4 {
                    0 => b"security.selinux",
                    1 => b"user.label",
                    2 => b"trusted.label",
                    _ => b"security.capability",
                };
                let value = input.blob().to_vec();
                body.extend_from_slice(&(value.len() as u32).to_ne_bytes());
                body.extend_from_slice(&0u32.to_ne_bytes());
                body.extend_from_slice(name);
                body.push(0);
                body.extend_from_slice(&value);
            }
            let size = (8 + body.len()).next_multiple_of(8);
            out.extend_from_slice(&(size as u32).to_ne_bytes());
            out.extend_from_slice(&n.to_ne_bytes());
            out.extend_from_slice(&body);
            out.resize(size, 0);
        }
        _ => {
            out.extend_from_slice(input.blob());
            out.resize(out.len().next_multiple_of(8), 0);
        }
    }
    out
}

/// Open flags: mostly the access modes with a few of the usual flags, sometimes raw.
fn open_flags(input: &mut Input<'_>) -> u32 {
    const EXTRA: [i32; 8] = [
        libc::O_TRUNC,
        libc::O_APPEND,
        libc::O_CREAT,
        libc::O_EXCL,
        libc::O_DIRECT,
        libc::O_NOFOLLOW,
        libc::O_NOATIME,
        libc::O_PATH,
    ];
    let b = input.u8();
    if b == 0xff {
        return input.u32();
    }
    let mut f = i32::from(b & 3) & libc::O_ACCMODE;
    let extra = input.u8();
    for (i, x) in EXTRA.iter().enumerate() {
        if extra & (1 << i) != 0 {
            f |= x;
        }
    }
    f as u32
}

/// A request body being built.
#[derive(Default)]
struct Body(Vec<u8>);

impl Body {
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    fn raw(&mut self, v: &[u8]) -> &mut Self {
        self.0.extend_from_slice(v);
        self
    }

    /// A NUL-terminated name.
    fn name(&mut self, v: &[u8]) -> &mut Self {
        self.0.extend_from_slice(v);
        self.0.push(0);
        self
    }
}
