//! The hand-made starting inputs in `fuzz/seeds/`, written in the input format of [`crate::wire`]
//! and [`crate::layout`] with a small encoder. `cargo test` (in `fuzz/`) checks that the files
//! are what this module makes; `UVFS_WRITE_SEEDS=1 cargo test` rewrites them.

use std::path::PathBuf;

use crate::wire::OPS;

/// A session input being written.
#[derive(Default)]
struct Enc(Vec<u8>);

const ROOT: u8 = 0;
/// Learned node or handle number `i` (in the order the session learned them; the root is
/// node 0).
fn nth(i: u8) -> u8 {
    i
}

const O_RDWR: u8 = 2;

impl Enc {
    fn b(&mut self, v: &[u8]) -> &mut Self {
        self.0.extend_from_slice(v);
        self
    }

    fn u8(&mut self, v: u8) -> &mut Self {
        self.b(&[v])
    }

    fn u32(&mut self, v: u32) -> &mut Self {
        self.b(&v.to_le_bytes())
    }

    /// The session header: option set, then INIT as a Linux 6.x guest sends it.
    fn start(opts: u8) -> Enc {
        let mut e = Enc::default();
        e.u8(opts).u8(11).u8(0).u32(0x007f_f03b).u32(0x2_0000);
        e
    }

    /// A record's opcode, caller (root) and node.
    fn op(&mut self, opcode: u32, node: u8) -> &mut Self {
        let i = OPS.iter().position(|&o| o == opcode).expect("known opcode");
        self.u8(i as u8).u8(0).u8(node)
    }

    /// A raw name.
    fn name(&mut self, n: &[u8]) -> &mut Self {
        self.u8(0xff).u8(n.len() as u8).b(n)
    }

    fn lookup(&mut self, parent: u8, n: &[u8]) -> &mut Self {
        self.op(1, parent).name(n)
    }

    fn open(&mut self, node: u8, flags: u8) -> &mut Self {
        self.op(14, node).u8(flags).u8(0).u8(0)
    }

    fn create(&mut self, parent: u8, n: &[u8]) -> &mut Self {
        self.op(35, parent)
            .u8(O_RDWR)
            .u8(0)
            .u8(0)
            .b(&0o644u16.to_le_bytes());
        self.b(&0u16.to_le_bytes()).u8(0).name(n)
    }

    fn write(&mut self, node: u8, fh: u8, off: u8, data: &[u8]) -> &mut Self {
        self.op(16, node)
            .u8(fh)
            .u8(off)
            .u8(data.len() as u8)
            .b(data);
        self.u8(0).u8(0).u8(0).u8(O_RDWR).u8(0)
    }

    fn read(&mut self, opcode: u32, node: u8, fh: u8, size: u8) -> &mut Self {
        self.op(opcode, node)
            .u8(fh)
            .u8(0)
            .u8(size)
            .u8(0)
            .u8(0)
            .u8(0)
            .u8(0)
    }

    fn release(&mut self, opcode: u32, node: u8, fh: u8) -> &mut Self {
        self.op(opcode, node).u8(fh).u8(O_RDWR).u8(0).u8(0).u8(0)
    }

    fn lock(&mut self, opcode: u32, node: u8, fh: u8, owner: u8, kind: u8, flock: u8) -> &mut Self {
        // fh, owner, start 0, length 10, end = start + length, type, flock bit.
        self.op(opcode, node)
            .u8(fh)
            .u8(owner)
            .u8(0)
            .u8(10)
            .u8(0)
            .u8(kind)
            .u8(flock)
    }
}

