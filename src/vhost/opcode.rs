//! One table of what the dispatcher knows about each FUSE opcode: whether it is answered, the
//! smallest reply buffer that can carry the state it creates, how costly it is (queue thread
//! or worker), and who serves it. Adding an opcode is one row here plus its handler. Pure data:
//! no guest memory, no files.

use std::mem::size_of;

pub(crate) use fuse_backend_rs::abi::fuse_abi::Opcode;
use fuse_backend_rs::abi::fuse_abi::{EntryOut, OpenOut, OutHeader};

/// This project's own handlers (see `own.rs`): INIT, READ and WRITE (fuse-backend-rs caps
/// them at 256 pages and 1 MiB), and what fuse-backend-rs 0.14 does not dispatch or gets wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Own {
    /// FUSE_INIT.
    Init,
    /// FUSE_READ.
    Read,
    /// FUSE_WRITE.
    Write,
    /// FUSE_GETLK.
    Getlk,
    /// FUSE_SETLK and FUSE_SETLKW (which may block: see [`Cost::Blocking`]).
    Setlk,
    /// FUSE_INTERRUPT: wakes a blocked SETLKW.
    Interrupt,
    /// FUSE_SYNCFS (7.34).
    Syncfs,
    /// FUSE_COPY_FILE_RANGE.
    CopyFileRange,
    /// FUSE_IOCTL (inode flags and fsxattr only).
    Ioctl,
    /// FUSE_SETXATTR, whose argument grows with FUSE_SETXATTR_EXT (which fuse-backend-rs
    /// 0.14 does not know).
    Setxattr,
    /// FUSE_TMPFILE (7.37).
    Tmpfile,
}

/// Who answers an opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ServedBy {
    /// This project's own handler.
    Daemon(Own),
    /// Decoded and answered here (`meta.rs`), calling the `FileSystem` implementation as
    /// the `Server` would.
    Direct(Meta),
    /// fuse-backend-rs's `Server`, calling the `FileSystem` implementation.
    Library,
    /// Nobody yet: answered ENOSYS (the guest then stops sending it or falls back).
    Unsupported,
}

