//! A large READ filled by several threads at once: its reply's data is cut into pieces, the
//! serving thread fills them one after another, and idle pool workers take pieces too. A
//! guest that sends a 4 MiB read as one 1020-page READ (instead of four 1 MiB ones at once)
//! then gets its bytes copied by as many threads as four requests would have had. Knows
//! descriptors, threads and READ's arguments, not files: the filesystem's `read` fills
//! each piece.
//!
//! Nothing waits on a piece nobody has started: the serving thread takes every piece no
//! worker has claimed, so a split READ finishes even when every worker is busy elsewhere. A
//! worker holds its own handle on the chain's guest memory and maps only its piece's
//! buffers (from the guest addresses the serving thread's one walk of the chain found),
//! so nothing it touches can go away under it; a worker that comes late finds no piece
//! left and touches nothing.

use std::io;
use std::ops::Deref;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use virtio_queue::DescriptorChain;
use vm_memory::atomic::GuestMemoryLoadGuard;
use vm_memory::{GuestAddress, GuestMemoryMmap};

use super::chain::{cut_spans, map_spans, Logged, Mapped};
use super::pool::Pool;
use crate::fuse::{Cursor, OwnedRead, ServedFs};
use crate::sync::{recover, LockRecover};

/// Pieces are at least this large. Measured in a guest (`scripts/bench-maxpages.sh`, the
/// daemon with and without splitting): 1 MiB READs cut in two halves cost the daemon a
/// quarter more CPU per byte (two copies at once contend for memory bandwidth, and the
/// hand-off adds a wake-up) for no steady gain, while 4 MiB READs in 2 MiB pieces were
/// 10-20% faster at the same CPU per byte.
pub const MIN_PIECE: usize = 1 << 20;

/// At most this many pieces, whatever the size and the number of threads.
pub const MAX_PIECES: usize = 8;

/// Into how many pieces a READ of `size` bytes is cut, with `spare` workers free to take one
/// now and `cpus` CPUs to run them: one per [`MIN_PIECE`], one per thread that can run at
/// once (the serving thread and the spare workers, no more than the CPUs), at most
/// [`MAX_PIECES`]. 1: not split.
pub fn pieces(size: usize, spare: usize, cpus: usize) -> usize {
    (size / MIN_PIECE)
        .min(spare.saturating_add(1))
        .min(cpus)
        .clamp(1, MAX_PIECES)
}

/// The guest memory of a chain as the dispatcher takes it: how the chain's memory can be
/// held by another thread while it fills part of the reply.
pub trait ChainMemory: Deref<Target = GuestMemoryMmap<Logged>> + Clone + Sized {
    /// A handle on `chain`'s guest memory that a worker may own; `None` where the memory is
    /// only borrowed (tests, fuzzing), and then requests on it are never split.
    fn hold(chain: &DescriptorChain<Self>) -> Option<Box<dyn HeldMemory>> {
        let _ = chain;
        None
    }
}

/// A chain's guest memory, owned by the thread that holds this.
pub trait HeldMemory: Send {
    /// The memory.
    fn memory(&self) -> &GuestMemoryMmap<Logged>;
}

/// How the vhost-user handler maps guest memory: an owned snapshot of the memory table.
type Loaded = GuestMemoryLoadGuard<GuestMemoryMmap<Logged>>;

impl HeldMemory for DescriptorChain<Loaded> {
    fn memory(&self) -> &GuestMemoryMmap<Logged> {
        DescriptorChain::memory(self)
    }
}

impl ChainMemory for Loaded {
    fn hold(chain: &DescriptorChain<Self>) -> Option<Box<dyn HeldMemory>> {
        Some(Box::new(chain.clone()))
    }
}

impl ChainMemory for &GuestMemoryMmap<Logged> {}

/// What the serving thread and the workers share for one split READ.
struct Shared<F: ServedFs> {
    read: OwnedRead<F>,
    /// The reply's data area in guest memory, in order (`read.arg.size` bytes).
    spans: Vec<(GuestAddress, usize)>,
    /// Bytes per piece (the last may be shorter).
    piece: usize,
    count: usize,
    /// The next piece nobody has claimed.
    next: AtomicUsize,
    /// Each piece's outcome, and how many are in.
    done: Mutex<Done>,
    finished: Condvar,
}

/// The pieces' outcomes so far.
struct Done {
    results: Vec<Option<io::Result<usize>>>,
    count: usize,
}

impl<F: ServedFs> Shared<F> {
    /// Piece `i`'s offset into the data and length.
    fn bounds(&self, i: usize) -> (usize, usize) {
        let start = i * self.piece;
        (start, self.piece.min(self.read.size() - start))
    }

