//! Serves one FUSE request from one descriptor chain, walked once: its buffers mapped, the
//! header read from guest memory once, the request placed by the opcode table's cost (here on
//! the queue thread, on a worker, or on a thread of its own: that thread maps the buffers the
//! walk found, it does not walk again), then handed to the protocol
//! server (`crate::fuse`) as cursors over the chain's buffers. A large READ's data may be
//! filled by several threads (`split.rs`). Knows descriptors, not FUSE opcodes beyond their
//! cost. Guest input is untrusted: nothing here may panic on it.

use std::io;
use std::mem::size_of;
use std::sync::Arc;

use fuse_backend_rs::abi::fuse_abi::{InHeader, OutHeader};
use log::{debug, warn};
use virtio_queue::DescriptorChain;

use super::chain::{Bad, Mapped, Parts, Ring, Spans};
use super::pool::Pool;
use super::split::{self, ChainMemory};
use crate::fuse::{self, Cursor, Negotiated, ReadJob, ServedFs, Server};

/// Turns descriptor chains into FUSE replies for one filesystem. Shared by all queue threads
/// and workers.
pub struct Dispatcher<F: ServedFs> {
    server: Server<F>,
    /// The filesystem served (the server's).
    pub(super) fs: Arc<F>,
    /// The worker pool, whose idle workers help fill a large READ (`split.rs`); none
    /// without a pool.
    helpers: Option<Arc<Pool>>,
    /// CPUs this process may run on: no more threads than these fill one READ.
    cpus: usize,
}

/// Where a request runs: the opcode table's cost; for READ and WRITE, their size (the
/// third field of ReadIn and WriteIn, read from `r`, the cursor past the header).
fn place_of(hdr: &InHeader, r: &Cursor<'_, '_, Mapped<'_>>) -> Place {
    let info = fuse::info(hdr.opcode);
    if info.cost == fuse::Cost::Blocking {
        return Place::OwnThread;
    }
    let size = matches!(info.cost, fuse::Cost::FromSize(_))
        .then(|| {
            let mut args = r.clone();
            args.skip(16);
            args.read_obj::<u32>().ok()
        })
        .flatten();
    if info.heavy(size) {
        Place::Worker
    } else {
        Place::Here
    }
}

/// Where a request runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// On the queue thread.
    Here,
    /// On a pool worker.
    Worker,
    /// On a thread of its own (it may wait without bound).
    OwnThread,
}

impl<F: ServedFs> Dispatcher<F> {
    /// Wraps `fs`; `max_pages` is the `--max-pages` ceiling (at most 1020).
    pub fn new(fs: F, max_pages: u16) -> Self {
        Self::shared(Arc::new(fs), max_pages)
    }

