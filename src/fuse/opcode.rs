//! One table of what the protocol layer knows about each FUSE opcode: which handler answers
//! it ([`Op`], what the router matches on), whether it gets a reply, the smallest reply buffer
//! that can carry the state it creates, and how costly it is (for a transport to place it on
//! a thread). Adding an opcode is one variant and one row here plus its arm in the router.
//! Pure data: no buffers, no files.

use std::mem::size_of;

pub use fuse_backend_rs::abi::fuse_abi::Opcode;
use fuse_backend_rs::abi::fuse_abi::{EntryOut, OpenOut, OutHeader};

/// Every opcode the router answers, as it matches on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// FUSE_LOOKUP.
    Lookup,
    /// FUSE_FORGET (no reply).
    Forget,
    /// FUSE_BATCH_FORGET (no reply).
    BatchForget,
    /// FUSE_GETATTR.
    Getattr,
    /// FUSE_SETATTR.
    Setattr,
    /// FUSE_READLINK.
    Readlink,
    /// FUSE_SYMLINK.
    Symlink,
    /// FUSE_MKNOD.
    Mknod,
    /// FUSE_MKDIR.
    Mkdir,
    /// FUSE_UNLINK.
    Unlink,
    /// FUSE_RMDIR.
    Rmdir,
    /// FUSE_RENAME.
    Rename,
    /// FUSE_RENAME2.
    Rename2,
    /// FUSE_LINK.
    Link,
    /// FUSE_OPEN.
    Open,
    /// FUSE_READ: its data goes straight into the transport's buffers.
    Read,
    /// FUSE_WRITE: its data comes straight from the transport's buffers.
    Write,
    /// FUSE_STATFS.
    Statfs,
    /// FUSE_RELEASE.
    Release,
    /// FUSE_FSYNC.
    Fsync,
    /// FUSE_SETXATTR, whose argument grows with FUSE_SETXATTR_EXT.
    Setxattr,
    /// FUSE_GETXATTR.
    Getxattr,
    /// FUSE_LISTXATTR.
    Listxattr,
    /// FUSE_REMOVEXATTR.
    Removexattr,
    /// FUSE_FLUSH.
    Flush,
    /// FUSE_INIT.
    Init,
    /// FUSE_OPENDIR.
    Opendir,
    /// FUSE_READDIR.
    Readdir,
    /// FUSE_READDIRPLUS.
    Readdirplus,
    /// FUSE_RELEASEDIR.
    Releasedir,
    /// FUSE_FSYNCDIR.
    Fsyncdir,
    /// FUSE_GETLK.
    Getlk,
    /// FUSE_SETLK and FUSE_SETLKW (which may block: see [`Cost::Blocking`]).
    Setlk,
    /// FUSE_ACCESS.
    Access,
    /// FUSE_CREATE.
    Create,
    /// FUSE_INTERRUPT (no reply): wakes a blocked SETLKW.
    Interrupt,
    /// FUSE_DESTROY.
    Destroy,
    /// FUSE_IOCTL (inode flags and fsxattr only).
    Ioctl,
    /// FUSE_FALLOCATE.
    Fallocate,
    /// FUSE_LSEEK.
    Lseek,
    /// FUSE_COPY_FILE_RANGE.
    CopyFileRange,
    /// FUSE_SYNCFS (7.34).
    Syncfs,
    /// FUSE_TMPFILE (7.37).
    Tmpfile,
    /// FUSE_STATX (7.39).
    Statx,
    /// Nobody: answered ENOSYS (the guest then stops sending it or falls back).
    Unsupported,
}

/// How much work a request is, to decide where it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cost {
    /// Served on the queue thread: a hand-off to a worker would cost more than the request.
    Cheap,
    /// Several syscalls or a possible block (namespace changes, fsync, listings): a worker.
    Costly,
    /// READ/WRITE: a worker from this many payload bytes on.
    FromSize(u32),
    /// May wait long for another party (SETLKW, until the daemon ends the wait): a thread of
    /// its own, so that no worker is held.
    Blocking,
}

/// The facts about one opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpInfo {
    /// Whether the guest waits for a reply (FORGET, BATCH_FORGET and INTERRUPT get none).
    pub replies: bool,
    /// The smallest reply buffer that can carry the node reference or handle this opcode
    /// creates (0: it creates none). A smaller buffer is refused before the filesystem acts.
    pub min_reply: usize,
    /// Where it runs.
    pub cost: Cost,
    /// Who answers it.
    pub op: Op,
}