    /// Fills piece `i` through `data`, a cursor over exactly its bytes, with the view the
    /// calling thread has pinned (the request's).
    fn fill(&self, i: usize, data: &mut Cursor<'_, '_, Mapped<'_>>) -> io::Result<usize> {
        let (start, len) = self.bounds(i);
        // A panic in the filesystem answers EIO for this piece; the other pieces and the
        // thread waiting for them carry on.
        catch_unwind(AssertUnwindSafe(|| self.read.fill(data, start, len)))
            .unwrap_or_else(|_| Err(io::Error::from_raw_os_error(libc::EIO)))
    }

    /// Records piece `i`'s outcome, waking the serving thread at the last.
    fn finish(&self, i: usize, result: io::Result<usize>) {
        let mut done = self.done.locked();
        done.results[i] = Some(result);
        done.count += 1;
        if done.count == self.count {
            self.finished.notify_all();
        }
    }

    /// A worker's part: pieces until none is left, each mapped from `held`, each served with
    /// the view of the branches the READ's request pinned ([`OwnedRead::fill`]).
    fn help(&self, held: &dyn HeldMemory) {
        loop {
            let i = self.next.fetch_add(1, Ordering::AcqRel);
            if i >= self.count {
                return;
            }
            let (start, len) = self.bounds(i);
            let spans = cut_spans(self.spans.iter().copied(), start, len);
            let result = match map_spans(held.memory(), &spans) {
                Ok(slices) => self.fill(i, &mut Cursor::new(&slices)),
                // Mapped once already by the serving thread's walk: cannot fail.
                Err(_) => Err(io::Error::from_raw_os_error(libc::EFAULT)),
            };
            self.finish(i, result);
        }
    }
}

/// Fills READ `read`'s data, `data` (a cursor over exactly its `read.size()` bytes, whose
/// guest memory spans are `spans`), in `count` pieces: this thread fills the first and then
/// any nobody has taken, `pool` workers (one job each, handed `hold()` for the memory) the
/// others. Returns the bytes read as one read would: the pieces' bytes up to the first short
/// piece; an error only when nothing before it was read.
pub fn read<F: ServedFs>(
    pool: &Pool,
    read: OwnedRead<F>,
    data: &Cursor<'_, '_, Mapped<'_>>,
    spans: Vec<(GuestAddress, usize)>,
    count: usize,
    mut hold: impl FnMut() -> Option<Box<dyn HeldMemory>>,
) -> io::Result<usize> {
    let size = read.size();
    // Whole pages per piece, so each starts where a guest buffer does.
    let piece = size.div_ceil(count).next_multiple_of(4096);
    let count = size.div_ceil(piece);
    let shared = Arc::new(Shared {
        read,
        spans,
        piece,
        count,
        // Piece 0 is this thread's.
        next: AtomicUsize::new(1),
        done: Mutex::new(Done {
            results: (0..count).map(|_| None).collect(),
            count: 0,
        }),
        finished: Condvar::new(),
    });
    for _ in 1..count {
        let Some(held) = hold() else { break };
        let s = shared.clone();
        if pool.spawn(Box::new(move || s.help(&*held))).is_err() {
            break;
        }
    }
    let mut i = 0;
    while i < count {
        let (start, len) = shared.bounds(i);
        let mut mine = data.clone();
        mine.skip(start);
        mine.limit(len);
        let result = shared.fill(i, &mut mine);
        shared.finish(i, result);
        i = shared.next.fetch_add(1, Ordering::AcqRel);
    }
    let mut done = shared.done.locked();
    while done.count < count {
        done = recover(shared.finished.wait(done));
    }
    merge(
        std::mem::take(&mut done.results).into_iter().map(|r| {
            // Every piece is in (count reached).
            r.unwrap_or_else(|| Err(io::Error::from_raw_os_error(libc::EIO)))
        }),
        piece,
    )
}