/// Seeds of the `session` target.
fn session() -> Vec<(&'static str, Vec<u8>)> {
    let mut basics = Enc::start(0);
    basics.lookup(ROOT, b"d").create(ROOT, b"new");
    // Nodes: root, d, new; handles: new's.
    basics.write(nth(2), nth(0), 0, b"hello, fuzzer");
    basics.read(15, nth(2), nth(0), 64);
    basics
        .op(9, ROOT)
        .u8(6)
        .b(&0o755u16.to_le_bytes())
        .b(&0u16.to_le_bytes());
    basics.name(b"dir");
    basics.op(27, ROOT).u8(0).u8(0).u8(0); // OPENDIR root: handle 1
    basics.read(44, ROOT, nth(1), 0x82);
    basics.release(29, ROOT, nth(1));
    basics.op(12, ROOT).u8(nth(1)).name(b"new").name(b"moved"); // RENAME into d
    basics.op(6, ROOT).name(b"sl").u8(0); // SYMLINK sl -> f0
    basics.op(13, ROOT).u8(nth(2)).name(b"hard"); // LINK
    basics.op(3, nth(2)).u8(0).u8(0); // GETATTR
    basics.op(17, ROOT); // STATFS
    basics.release(18, nth(2), nth(0));
    basics.op(10, ROOT).name(b"hard").op(11, ROOT).name(b"dir");
    basics.op(2, nth(2)).u8(1); // FORGET

    let mut locks = Enc::start(5);
    locks.lookup(ROOT, b"f0").open(nth(1), O_RDWR);
    locks.open(nth(1), O_RDWR);
    locks.lock(32, nth(1), nth(0), 1, 1, 0); // SETLK write, owner 1
    locks.lock(31, nth(1), nth(1), 2, 1, 0); // GETLK owner 2
    locks.lock(33, nth(1), nth(1), 2, 1, 0); // SETLKW owner 2: waits
    locks.lock(32, nth(1), nth(0), 1, 1, 1); // flock
    locks.op(36, ROOT).u8(0); // INTERRUPT the wait
    locks.release(18, nth(1), nth(0));

    let mut attrs = Enc::start(0);
    attrs.lookup(ROOT, b"f1").open(nth(1), O_RDWR);
    attrs.op(21, nth(1)).u8(0).u8(3).b(b"abc").u8(0).u8(0).u8(0); // SETXATTR user.a
    attrs.op(22, nth(1)).u8(0x20).u8(0); // GETXATTR user.a
    attrs.op(23, nth(1)).u8(0x20); // LISTXATTR
    attrs.op(24, nth(1)).u8(0); // REMOVEXATTR user.a
    attrs.op(39, nth(1)).u8(0).u8(0).u8(0).u8(0).u8(8).u8(0); // IOCTL GETFLAGS
    attrs.op(43, nth(1)).u8(0).u8(0).u8(0x81).u8(0); // FALLOCATE 4 KiB
    attrs.op(46, nth(1)).u8(0).u8(1).u8(3); // LSEEK SEEK_DATA
    attrs
        .op(47, nth(1))
        .u8(0)
        .u8(0)
        .u8(nth(1))
        .u8(0)
        .u8(0x80)
        .u8(100)
        .u8(0); // COPY_FILE_RANGE
    attrs
        .op(51, ROOT)
        .u8(O_RDWR)
        .u8(0)
        .u8(0)
        .b(&0o600u16.to_le_bytes());
    attrs.b(&0u16.to_le_bytes()).u8(0).name(b""); // TMPFILE
    attrs.op(52, nth(1)).u8(0).u8(0).u32(0).u32(0x7ff); // STATX
    attrs.op(50, ROOT); // SYNCFS

    let mut escape = Enc::start(3);
    for n in [&b"esc"[..], b"up", b"..", b"abs", b"root", b"fifo"] {
        escape.lookup(ROOT, n);
    }
    escape.op(5, nth(1)); // READLINK esc
    escape.open(nth(3), O_RDWR); // abs
    escape.op(6, ROOT).name(b"out").u8(3); // SYMLINK out -> ../sentinel
    escape.lookup(ROOT, b"out");
    escape.op(12, ROOT).u8(ROOT).name(b"d").name(b"../d");
    escape.op(45, ROOT).u8(ROOT).u8(2).name(b"d").name(b"esc"); // RENAME_EXCHANGE
    escape
        .op(8, ROOT)
        .u8(2)
        .b(&0o644u16.to_le_bytes())
        .u32(0)
        .b(&0u16.to_le_bytes());
    escape.name(b"pipe"); // MKNOD fifo

    let mut restart = Enc::start(2);
    restart.lookup(ROOT, b"ro").open(nth(1), O_RDWR); // copy-up (cow)
    restart.op(38, ROOT); // DESTROY mid-session
    restart
        .op(26, ROOT)
        .u8(11)
        .u8(0)
        .u32(0x007f_f03b)
        .u32(0x2_0000); // INIT again
    restart.lookup(ROOT, b"d").op(4, nth(1)).u32(1).u8(0); // SETATTR mode

    vec![
        ("basics", basics.0),
        ("locks", locks.0),
        ("attrs", attrs.0),
        ("escape", escape.0),
        ("restart", restart.0),
    ]
}