/// READs at least this large are worth a worker thread (reads of one file run in parallel).
const HEAVY_READ: u32 = 64 * 1024;
/// WRITEs at least this large are worth one: buffered writes to one file serialize on its
/// inode lock in the host kernel, so smaller ones only add a hand-off and lock contention.
const HEAVY_WRITE: u32 = 1024 * 1024;

const HDR: usize = size_of::<OutHeader>();
const ENTRY: usize = HDR + size_of::<EntryOut>();
const OPEN: usize = HDR + size_of::<OpenOut>();

/// Opcodes newer than fuse-backend-rs 0.14's `Opcode` enum.
pub const SYNCFS: u32 = 50;
pub const TMPFILE: u32 = 51;
pub const STATX: u32 = 52;

use Cost::{Blocking, Cheap, Costly, FromSize};

const fn row(replies: bool, min_reply: usize, cost: Cost, op: Op) -> OpInfo {
    OpInfo {
        replies,
        min_reply,
        cost,
        op,
    }
}

/// Anything not in [`ROWS`]: unknown or unsupported, answered ENOSYS at once.
const UNKNOWN: OpInfo = row(true, 0, Cheap, Op::Unsupported);

/// Every opcode the daemon answers other than with ENOSYS.
const ROWS: &[(u32, OpInfo)] = &[
    (Opcode::Lookup as u32, row(true, ENTRY, Cheap, Op::Lookup)),
    (Opcode::Forget as u32, row(false, 0, Cheap, Op::Forget)),
    (Opcode::Getattr as u32, row(true, 0, Cheap, Op::Getattr)),
    // Creates, removals and attribute changes on the queue thread: measured in the guest
    // (scripts/bench-guest.sh), a worker hand-off made creates 9% slower than virtiofsd.
    (Opcode::Setattr as u32, row(true, 0, Cheap, Op::Setattr)),
    (Opcode::Readlink as u32, row(true, 0, Cheap, Op::Readlink)),
    (Opcode::Symlink as u32, row(true, ENTRY, Cheap, Op::Symlink)),
    (Opcode::Mknod as u32, row(true, ENTRY, Cheap, Op::Mknod)),
    (Opcode::Mkdir as u32, row(true, ENTRY, Cheap, Op::Mkdir)),
    (Opcode::Unlink as u32, row(true, 0, Cheap, Op::Unlink)),
    (Opcode::Rmdir as u32, row(true, 0, Cheap, Op::Rmdir)),
    (Opcode::Rename as u32, row(true, 0, Costly, Op::Rename)),
    (Opcode::Link as u32, row(true, ENTRY, Cheap, Op::Link)),
    (Opcode::Open as u32, row(true, OPEN, Cheap, Op::Open)),
    (
        Opcode::Read as u32,
        row(true, 0, FromSize(HEAVY_READ), Op::Read),
    ),
    (
        Opcode::Write as u32,
        row(true, 0, FromSize(HEAVY_WRITE), Op::Write),
    ),
    (Opcode::Statfs as u32, row(true, 0, Cheap, Op::Statfs)),
    (Opcode::Release as u32, row(true, 0, Cheap, Op::Release)),
    (Opcode::Fsync as u32, row(true, 0, Costly, Op::Fsync)),
    (Opcode::Setxattr as u32, row(true, 0, Costly, Op::Setxattr)),
    (Opcode::Getxattr as u32, row(true, 0, Cheap, Op::Getxattr)),
    (Opcode::Listxattr as u32, row(true, 0, Cheap, Op::Listxattr)),
    (
        Opcode::Removexattr as u32,
        row(true, 0, Costly, Op::Removexattr),
    ),
    (Opcode::Flush as u32, row(true, 0, Cheap, Op::Flush)),
    (Opcode::Init as u32, row(true, 0, Cheap, Op::Init)),
    (Opcode::Getlk as u32, row(true, 0, Costly, Op::Getlk)),
    (Opcode::Setlk as u32, row(true, 0, Costly, Op::Setlk)),
    (Opcode::Setlkw as u32, row(true, 0, Blocking, Op::Setlk)),
    (Opcode::Opendir as u32, row(true, OPEN, Cheap, Op::Opendir)),
    (Opcode::Readdir as u32, row(true, 0, Costly, Op::Readdir)),
    (
        Opcode::Releasedir as u32,
        row(true, 0, Cheap, Op::Releasedir),
    ),
    (Opcode::Fsyncdir as u32, row(true, 0, Costly, Op::Fsyncdir)),
    (Opcode::Access as u32, row(true, 0, Cheap, Op::Access)),
    (
        Opcode::Create as u32,
        row(true, ENTRY + size_of::<OpenOut>(), Cheap, Op::Create),
    ),
    // Marks the waiter and wakes the lock waits: no system call but a futex wake.
    (
        Opcode::Interrupt as u32,
        row(false, 0, Cheap, Op::Interrupt),
    ),
    (Opcode::Destroy as u32, row(true, 0, Cheap, Op::Destroy)),
    (
        Opcode::BatchForget as u32,
        row(false, 0, Cheap, Op::BatchForget),
    ),
    (
        Opcode::Fallocate as u32,
        row(true, 0, Costly, Op::Fallocate),
    ),
    (
        Opcode::Readdirplus as u32,
        row(true, 0, Costly, Op::Readdirplus),
    ),
    (Opcode::Rename2 as u32, row(true, 0, Costly, Op::Rename2)),
    (Opcode::Lseek as u32, row(true, 0, Cheap, Op::Lseek)),
    // The kernel's answer to a retrieve notification, which this daemon never sends.
    (
        Opcode::NotifyReply as u32,
        row(false, 0, Cheap, Op::Unsupported),
    ),
    (
        Opcode::CopyFileRange as u32,
        row(true, 0, Costly, Op::CopyFileRange),
    ),
    (Opcode::Ioctl as u32, row(true, 0, Costly, Op::Ioctl)),
    (SYNCFS, row(true, 0, Costly, Op::Syncfs)),
    (
        TMPFILE,
        row(true, ENTRY + size_of::<OpenOut>(), Costly, Op::Tmpfile),
    ),
    (STATX, row(true, 0, Cheap, Op::Statx)),
];