/// How much work a request is, to decide where it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cost {
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
pub(crate) struct OpInfo {
    /// Whether the guest waits for a reply (FORGET, BATCH_FORGET and INTERRUPT get none).
    pub replies: bool,
    /// The smallest reply buffer that can carry the node reference or handle this opcode
    /// creates (0: it creates none). A smaller buffer is refused before the filesystem acts.
    pub min_reply: usize,
    /// Where it runs.
    pub cost: Cost,
    /// Who answers it.
    pub served_by: ServedBy,
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
pub(crate) const SYNCFS: u32 = 50;
pub(crate) const TMPFILE: u32 = 51;
pub(crate) const STATX: u32 = 52;

pub(crate) use super::meta::Meta;
use Cost::{Blocking, Cheap, Costly, FromSize};
use Own::{
    CopyFileRange, Getlk, Init, Interrupt, Ioctl, Read, Setlk, Setxattr, Syncfs, Tmpfile, Write,
};
use ServedBy::{Daemon, Direct, Library, Unsupported};

const fn row(replies: bool, min_reply: usize, cost: Cost, served_by: ServedBy) -> OpInfo {
    OpInfo {
        replies,
        min_reply,
        cost,
        served_by,
    }
}

/// Anything not in [`ROWS`]: unknown or unsupported, answered ENOSYS at once.
const UNKNOWN: OpInfo = row(true, 0, Cheap, Unsupported);

/// Every opcode the daemon answers other than with ENOSYS.
const ROWS: &[(u32, OpInfo)] = &[
    (
        Opcode::Lookup as u32,
        row(true, ENTRY, Cheap, Direct(Meta::Lookup)),
    ),
    (
        Opcode::Forget as u32,
        row(false, 0, Cheap, Direct(Meta::Forget)),
    ),
    (
        Opcode::Getattr as u32,
        row(true, 0, Cheap, Direct(Meta::Getattr)),
    ),
    // Creates, removals and attribute changes on the queue thread: measured in the guest
    // (scripts/bench-guest.sh), a worker hand-off made creates 9% slower than virtiofsd.
    (
        Opcode::Setattr as u32,
        row(true, 0, Cheap, Direct(Meta::Setattr)),
    ),
    (Opcode::Readlink as u32, row(true, 0, Cheap, Library)),
    (Opcode::Symlink as u32, row(true, ENTRY, Cheap, Library)),
    (Opcode::Mknod as u32, row(true, ENTRY, Cheap, Library)),
    (
        Opcode::Mkdir as u32,
        row(true, ENTRY, Cheap, Direct(Meta::Mkdir)),
    ),
    (
        Opcode::Unlink as u32,
        row(true, 0, Cheap, Direct(Meta::Unlink)),
    ),
    (
        Opcode::Rmdir as u32,
        row(true, 0, Cheap, Direct(Meta::Rmdir)),
    ),
    (Opcode::Rename as u32, row(true, 0, Costly, Library)),
    (Opcode::Link as u32, row(true, ENTRY, Cheap, Library)),
    (
        Opcode::Open as u32,
        row(true, OPEN, Cheap, Direct(Meta::Open)),
    ),
    (
        Opcode::Read as u32,
        row(true, 0, FromSize(HEAVY_READ), Daemon(Read)),
    ),
    (
        Opcode::Write as u32,
        row(true, 0, FromSize(HEAVY_WRITE), Daemon(Write)),
    ),
    (
        Opcode::Statfs as u32,
        row(true, 0, Cheap, Direct(Meta::Statfs)),
    ),
    (
        Opcode::Release as u32,
        row(true, 0, Cheap, Direct(Meta::Release)),
    ),
    (
        Opcode::Fsync as u32,
        row(true, 0, Costly, Direct(Meta::Fsync)),
    ),
    (
        Opcode::Setxattr as u32,
        row(true, 0, Costly, Daemon(Setxattr)),
    ),
    (
        Opcode::Getxattr as u32,
        row(true, 0, Cheap, Direct(Meta::Getxattr)),
    ),
    (
        Opcode::Listxattr as u32,
        row(true, 0, Cheap, Direct(Meta::Listxattr)),
    ),
    (Opcode::Removexattr as u32, row(true, 0, Costly, Library)),
    (
        Opcode::Flush as u32,
        row(true, 0, Cheap, Direct(Meta::Flush)),
    ),
    (Opcode::Init as u32, row(true, 0, Cheap, Daemon(Init))),
    (Opcode::Getlk as u32, row(true, 0, Costly, Daemon(Getlk))),
    (Opcode::Setlk as u32, row(true, 0, Costly, Daemon(Setlk))),
    (Opcode::Setlkw as u32, row(true, 0, Blocking, Daemon(Setlk))),
    (
        Opcode::Opendir as u32,
        row(true, OPEN, Cheap, Direct(Meta::Opendir)),
    ),
    (
        Opcode::Readdir as u32,
        row(true, 0, Costly, Direct(Meta::Readdir)),
    ),
    (
        Opcode::Releasedir as u32,
        row(true, 0, Cheap, Direct(Meta::Releasedir)),
    ),
    (
        Opcode::Fsyncdir as u32,
        row(true, 0, Costly, Direct(Meta::Fsyncdir)),
    ),
    (
        Opcode::Access as u32,
        row(true, 0, Cheap, Direct(Meta::Access)),
    ),
    (
        Opcode::Create as u32,
        row(
            true,
            ENTRY + size_of::<OpenOut>(),
            Cheap,
            Direct(Meta::Create),
        ),
    ),
    // Marks the waiter and wakes the lock waits: no system call but a futex wake.
    (
        Opcode::Interrupt as u32,
        row(false, 0, Cheap, Daemon(Interrupt)),
    ),
    (Opcode::Destroy as u32, row(true, 0, Cheap, Library)),
    (
        Opcode::BatchForget as u32,
        row(false, 0, Cheap, Direct(Meta::BatchForget)),
    ),
    (
        Opcode::Fallocate as u32,
        row(true, 0, Costly, Direct(Meta::Fallocate)),
    ),
    (
        Opcode::Readdirplus as u32,
        row(true, 0, Costly, Direct(Meta::Readdirplus)),
    ),
    (Opcode::Rename2 as u32, row(true, 0, Costly, Library)),
    (
        Opcode::Lseek as u32,
        row(true, 0, Cheap, Direct(Meta::Lseek)),
    ),
    // The kernel's answer to a retrieve notification, which this daemon never sends.
    (
        Opcode::NotifyReply as u32,
        row(false, 0, Cheap, Unsupported),
    ),
    (
        Opcode::CopyFileRange as u32,
        row(true, 0, Costly, Daemon(CopyFileRange)),
    ),
    (Opcode::Ioctl as u32, row(true, 0, Costly, Daemon(Ioctl))),
    (SYNCFS, row(true, 0, Costly, Daemon(Syncfs))),
    (
        TMPFILE,
        row(true, ENTRY + size_of::<OpenOut>(), Costly, Daemon(Tmpfile)),
    ),
    (STATX, row(true, 0, Cheap, Direct(Meta::Statx))),
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

/// The facts about `opcode` (any value the guest sends; unknown ones are [`UNKNOWN`]).
pub(crate) fn info(opcode: u32) -> OpInfo {
    TABLE.get(opcode as usize).copied().unwrap_or(UNKNOWN)
}

impl OpInfo {
    /// Whether a request of this opcode, whose READ/WRITE payload size is `size`, goes to a
    /// worker.
    pub(crate) fn heavy(&self, size: Option<u32>) -> bool {
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
        assert_eq!(info(Opcode::Init as u32).served_by, Daemon(Init));
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
        assert_eq!(info(TMPFILE).served_by, Daemon(Tmpfile));
        assert_eq!(info(STATX).served_by, Direct(Meta::Statx));
        assert_eq!(info(SYNCFS).served_by, Daemon(Syncfs));
        assert!(info(Opcode::Read as u32).heavy(Some(HEAVY_READ)));
        assert!(!info(Opcode::Read as u32).heavy(Some(4096)));
        assert!(!info(Opcode::Write as u32).heavy(None));
        assert!(info(Opcode::Rename as u32).heavy(None));
        assert!(!info(Opcode::Getattr as u32).heavy(None));
    }
}
