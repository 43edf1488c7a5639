//! Builders for common FUSE requests from `fuse_abi` structs, and parsers for directory
//! listings. Pure functions: no queues, no I/O.

use std::mem::size_of;
use std::sync::Arc;

use fuse_backend_rs::abi::fuse_abi::{
    AttrOut, CreateIn, Dirent, Direntplus, EntryOut, ForgetIn, GetattrIn, InitIn, InitIn2, InitOut,
    MkdirIn, Opcode, OpenIn, OpenOut, ReadIn, ReleaseIn, RenameIn, SetattrIn, StatfsOut, WriteIn,
    WriteOut,
};
use vm_memory::ByteValued;

use crate::request::FuseRequest;
use fuse_backend_rs::abi::fuse_abi;

/// Root inode number.
pub const ROOT_ID: u64 = 1;
/// FUSE minor version the driver claims (Linux 6.x era, with `init_in` flags2).
pub const MINOR_VERSION: u32 = 38;
/// `FUSE_INIT_EXT`: `init_in` carries a second flags word.
pub const INIT_EXT: u64 = 1 << 30;
/// `FUSE_GETATTR_FH`: `getattr_in.fh` is valid.
pub const GETATTR_FH: u32 = 1;
/// `FATTR_MODE` in `setattr_in.valid`.
pub const FATTR_MODE: u32 = 1;
/// `FATTR_SIZE` in `setattr_in.valid`.
pub const FATTR_SIZE: u32 = 1 << 3;

/// Init flags a Linux virtio-fs guest typically offers (ASYNC_READ, BIG_WRITES, DO_READDIRPLUS,
/// READDIRPLUS_AUTO, PARALLEL_DIROPS, MAX_PAGES, ...).
pub const DEFAULT_INIT_FLAGS: u64 = 0x1 | 0x8 | 0x20 | 0x2000 | 0x4000 | 0x4_0000 | 0x40_0000;