/// The bytes a read made of `results`, pieces of `piece` bytes in order, reports: up to and
/// including the first short one; the first error if nothing came before it.
fn merge(results: impl Iterator<Item = io::Result<usize>>, piece: usize) -> io::Result<usize> {
    let mut total = 0;
    for r in results {
        match r {
            Ok(n) => {
                total += n;
                if n < piece {
                    break;
                }
            }
            Err(e) if total == 0 => return Err(e),
            Err(_) => break,
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{FsConfig, UnionFs, ROOT_ID};
    use crate::fuse::{Filesystem, Request};
    use fuse_backend_rs::abi::fuse_abi::ReadIn;
    use fuse_backend_rs::api::filesystem::Context;
    use vm_memory::Bytes;

    struct Owned(GuestMemoryMmap<Logged>);

    impl HeldMemory for Owned {
        fn memory(&self) -> &GuestMemoryMmap<Logged> {
            &self.0
        }
    }

    /// A branch edit while a READ runs: the pieces a worker fills are served from the view of
    /// the branches the READ's request pinned, like the pieces the serving thread fills, not
    /// from the one current when the worker starts (here: `nullrw`, switched on after the
    /// request began, would leave the worker's pieces unread).
    #[test]
    fn a_worker_fills_its_pieces_with_the_requests_view() {
        let dir = tempfile::tempdir().unwrap();
        let size = 2 * MIN_PIECE;
        let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8 + 1).collect();
        std::fs::write(dir.path().join("f"), &data).unwrap();
        let branch = format!("{}=RW", dir.path().display()).parse().unwrap();
        let fs = Arc::new(
            UnionFs::new(FsConfig {
                branches: vec![branch],
                opts: Default::default(),
                ids: Default::default(),
            })
            .unwrap(),
        );
        let ctx = Context::new();
        // The request begins: its view is pinned. Then the host changes the options.
        let view = fs.view();
        let req = Request {
            unique: 1,
            ctx,
            secctx: None,
            view: &view,
        };
        let node = fs.lookup(&req, ROOT_ID, c"f").unwrap().inode;
        let (fh, _, _) = fs.open(&req, node, libc::O_RDONLY as u32, 0).unwrap();
        fs.update_options(|o| {
            o.nullrw = true;
            Ok(())
        })
        .unwrap();
        let arg = ReadIn {
            fh: fh.unwrap(),
            size: size as u32,
            ..Default::default()
        };
        let mem = GuestMemoryMmap::<Logged>::from_ranges(&[(GuestAddress(0), size)]).unwrap();
        let shared = Arc::new(Shared {
            read: OwnedRead::new(fs.clone(), 1, ctx, view.clone(), node, arg, None),
            spans: vec![(GuestAddress(0), size)],
            piece: MIN_PIECE,
            count: 2,
            // Every piece is the worker's.
            next: AtomicUsize::new(0),
            done: Mutex::new(Done {
                results: vec![None, None],
                count: 0,
            }),
            finished: Condvar::new(),
        });
        let held = Owned(mem.clone());
        let worker = shared.clone();
        std::thread::spawn(move || worker.help(&held))
            .join()
            .unwrap();
        let done = shared.done.locked();
        assert_eq!(done.count, 2);
        for r in &done.results {
            assert_eq!(*r.as_ref().unwrap().as_ref().unwrap(), MIN_PIECE);
        }
        let mut got = vec![0u8; size];
        mem.read_slice(&mut got, GuestAddress(0)).unwrap();
        assert!(
            got == data,
            "the worker read the file as the request's view says"
        );
        // A request that begins now sees the new options.
        assert!(fs.view().opts.nullrw);
    }

    #[test]
    fn pieces_follow_size_threads_and_cpus() {
        // Below two minimum pieces: never split.
        assert_eq!(pieces(MIN_PIECE * 2 - 1, 8, 8), 1);
        assert_eq!(pieces(4096, 8, 8), 1);
        // 2 MiB with one spare worker on 2 CPUs: two halves; 1 MiB is never cut.
        assert_eq!(pieces(2 << 20, 1, 2), 2);
        assert_eq!(pieces(1 << 20, 1, 2), 1);
        // No worker free: this thread alone.
        assert_eq!(pieces(4 << 20, 0, 8), 1);
        // One CPU: splitting would only take turns.
        assert_eq!(pieces(4 << 20, 8, 1), 1);
        // ~4 MiB on a large host: one per MiB, at most MAX_PIECES.
        assert_eq!(pieces(4_177_920, 64, 64), 3);
        assert_eq!(pieces(4_177_920, 1, 2), 2);
        assert_eq!(pieces(64 << 20, 64, 64), MAX_PIECES);
        // A host reporting no CPUs still serves.
        assert_eq!(pieces(4 << 20, 2, 0), 1);
    }

    #[test]
    fn merge_stops_at_the_first_short_piece_or_error() {
        let ok = |v: &[usize]| v.iter().map(|&n| Ok(n)).collect::<Vec<_>>();
        assert_eq!(merge(ok(&[8, 8, 8]).into_iter(), 8).unwrap(), 24);
        // End of file inside the second piece: what came after is not reported.
        assert_eq!(merge(ok(&[8, 3, 8]).into_iter(), 8).unwrap(), 11);
        assert_eq!(merge(ok(&[0, 8]).into_iter(), 8).unwrap(), 0);
        let e = || Err(io::Error::from_raw_os_error(libc::EIO));
        assert_eq!(merge(vec![Ok(8), e(), Ok(8)].into_iter(), 8).unwrap(), 8);
        let first = merge(vec![e(), Ok(8)].into_iter(), 8).unwrap_err();
        assert_eq!(first.raw_os_error(), Some(libc::EIO));
    }
}