    /// Serves `fs`, which the caller keeps a handle on too (tests, fuzzing).
    pub fn shared(fs: Arc<F>, max_pages: u16) -> Self {
        Dispatcher {
            server: Server::new(fs.clone(), max_pages),
            fs,
            helpers: None,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }

    /// Lets idle workers of `pool` help fill large READs.
    pub(crate) fn helpers(mut self, pool: Option<Arc<Pool>>) -> Self {
        self.helpers = pool;
        self
    }

    /// Caps the `max_write` INIT announces at `bytes` (`--max-write`; none by default here).
    pub fn max_write(mut self, bytes: u32) -> Self {
        self.server = self.server.max_write(bytes);
        self
    }

    /// Negotiates FUSE_DIRECT_IO_ALLOW_MMAP when `on` (virtiofsd's `--allow-mmap`).
    pub fn allow_mmap(mut self, on: bool) -> Self {
        self.server = self.server.allow_mmap(on);
        self
    }

    /// The limits currently in force (after INIT: what the guest was told).
    pub fn limits(&self) -> Negotiated {
        self.server.limits()
    }

    /// The wrapped filesystem, for assertions in tests.
    #[cfg(test)]
    pub(crate) fn fs_for_tests(&self) -> &F {
        &self.fs
    }

    /// Forgets the session: the filesystem drops its state as on FUSE_DESTROY.
    pub fn reset(&self) {
        self.server.reset()
    }

    /// Ends the requests that wait without bound (lock waits), because the rings stop (see
    /// [`crate::fuse::Cancel::RingStop`]). Whether there were any.
    pub fn stop_waits(&self) -> bool {
        self.server.stop_waits()
    }

    /// The device state (see `crate::fuse::state`), for a peer reading `reads`.
    pub fn save_state(
        &self,
        opts: crate::fs::session::ExportOptions,
        reads: fuse::state::Versions,
    ) -> Result<Vec<u8>, fuse::state::StateError> {
        self.server.save_state(opts, reads)
    }

    /// Makes the device state in `bytes` this device's (see `crate::fuse::state`).
    pub fn load_state(
        &self,
        bytes: &[u8],
        on_error: crate::fs::session::OnError,
    ) -> io::Result<crate::fs::session::Imported> {
        self.server.load_state(bytes, on_error)
    }

    /// Serves the request in `chain`, whose descriptors are in `ring`'s table, arriving on a
    /// queue of `queue_size` entries (what INIT caps max_pages by; `ring.size` but in tests
    /// and fuzzing, which negotiate sizes their mock queues do not have). Returns the
    /// number of bytes written into the chain, for `add_used`. Never panics on guest input.
    pub fn handle<M>(&self, chain: DescriptorChain<M>, ring: Ring, queue_size: u16) -> u32
    where
        M: ChainMemory,
    {
        // Asked to serve wherever it belongs, it never gives the chain back.
        self.serve_or_defer(chain, ring, queue_size, |_| true)
            .unwrap_or(0)
    }

    /// [`Dispatcher::handle`], unless `here`, told where the request belongs once its header
    /// is read, answers false: then the request comes back unserved as walked (its header
    /// and its buffers' guest addresses) with that place, for the caller to hand to another
    /// thread ([`Dispatcher::serve_deferred`], which maps those buffers and does not walk the
    /// chain again). A malformed chain is dropped here (`Ok(0)`) without asking.
    pub(crate) fn serve_or_defer<M>(
        &self,
        chain: DescriptorChain<M>,
        ring: Ring,
        queue_size: u16,
        here: impl FnOnce(Place) -> bool,
    ) -> Result<u32, (Box<Deferred<M>>, Place)>
    where
        M: ChainMemory,
    {
        let head = chain.head_index();
        let mem = chain.memory();
        // The one walk over the chain: every buffer mapped, the order checked.
        let parts = match Parts::of_chain(mem, &chain, ring) {
            Ok(parts) => parts,
            Err(Bad::Order) => {
                // Virtio requires device-readable descriptors first; QEMU calls such a chain
                // a broken driver. Serving a reordered view of it would be guesswork: drop it.
                warn!(
                    "descriptor chain {head}: writable descriptor before a readable one, dropped"
                );
                return Ok(0);
            }
            Err(Bad::Address) => {
                warn!("descriptor chain {head}: a buffer outside guest memory, dropped");
                return Ok(0);
            }
        };
        let mut r = parts.reader();
        // The one read of the header from guest memory.
        let Ok(hdr) = r.read_obj::<InHeader>() else {
            warn!("descriptor chain {head}: no readable FUSE header, dropped");
            return Ok(0);
        };
        let place = place_of(&hdr, &r);
        if !here(place) {
            let spans = parts.spans();
            drop(parts);
            // Boxed: the hand-off allocates its job anyway; the request served here returns a word.
            return Err((Box::new(Deferred { chain, hdr, spans }), place));
        }
        Ok(self.serve_parts(&chain, &hdr, r, &parts, queue_size))
    }

    /// Serves a request [`Dispatcher::serve_or_defer`] handed back, on the thread it was
    /// handed to: its buffers mapped from the addresses the walk found, its header the one
    /// the walk read (a guest rewriting either in the meantime changes nothing). Returns the
    /// bytes written into the chain, for `add_used`.
    pub(crate) fn serve_deferred<M>(&self, d: Deferred<M>, queue_size: u16) -> u32
    where
        M: ChainMemory,
    {
        // The memory the walk mapped, held by the chain since: every span maps again.
        let Ok(parts) = Parts::of_spans(d.chain.memory(), &d.spans) else {
            warn!(
                "descriptor chain {}: a buffer outside guest memory, dropped",
                d.chain.head_index()
            );
            return 0;
        };
        let mut r = parts.reader();
        r.skip(size_of::<InHeader>());
        self.serve_parts(&d.chain, &d.hdr, r, &parts, queue_size)
    }

    /// Hands the request `hdr` (its arguments in `r`, its reply room in `parts`' writable
    /// buffers) to the protocol server.
    fn serve_parts<'a, M: ChainMemory>(
        &self,
        chain: &DescriptorChain<M>,
        hdr: &InHeader,
        r: Cursor<'_, 'a, Mapped<'a>>,
        parts: &Parts<'a, Mapped<'a>>,
        queue_size: u16,
    ) -> u32 {
        let link = Link {
            queue_size,
            parts,
            chain,
            helpers: self.helpers.as_deref(),
            cpus: self.cpus,
            unique: hdr.unique,
        };
        let used = self.server.serve(hdr, r, parts.writer(), &link);
        u32::try_from(used).unwrap_or(0)
    }
}

/// A request walked on the queue thread and placed on another: the chain (its memory, its
/// head for `add_used`), the header read, its buffers' guest addresses.
pub(crate) struct Deferred<M: ChainMemory> {
    chain: DescriptorChain<M>,
    hdr: InHeader,
    spans: Spans,
}

impl<M: ChainMemory> Deferred<M> {
    /// The chain's head index, for `add_used`.
    pub(crate) fn head(&self) -> u16 {
        self.chain.head_index()
    }
}

/// One chain as the protocol server's transport: its queue's size, and the pool that may
/// help fill its READ.
struct Link<'c, 'p, 'a, M: ChainMemory> {
    queue_size: u16,
    parts: &'p Parts<'a, Mapped<'a>>,
    chain: &'c DescriptorChain<M>,
    helpers: Option<&'c Pool>,
    cpus: usize,
    unique: u64,
}

impl<'a, F, M> fuse::Transport<F, Mapped<'a>> for Link<'_, '_, 'a, M>
where
    F: ServedFs,
    M: ChainMemory,
{
    fn max_pages(&self) -> u16 {
        fuse::effective_max_pages(fuse::MAX_PAGES_LIMIT, self.queue_size)
    }

    /// A READ of two pieces or more, with workers idle, is filled by them and this thread
    /// together (`split.rs`), each piece with the request's own view of the branches.
    fn fill_read(
        &self,
        job: &ReadJob<'_, F>,
        data: &mut Cursor<'_, '_, Mapped<'a>>,
    ) -> io::Result<usize> {
        let size = job.size();
        let helpers = self.helpers.filter(|_| size >= 2 * split::MIN_PIECE);
        let count = helpers.map_or(1, |p| split::pieces(size, p.spare(), self.cpus));
        match helpers {
            Some(pool) if count > 1 => {
                debug!("unique={} READ in {count} pieces", self.unique);
                let spans = self.parts.writable_spans(size_of::<OutHeader>(), size);
                split::read(pool, job.to_owned(), data, spans, count, || {
                    M::hold(self.chain)
                })
            }
            _ => job.fill(data, 0, size),
        }
    }
}