/// Seeds of the `chain` target: a record is a queue-size byte, a message selector (even: a
/// well-formed request from [`crate::wire`]), the request's record, a length-lie byte, then
/// the descriptor layout of [`crate::layout`].
fn chain() -> Vec<(&'static str, Vec<u8>)> {
    let lookup_d = |e: &mut Enc| {
        e.u8(0).u8(0);
        e.op(1, ROOT).name(b"d");
        e.u8(0);
    };
    // The header split 7 + rest over two readable descriptors, the reply over three writable
    // ones of odd sizes.
    let mut split = Enc::default();
    lookup_d(&mut split);
    split
        .u8(4)
        .u8(0)
        .u8(7)
        .u8(0)
        .u8(0)
        .u8(1)
        .u8(13)
        .u8(1)
        .u8(11)
        .u8(1)
        .u8(0);
    // A writable descriptor first, then the readable one: dropped.
    let mut reversed = Enc::default();
    lookup_d(&mut reversed);
    reversed.u8(1).u8(1).u8(0).u8(0).u8(0);
    // The reply in the hole between the regions.
    let mut hole = Enc::default();
    lookup_d(&mut hole);
    hole.u8(1)
        .u8(0)
        .u8(0)
        .u8(0x31)
        .u8(0x80)
        .b(&256u16.to_le_bytes());
    // An indirect table holding the request and the reply.
    let mut indirect = Enc::default();
    lookup_d(&mut indirect);
    indirect
        .u8(0)
        .u8(6)
        .u8(1)
        .u8(0)
        .u8(0)
        .u8(1)
        .u8(0)
        .u8(0)
        .u8(0);
    // A header that says 40 bytes, in a chain too short for it.
    let mut short = Enc::default();
    short.u8(0).u8(0).op(3, ROOT).u8(0).u8(0).u8(0xc4);
    short.u8(1).u8(0).u8(20).u8(1).u8(0);
    vec![
        ("split", split.0),
        ("reversed", reversed.0),
        ("hole", hole.0),
        ("indirect", indirect.0),
        ("short", short.0),
    ]
}

/// Seeds of the `options` target: a config file's text, then the arguments, NUL-separated.
fn options() -> Vec<(&'static str, Vec<u8>)> {
    let join = |f: &[&str]| f.join("\0").into_bytes();
    vec![
        (
            "mergerfs",
            join(&[
                "",
                "--socket-path",
                "s.sock",
                "--branches",
                "a:b=RO",
                "-o",
                "category.create=mfs,minfreespace=1G,moveonenospc=true,func.getattr=newest",
            ]),
        ),
        (
            "config",
            join(&[
                "branches=a=RW:b=NC,1M\n# comment\ncategory.search=ff\ncache.files=auto-full\n",
                "--config",
                "c",
                "--socket-path",
                "s.sock",
            ]),
        ),
        (
            "virtiofsd",
            join(&[
                "",
                "--socket-path=s.sock",
                "-o",
                "source=a,cache=always,xattr,timeout=5,no_posix_lock,flock",
                "--sandbox",
                "none",
                "--seccomp=log",
                "--thread-pool-size=4",
            ]),
        ),
        (
            "translate",
            join(&[
                "",
                "--fd",
                "3",
                "--shared-dir",
                "a",
                "--translate-uid",
                "map:0:1000:1",
                "--translate-gid",
                "squash-guest:0:1000:65536",
                "--xattrmap",
                ":prefix:all::user.virtiofs::",
                "--modcaps=-sys_admin:+fowner",
            ]),
        ),
        (
            "globs",
            join(&[
                "",
                "--socket",
                "s.sock",
                "--branch",
                "b/*=RW",
                "--branch",
                "[ar]*=RO",
                "--cache",
                "never",
                "--posix-acl",
                "--max-pages=2000",
            ]),
        ),
    ]
}

#[test]
fn seed_files_are_up_to_date() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let write = std::env::var_os("UVFS_WRITE_SEEDS").is_some();
    for (target, seeds) in [
        ("session", session()),
        ("chain", chain()),
        ("options", options()),
    ] {
        for (name, bytes) in seeds {
            let path = root.join(target).join(name);
            if write {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &bytes).unwrap();
            } else {
                assert_eq!(
                    std::fs::read(&path).ok(),
                    Some(bytes),
                    "{}: stale; rerun with UVFS_WRITE_SEEDS=1",
                    path.display()
                );
            }
        }
    }
}