fn name_bytes(name: &[u8]) -> Vec<u8> {
    let mut v = name.to_vec();
    v.push(0);
    v
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// FUSE_INIT offering `flags` (64-bit; the high half goes in `flags2` via INIT_EXT).
pub fn init(flags: u64) -> FuseRequest {
    let flags = flags | INIT_EXT;
    let a = InitIn {
        major: 7,
        minor: MINOR_VERSION,
        max_readahead: 128 * 1024,
        flags: flags as u32,
    };
    let b = InitIn2 {
        flags2: (flags >> 32) as u32,
        unused: [0; 11],
    };
    let args = cat(&[a.as_slice(), b.as_slice()]);
    FuseRequest::new(Opcode::Init as u32, 0, args, size_of::<InitOut>())
}

/// FUSE_LOOKUP of `name` in `parent`.
pub fn lookup(parent: u64, name: &[u8]) -> FuseRequest {
    FuseRequest::new(
        Opcode::Lookup as u32,
        parent,
        name_bytes(name),
        size_of::<EntryOut>(),
    )
}

/// FUSE_GETATTR, by handle when `fh` is given.
pub fn getattr(nodeid: u64, fh: Option<u64>) -> FuseRequest {
    let a = GetattrIn {
        flags: if fh.is_some() { GETATTR_FH } else { 0 },
        dummy: 0,
        fh: fh.unwrap_or(0),
    };
    FuseRequest::new(
        Opcode::Getattr as u32,
        nodeid,
        a.as_slice().to_vec(),
        size_of::<AttrOut>(),
    )
}

/// FUSE_SETATTR with the fields of `a` its `valid` names.
fn setattr(nodeid: u64, a: SetattrIn) -> FuseRequest {
    FuseRequest::new(
        Opcode::Setattr as u32,
        nodeid,
        a.as_slice().to_vec(),
        size_of::<AttrOut>(),
    )
}

/// FUSE_SETATTR changing only the size (truncate).
pub fn truncate(nodeid: u64, size: u64) -> FuseRequest {
    let a = SetattrIn {
        valid: FATTR_SIZE,
        size,
        ..Default::default()
    };
    setattr(nodeid, a)
}

/// FUSE_SETATTR changing only the permission bits (chmod).
pub fn chmod(nodeid: u64, mode: u32) -> FuseRequest {
    let a = SetattrIn {
        valid: FATTR_MODE,
        mode,
        ..Default::default()
    };
    setattr(nodeid, a)
}

/// FUSE_OPEN with open(2) `flags`.
pub fn open(nodeid: u64, flags: u32) -> FuseRequest {
    let a = OpenIn {
        flags,
        fuse_flags: 0,
    };
    FuseRequest::new(
        Opcode::Open as u32,
        nodeid,
        a.as_slice().to_vec(),
        size_of::<OpenOut>(),
    )
}

/// FUSE_OPENDIR.
pub fn opendir(nodeid: u64) -> FuseRequest {
    let a = OpenIn {
        flags: libc::O_RDONLY as u32 | libc::O_DIRECTORY as u32,
        fuse_flags: 0,
    };
    FuseRequest::new(
        Opcode::Opendir as u32,
        nodeid,
        a.as_slice().to_vec(),
        size_of::<OpenOut>(),
    )
}

/// FUSE_CREATE of `name` in `parent`; the reply is `EntryOut` then `OpenOut`.
pub fn create(parent: u64, name: &[u8], mode: u32, flags: u32) -> FuseRequest {
    let a = CreateIn {
        flags,
        mode,
        umask: 0o022,
        fuse_flags: 0,
    };
    let args = cat(&[a.as_slice(), &name_bytes(name)]);
    let reply = size_of::<EntryOut>() + size_of::<OpenOut>();
    FuseRequest::new(Opcode::Create as u32, parent, args, reply)
}

fn read_in(fh: u64, offset: u64, size: u32) -> Vec<u8> {
    let a = ReadIn {
        fh,
        offset,
        size,
        ..Default::default()
    };
    a.as_slice().to_vec()
}

/// FUSE_READ of `size` bytes at `offset`.
pub fn read(nodeid: u64, fh: u64, offset: u64, size: u32) -> FuseRequest {
    FuseRequest::new(
        Opcode::Read as u32,
        nodeid,
        read_in(fh, offset, size),
        size as usize,
    )
}

/// FUSE_WRITE of `data` at `offset`; the data travels in its own readable descriptor.
pub fn write(nodeid: u64, fh: u64, offset: u64, data: Arc<[u8]>) -> FuseRequest {
    let a = WriteIn {
        fh,
        offset,
        size: data.len() as u32,
        ..Default::default()
    };
    let mut r = FuseRequest::new(
        Opcode::Write as u32,
        nodeid,
        a.as_slice().to_vec(),
        size_of::<WriteOut>(),
    );
    r.data = Some(data);
    r
}

fn release_op(opcode: Opcode, nodeid: u64, fh: u64) -> FuseRequest {
    let a = ReleaseIn {
        fh,
        ..Default::default()
    };
    FuseRequest::new(opcode as u32, nodeid, a.as_slice().to_vec(), 0)
}

/// FUSE_RELEASE of a file handle.
pub fn release(nodeid: u64, fh: u64) -> FuseRequest {
    release_op(Opcode::Release, nodeid, fh)
}

/// FUSE_RELEASEDIR of a directory handle.
pub fn releasedir(nodeid: u64, fh: u64) -> FuseRequest {
    release_op(Opcode::Releasedir, nodeid, fh)
}

/// FUSE_UNLINK of `name` in `parent`.
pub fn unlink(parent: u64, name: &[u8]) -> FuseRequest {
    FuseRequest::new(Opcode::Unlink as u32, parent, name_bytes(name), 0)
}

/// FUSE_RMDIR of `name` in `parent`.
pub fn rmdir(parent: u64, name: &[u8]) -> FuseRequest {
    FuseRequest::new(Opcode::Rmdir as u32, parent, name_bytes(name), 0)
}

/// FUSE_MKDIR of `name` in `parent`.
pub fn mkdir(parent: u64, name: &[u8], mode: u32) -> FuseRequest {
    let a = MkdirIn { mode, umask: 0o022 };
    let args = cat(&[a.as_slice(), &name_bytes(name)]);
    FuseRequest::new(Opcode::Mkdir as u32, parent, args, size_of::<EntryOut>())
}

/// FUSE_RENAME of `parent/name` to `newparent/newname`.
pub fn rename(parent: u64, name: &[u8], newparent: u64, newname: &[u8]) -> FuseRequest {
    let a = RenameIn { newdir: newparent };
    let args = cat(&[a.as_slice(), &name_bytes(name), &name_bytes(newname)]);
    FuseRequest::new(Opcode::Rename as u32, parent, args, 0)
}

/// FUSE_READDIR returning at most `size` bytes of dirents from `offset`.
pub fn readdir(nodeid: u64, fh: u64, offset: u64, size: u32) -> FuseRequest {
    FuseRequest::new(
        Opcode::Readdir as u32,
        nodeid,
        read_in(fh, offset, size),
        size as usize,
    )
}

/// FUSE_READDIRPLUS returning at most `size` bytes of direntplus records from `offset`.
pub fn readdirplus(nodeid: u64, fh: u64, offset: u64, size: u32) -> FuseRequest {
    let args = read_in(fh, offset, size);
    FuseRequest::new(Opcode::Readdirplus as u32, nodeid, args, size as usize)
}

/// FUSE_FORGET of `nlookup` references; the backend sends no reply.
pub fn forget(nodeid: u64, nlookup: u64) -> FuseRequest {
    let a = ForgetIn { nlookup };
    FuseRequest::new(Opcode::Forget as u32, nodeid, a.as_slice().to_vec(), 0).no_reply()
}

/// FUSE_STATFS.
pub fn statfs(nodeid: u64) -> FuseRequest {
    FuseRequest::new(
        Opcode::Statfs as u32,
        nodeid,
        Vec::new(),
        size_of::<StatfsOut>(),
    )
}

impl FuseRequest {
    /// Offer no writable buffer at all (FORGET-style requests).
    pub fn no_reply(mut self) -> Self {
        self.reply_capacity = 0;
        self
    }
}

/// One directory entry from a READDIR(PLUS) reply.
#[derive(Clone, Debug)]
pub struct DirEntry {
    /// Inode number as reported.
    pub ino: u64,
    /// Offset cookie to continue after this entry.
    pub off: u64,
    /// `DT_*` type.
    pub type_: u32,
    /// Entry name.
    pub name: Vec<u8>,
    /// The entry reply for READDIRPLUS (nodeid 0 means no lookup reference was taken).
    pub entry: Option<EntryOut>,
}

fn parse_one(buf: &[u8], plus: bool) -> Option<(DirEntry, usize)> {
    let pre = if plus { size_of::<EntryOut>() } else { 0 };
    let entry = if plus {
        Some(*EntryOut::from_slice(buf.get(..pre)?)?)
    } else {
        None
    };
    let d = *Dirent::from_slice(buf.get(pre..pre + size_of::<Dirent>())?)?;
    let start = pre + size_of::<Dirent>();
    let name = buf.get(start..start + d.namelen as usize)?.to_vec();
    let rec = (start + d.namelen as usize).next_multiple_of(8);
    Some((
        DirEntry {
            ino: d.ino,
            off: d.off,
            type_: d.type_,
            name,
            entry,
        },
        rec.min(buf.len()),
    ))
}

/// Parse a READDIR (`plus == false`) or READDIRPLUS payload; stops at the first truncated record.
pub fn parse_dirents(mut buf: &[u8], plus: bool) -> Vec<DirEntry> {
    debug_assert_eq!(
        size_of::<Direntplus>(),
        size_of::<EntryOut>() + size_of::<Dirent>()
    );
    let mut out = Vec::new();
    while let Some((e, used)) = parse_one(buf, plus) {
        out.push(e);
        buf = &buf[used..];
    }
    out
}

/// A FUSE lock: bytes `start..=end` (`end` u64::MAX: to the end of the file), type
/// `F_RDLCK`/`F_WRLCK`/`F_UNLCK`.
pub fn file_lock(start: u64, end: u64, type_: i32) -> fuse_abi::FileLock {
    fuse_abi::FileLock {
        start,
        end,
        type_: type_ as u32,
        pid: 0,
    }
}

fn lk_in(fh: u64, owner: u64, lk: fuse_abi::FileLock, flock: bool) -> Vec<u8> {
    let a = fuse_abi::LkIn {
        fh,
        owner,
        lk,
        lk_flags: if flock { fuse_abi::LK_FLOCK } else { 0 },
        padding: 0,
    };
    a.as_slice().to_vec()
}

/// FUSE_GETLK for lock owner `owner` through handle `fh`.
pub fn getlk(nodeid: u64, fh: u64, owner: u64, lk: fuse_abi::FileLock) -> FuseRequest {
    FuseRequest::new(
        Opcode::Getlk as u32,
        nodeid,
        lk_in(fh, owner, lk, false),
        size_of::<fuse_abi::LkOut>(),
    )
}

/// FUSE_SETLK, or FUSE_SETLKW with `wait`; a flock(2) lock with `flock`.
pub fn setlk(
    nodeid: u64,
    fh: u64,
    owner: u64,
    lk: fuse_abi::FileLock,
    flock: bool,
    wait: bool,
) -> FuseRequest {
    let op = if wait { Opcode::Setlkw } else { Opcode::Setlk };
    FuseRequest::new(op as u32, nodeid, lk_in(fh, owner, lk, flock), 0)
}

/// FUSE_INTERRUPT of request `unique` (no reply).
pub fn interrupt(unique: u64) -> FuseRequest {
    let a = fuse_abi::InterruptIn { unique };
    let mut r = FuseRequest::new(Opcode::Interrupt as u32, 0, a.as_slice().to_vec(), 0);
    r.reply_capacity = 0;
    r
}

/// FUSE_FLUSH of handle `fh` by lock owner `owner` (a close in the guest).
pub fn flush(nodeid: u64, fh: u64, owner: u64) -> FuseRequest {
    let a = fuse_abi::FlushIn {
        fh,
        unused: 0,
        padding: 0,
        lock_owner: owner,
    };
    FuseRequest::new(Opcode::Flush as u32, nodeid, a.as_slice().to_vec(), 0)
}

/// FUSE_GETXATTR of `name`, offering `size` bytes for the value (0: only its size, as a
/// Linux guest asks for `security.capability` before a write).
pub fn getxattr(nodeid: u64, name: &[u8], size: u32) -> FuseRequest {
    let a = fuse_abi::GetxattrIn { size, padding: 0 };
    let args = cat(&[a.as_slice(), &name_bytes(name)]);
    let reply = if size == 0 {
        size_of::<fuse_abi::GetxattrOut>()
    } else {
        size as usize
    };
    FuseRequest::new(Opcode::Getxattr as u32, nodeid, args, reply)
}

/// FUSE_STATX (opcode 52, Linux 6.6+) of the basic fields, through handle `fh` if given, as a
/// guest's fstat(2) asks (a daemon without it answers ENOSYS; the guest then sends GETATTR).
pub fn statx(nodeid: u64, fh: Option<u64>) -> FuseRequest {
    const STATX: u32 = 52;
    // struct fuse_statx_in: getattr_flags, reserved, fh, sx_flags, sx_mask.
    let args = cat(&[
        &(if fh.is_some() { GETATTR_FH } else { 0 }).to_ne_bytes(),
        &0u32.to_ne_bytes(),
        &fh.unwrap_or(0).to_ne_bytes(),
        &0u32.to_ne_bytes(),
        &libc::STATX_BASIC_STATS.to_ne_bytes(),
    ]);
    // struct fuse_statx_out: attr_valid, attr_valid_nsec, flags, spare[2], then a 256-byte
    // struct fuse_statx.
    FuseRequest::new(STATX, nodeid, args, 32 + 256)
}

/// FUSE_FSYNC of handle `fh` (`datasync`: fdatasync).
pub fn fsync(nodeid: u64, fh: u64, datasync: bool) -> FuseRequest {
    let a = fuse_abi::FsyncIn {
        fh,
        fsync_flags: u32::from(datasync),
        padding: 0,
    };
    FuseRequest::new(Opcode::Fsync as u32, nodeid, a.as_slice().to_vec(), 0)
}

/// FUSE_FALLOCATE of `length` bytes at `offset` with fallocate(2) `mode`.
pub fn fallocate(nodeid: u64, fh: u64, offset: u64, length: u64, mode: u32) -> FuseRequest {
    let a = fuse_abi::FallocateIn {
        fh,
        offset,
        length,
        mode,
        padding: 0,
    };
    FuseRequest::new(Opcode::Fallocate as u32, nodeid, a.as_slice().to_vec(), 0)
}