/// Table size: one past the largest opcode in [`ROWS`].
const SLOTS: usize = 64;

const fn build() -> [OpInfo; SLOTS] {
    let mut t = [UNKNOWN; SLOTS];
    let mut i = 0;
    while i < ROWS.len() {
        t[ROWS[i].0 as usize] = ROWS[i].1;
        i += 1;
    }
    t
}

static TABLE: [OpInfo; SLOTS] = build();

/// The facts about `opcode` (any value the guest sends; unknown ones are answered ENOSYS).
pub fn info(opcode: u32) -> OpInfo {
    TABLE.get(opcode as usize).copied().unwrap_or(UNKNOWN)
}

impl OpInfo {
    /// Whether a request of this opcode, whose READ/WRITE payload size is `size`, goes to a
    /// worker.
    pub fn heavy(&self, size: Option<u32>) -> bool {
        match self.cost {
            Cheap => false,
            Costly | Blocking => true,
            FromSize(at) => size.is_some_and(|s| s >= at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_answers_every_opcode() {
        assert_eq!(info(Opcode::Init as u32).op, Op::Init);
        assert_eq!(info(Opcode::Setlkw as u32).cost, Blocking);
        assert_eq!(info(Opcode::Lookup as u32).min_reply, ENTRY);
        assert_eq!(
            info(Opcode::Create as u32).min_reply,
            ENTRY + size_of::<OpenOut>()
        );
        assert!(!info(Opcode::Forget as u32).replies);
        assert!(!info(Opcode::BatchForget as u32).replies);
        assert!(!info(Opcode::Interrupt as u32).replies);
        assert!(!info(Opcode::NotifyReply as u32).replies);
        // Gaps, newer opcodes and garbage are unsupported but answered.
        for op in [0, 7, 19, Opcode::Bmap as u32, 53, 63, 64, 4096, u32::MAX] {
            assert_eq!(info(op), UNKNOWN, "opcode {op}");
        }
        assert_eq!(info(TMPFILE).op, Op::Tmpfile);
        assert_eq!(info(STATX).op, Op::Statx);
        assert_eq!(info(SYNCFS).op, Op::Syncfs);
        assert!(info(Opcode::Read as u32).heavy(Some(HEAVY_READ)));
        assert!(!info(Opcode::Read as u32).heavy(Some(4096)));
        assert!(!info(Opcode::Write as u32).heavy(None));
        assert!(info(Opcode::Rename as u32).heavy(None));
        assert!(!info(Opcode::Getattr as u32).heavy(None));
    }
}
