//! Serves one FUSE request from one descriptor chain, walked once. The header is read from
//! guest memory once; where the request runs and who answers it is decided by the opcode
//! table (`opcode.rs`): READ and WRITE from the chain's buffers (`io.rs`), the frequent
//! metadata requests from a private copy of their body straight into the reply buffers
//! (`meta.rs`), INIT and the daemon's other handlers (`own.rs`), the remaining known opcodes
//! by fuse-backend-rs's `Server` from a private copy of the request (a copy, so the guest
//! cannot change a request between the checks made on it and its use), the rest ENOSYS.
//! Every request that needs a reply gets one. Guest input is untrusted: nothing here may
//! panic on it.

use std::cell::RefCell;
use std::mem::size_of;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use fuse_backend_rs::abi::fuse_abi::{FsOptions, InHeader, InitIn, InitIn2, Opcode, OutHeader};
use fuse_backend_rs::api::filesystem::{Context, FileSystem};
use fuse_backend_rs::api::server::Server;
use fuse_backend_rs::transport::{pagesize, FuseBuf, Reader, VirtioFsWriter, Writer};
use log::{debug, error, info, warn};
use virtio_queue::DescriptorChain;
use vm_memory::bitmap::BitmapSlice;

/// A request's view of guest memory (writes into it are logged while migrating).
type Slice = Logged;

use super::backend::Logged;
use super::chain::{Bad, Cursor, Mapped, Parts, Ring};
use super::init::{self, Negotiated};
use super::io;
use super::meta::Meta;
use super::opcode::{self, Own, ServedBy};
use super::pool::Pool;
use super::reply::{reply_errno, reply_io_error, reply_ok, RequestError};
use super::split::{self, ChainMemory};
use super::waiters::Waiters;
use crate::fs::own::OwnOps;
use crate::fs::secctx;
use crate::fs::session::Sessions;

/// What the dispatcher needs of a filesystem: fuse-backend-rs's `FileSystem` for what its
/// `Server` answers, and [`OwnOps`] for what this project answers itself.
pub trait ServedFs:
    FileSystem<Inode = u64, Handle = u64> + OwnOps + Sessions + Send + Sync + 'static
{
}

impl<T> ServedFs for T where
    T: FileSystem<Inode = u64, Handle = u64> + OwnOps + Sessions + Send + Sync + 'static
{
}

/// Turns descriptor chains into FUSE replies for one filesystem. Shared by all queue threads
/// and workers.
pub struct Dispatcher<F: FileSystem + Send + Sync> {
    pub(super) fs: Arc<F>,
    server: Server<Arc<F>>,
    max_pages: u16,
    /// The `--max-write` ceiling.
    max_write: u32,
    pub(super) page_size: usize,
    /// [`Negotiated`] packed ([`Negotiated::pack`]).
    limits: AtomicU64,
    /// Requests waiting without bound (SETLKW), for FUSE_INTERRUPT and session ends.
    pub(super) waiters: Waiters,
    /// INIT flags fuse-backend-rs has no name for, enabled when the guest offers them.
    raw_init_flags: u64,
    /// The worker pool, whose idle workers help fill a large READ (`split.rs`); none
    /// without a pool.
    helpers: Option<Arc<Pool>>,
    /// CPUs this process may run on: no more threads than these fill one READ.
    cpus: usize,
}

/// Where a request runs: the opcode table's cost; for READ and WRITE, their size (the
/// third field of ReadIn and WriteIn, read from `r`, the cursor past the header).
fn place_of(hdr: &InHeader, r: &Cursor<'_, '_, Mapped<'_>>) -> Place {
    let info = opcode::info(hdr.opcode);
    if info.cost == opcode::Cost::Blocking {
        return Place::OwnThread;
    }
    let size = matches!(info.cost, opcode::Cost::FromSize(_))
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

std::thread_local! {
    /// Each thread's copy of the request it is serving, reused from request to request.
    static REQUEST: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The largest request the `Server` accepts (its 1 MiB data cap plus a 4 KiB header).
const SERVER_MAX_REQUEST: usize = (1 << 20) + 0x1000;

impl<F> Dispatcher<F>
where
    F: ServedFs,
{
    /// Wraps `fs`; `max_pages` is the `--max-pages` ceiling (at most 1020).
    pub fn new(fs: F, max_pages: u16) -> Self {
        let fs = Arc::new(fs);
        let page_size = pagesize();
        let max_pages = max_pages.clamp(1, init::MAX_PAGES_LIMIT);
        Dispatcher {
            server: Server::new(fs.clone()),
            fs,
            max_pages,
            max_write: u32::MAX,
            page_size,
            limits: AtomicU64::new(Negotiated::upper_bound(max_pages, page_size).pack()),
            raw_init_flags: 0,
            waiters: Waiters::default(),
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
        self.max_write = bytes;
        self
    }

    /// Negotiates FUSE_DIRECT_IO_ALLOW_MMAP when `on` (virtiofsd's `--allow-mmap`).
    pub fn allow_mmap(mut self, on: bool) -> Self {
        if on {
            self.raw_init_flags |= init::DIRECT_IO_ALLOW_MMAP;
        } else {
            self.raw_init_flags &= !init::DIRECT_IO_ALLOW_MMAP;
        }
        self
    }

    /// The limits currently in force (after INIT: what the guest was told).
    pub fn limits(&self) -> Negotiated {
        Negotiated::unpack(self.limits.load(Ordering::Acquire))
    }

    /// The wrapped filesystem, for assertions in tests.
    #[cfg(test)]
    pub(crate) fn fs_for_tests(&self) -> &F {
        &self.fs
    }

    /// Forgets the session: the filesystem drops its state as on FUSE_DESTROY.
    pub fn reset(&self) {
        self.waiters.interrupt_all();
        self.fs.wake_waits();
        self.fs.destroy();
        self.limits.store(
            Negotiated::upper_bound(self.max_pages, self.page_size).pack(),
            Ordering::Release,
        );
    }

    /// Ends the requests that wait without bound (lock waits), because the rings stop (see
    /// [`crate::fs::own::Cancel::RingStop`]). Whether there were any.
    pub fn stop_waits(&self) -> bool {
        let n = self.waiters.stop_all();
        if n > 0 {
            log::info!("rings stopping: {n} lock waits end");
            self.fs.wake_waits();
        }
        n > 0
    }

    /// The device state (see `state/`): what INIT negotiated and the filesystem's session, in
    /// the newest version a peer reading `reads` reads (an error if the session needs a newer
    /// one).
    pub fn save_state(
        &self,
        opts: crate::fs::session::ExportOptions,
        reads: super::state::Versions,
    ) -> Result<Vec<u8>, super::state::StateError> {
        let limits = self.limits();
        let state = super::state::DeviceState {
            max_pages: limits.max_pages,
            max_write: limits.max_write,
            session: self.fs.export(opts),
        };
        super::state::encode_for(state, reads)
    }

    /// Makes the device state in `bytes` (any version this daemon reads) this device's (see
    /// `state/`). Nothing is loaded unless all of it decodes.
    pub fn load_state(
        &self,
        bytes: &[u8],
        on_error: crate::fs::session::OnError,
    ) -> std::io::Result<crate::fs::session::Imported> {
        let s = super::state::decode(bytes).map_err(std::io::Error::other)?;
        let lim = s.negotiated();
        let max_write = usize::from(init::MAX_PAGES_LIMIT) * self.page_size;
        if lim.max_pages == 0
            || lim.max_pages > init::MAX_PAGES_LIMIT
            || lim.max_write as usize > max_write
        {
            return Err(std::io::Error::other(format!(
                "device state negotiated max_pages={} max_write={}, outside 1..={} and {max_write}",
                lim.max_pages,
                lim.max_write,
                init::MAX_PAGES_LIMIT
            )));
        }
        let done = self
            .fs
            .import(s.session, on_error)
            .map_err(std::io::Error::other)?;
        self.limits.store(lim.pack(), Ordering::Release);
        Ok(done)
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
    /// is read, answers false: then the chain comes back unserved with that place, for the
    /// caller to hand to another thread (which walks it again: only costly requests go).
    /// A malformed chain is dropped here (`Ok(0)`) without asking.
    pub(crate) fn serve_or_defer<M>(
        &self,
        chain: DescriptorChain<M>,
        ring: Ring,
        queue_size: u16,
        here: impl FnOnce(Place) -> bool,
    ) -> Result<u32, (DescriptorChain<M>, Place)>
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
            drop(parts);
            return Err((chain, place));
        }
        let info = opcode::info(hdr.opcode);
        debug!(
            "unique={} opcode={} nodeid={} len={} uid={} pid={}",
            hdr.unique, hdr.opcode, hdr.nodeid, hdr.len, hdr.uid, hdr.pid
        );
        let result = catch_unwind(AssertUnwindSafe(|| {
            let _view = self.fs.begin_request();
            match info.served_by {
                ServedBy::Daemon(own @ (Own::Read | Own::Write)) => {
                    self.serve_io(own, &hdr, r, &parts, &chain)
                }
                _ => self.serve(&hdr, info, r, parts.writer(), mem, &chain, queue_size),
            }
        }))
        .unwrap_or_else(|_| {
            error!(
                "unique={} opcode={}: filesystem panicked",
                hdr.unique, hdr.opcode
            );
            Err(RequestError::Panic)
        });
        let used = match result {
            Ok(n) => n,
            Err(e) if !info.replies => {
                debug!("unique={} opcode={}: {e}", hdr.unique, hdr.opcode);
                0
            }
            Err(e) => {
                let errno = e.errno();
                warn!(
                    "unique={} opcode={}: {e}; replying errno {errno}",
                    hdr.unique, hdr.opcode
                );
                reply_errno(&mut parts.writer(), hdr.unique, errno).unwrap_or(0)
            }
        };
        Ok(u32::try_from(used).unwrap_or(0))
    }

    /// Serves READ or WRITE straight from the chain's buffers (`r` is past the header,
    /// `parts` the chain's buffers, `chain` the chain they were mapped from).
    fn serve_io<M: ChainMemory>(
        &self,
        own: Own,
        hdr: &InHeader,
        r: Cursor<'_, '_, Mapped<'_>>,
        parts: &Parts<'_, Mapped<'_>>,
        chain: &DescriptorChain<M>,
    ) -> Result<usize, RequestError> {
        let mut w = parts.writer();
        let mut ctx = Context::from(hdr);
        if let Err(e) = self.fs.id_remap(&mut ctx) {
            return reply_io_error(&mut w, hdr.unique, &e);
        }
        if own == Own::Write {
            return io::write(&*self.fs, &ctx, hdr, r, w, self.limits().max_write);
        }
        let max_read = self.limits().max_read(self.page_size);
        io::read(hdr, r, w, max_read, |arg, owner, data| {
            let read = split::ReadArgs {
                ctx,
                nodeid: hdr.nodeid,
                arg: *arg,
                owner,
            };
            let size = arg.size as usize;
            let helpers = self
                .helpers
                .as_ref()
                .filter(|_| size >= 2 * split::MIN_PIECE);
            let count = helpers.map_or(1, |p| split::pieces(size, p.spare(), self.cpus));
            match helpers {
                Some(pool) if count > 1 => {
                    debug!("unique={} READ in {count} pieces", hdr.unique);
                    let spans = parts.writable_spans(size_of::<OutHeader>(), size);
                    split::read(pool, &self.fs, read, data, spans, count, || M::hold(chain))
                }
                _ => self.fs.read(
                    &ctx, hdr.nodeid, arg.fh, data, arg.size, arg.offset, owner, arg.flags,
                ),
            }
        })
    }

    /// Serves a request whose header `hdr` was read from `r` (which is past it); `w` is the
    /// reply's buffers. The `Server` and this daemon's other opcodes get fuse-backend-rs's
    /// writer over the chain (and, for the latter, its reader, the header read again and
    /// passed over: `hdr` is what counts).
    #[allow(clippy::too_many_arguments)]
    fn serve<M>(
        &self,
        hdr: &InHeader,
        info: opcode::OpInfo,
        r: Cursor<'_, '_, Mapped<'_>>,
        mut w: Cursor<'_, '_, Mapped<'_>>,
        mem: &M::Target,
        chain: &DescriptorChain<M>,
        queue_size: u16,
    ) -> Result<usize, RequestError>
    where
        M: ChainMemory,
    {
        let writer = || -> Result<Writer<'_, Slice>, RequestError> {
            Ok(VirtioFsWriter::new(mem, chain.clone())
                .map_err(RequestError::Chain)?
                .into())
        };
        let op = hdr.opcode;
        match info.served_by {
            ServedBy::Unsupported if !info.replies => Ok(0),
            ServedBy::Unsupported => reply_errno(&mut w, hdr.unique, libc::ENOSYS),
            ServedBy::Daemon(own) => {
                let mut r: Reader<'_, Slice> = Reader::from_descriptor_chain(mem, chain.clone())
                    .map_err(RequestError::Chain)?;
                r.read_obj::<InHeader>().map_err(RequestError::Decode)?;
                self.serve_own(own, hdr, r, writer()?, queue_size)
            }
            ServedBy::Direct(op) => {
                if w.available() < info.min_reply {
                    return reply_errno(&mut w, hdr.unique, libc::EINVAL);
                }
                self.serve_direct(op, info.replies, hdr, r, w)
            }
            ServedBy::Library => {
                let room = w.available();
                if room < info.min_reply {
                    // The filesystem would open a handle or take a reference the guest could
                    // never learn about (and so never release): refuse before acting.
                    return reply_errno(&mut w, hdr.unique, libc::EINVAL);
                }
                let n = self.serve_copy(hdr, r, writer()?)?;
                // fuse-backend-rs replies to DESTROY but reports 0 bytes written (and writes
                // nothing where the chain has no room for the header).
                if op == Opcode::Destroy as u32 && room >= size_of::<OutHeader>() {
                    Ok(n.max(size_of::<OutHeader>()))
                } else {
                    Ok(n)
                }
            }
        }
    }

    /// Hands the request to the `Server` from this thread's private copy: the header as read
    /// once, then the rest of the request copied out of guest memory in one pass.
    ///
    /// A request that carries extensions (a security context after a create's arguments)
    /// reaches the `Server` without them, as it would without FUSE_SECURITY_CTX; the context
    /// goes beside it ([`secctx::scoped`]).
    pub(super) fn serve_copy(
        &self,
        hdr: &InHeader,
        mut r: Cursor<'_, '_, Mapped<'_>>,
        mut w: Writer<'_, Slice>,
    ) -> Result<usize, RequestError> {
        let (hdr, ext) = match self.body_of(hdr, &mut r) {
            Ok(got) => got,
            Err(e) => return reply_io_error(&mut w, hdr.unique, &e),
        };
        REQUEST.with(|buf| {
            let mut buf = buf.borrow_mut();
            let len = (hdr.len as usize).min(SERVER_MAX_REQUEST);
            buf.clear();
            buf.resize(len, 0);
            buf[..size_of::<InHeader>()].copy_from_slice(vm_memory::ByteValued::as_slice(&hdr));
            std::io::Read::read_exact(&mut r, &mut buf[size_of::<InHeader>()..])
                .map_err(RequestError::Decode)?;
            let copy = Reader::from_fuse_buffer(FuseBuf::new(&mut buf[..]))
                .map_err(RequestError::Chain)?;
            secctx::scoped(ext, || self.server.handle_message(copy, w, None, None))
                .map_err(RequestError::Server)
        })
    }

    /// Serves a [`Meta`] request from a private copy of its body (on the stack unless large),
    /// the reply written straight into `w`.
    fn serve_direct(
        &self,
        op: Meta,
        replies: bool,
        hdr: &InHeader,
        mut r: Cursor<'_, '_, Mapped<'_>>,
        mut w: Cursor<'_, '_, Mapped<'_>>,
    ) -> Result<usize, RequestError> {
        // As the `Server`: a request over its size cap gets ENOMEM (a forget, nothing).
        if hdr.len as usize > SERVER_MAX_REQUEST {
            return match replies {
                true => reply_errno(&mut w, hdr.unique, libc::ENOMEM),
                false => Ok(0),
            };
        }
        let (hdr, ext) = match self.body_of(hdr, &mut r) {
            Ok(got) => got,
            Err(_) if !replies => return Ok(0),
            Err(e) => return reply_io_error(&mut w, hdr.unique, &e),
        };
        let mut body: smallvec::SmallVec<[u8; 512]> = smallvec::SmallVec::new();
        body.resize(
            (hdr.len as usize - size_of::<InHeader>()).min(SERVER_MAX_REQUEST),
            0,
        );
        r.read_exact(&mut body).map_err(RequestError::Decode)?;
        let mut ctx = Context::from(&hdr);
        if let Err(e) = self.fs.id_remap(&mut ctx) {
            return match replies {
                true => reply_io_error(&mut w, hdr.unique, &e),
                false => Ok(0),
            };
        }
        secctx::scoped(ext, || self.serve_meta(op, &ctx, &hdr, &body, &mut w))
    }

    /// Checks the length the header `hdr` declares against the chain (`r` is past the
    /// header) and takes any extensions off the end of the request, parsed; `r` is left at
    /// the body, whose length is what the returned header declares. Errors are the guest's:
    /// EINVAL for a length shorter than the header or longer than the chain's readable
    /// bytes (a Linux guest's is always exact), or extensions that do not fit or parse.
    fn body_of(
        &self,
        hdr: &InHeader,
        r: &mut Cursor<'_, '_, Mapped<'_>>,
    ) -> std::io::Result<(InHeader, Option<secctx::SecContext>)> {
        let mut hdr = *hdr;
        let Some(body_len) = (hdr.len as usize)
            .checked_sub(size_of::<InHeader>())
            .filter(|&n| n <= r.available())
        else {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        };
        let mut ext = None;
        if hdr.padding as u16 != 0 {
            // total_extlen: the low half of what fuse-backend-rs calls padding.
            let ext_len = usize::from(hdr.padding as u16) * 8;
            if ext_len > body_len {
                return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
            }
            let mut tail = r.clone();
            tail.skip(body_len - ext_len);
            ext = self.extensions(&hdr, &mut tail)?;
            hdr.len = (size_of::<InHeader>() + body_len - ext_len) as u32;
            hdr.padding &= !0xffff;
        }
        Ok((hdr, ext))
    }

    pub(super) fn init<S: BitmapSlice>(
        &self,
        hdr: &InHeader,
        mut r: Reader<'_, S>,
        mut w: Writer<'_, S>,
        queue_size: u16,
    ) -> Result<usize, RequestError> {
        let arg: InitIn = r.read_obj().map_err(RequestError::Decode)?;
        if arg.major < fuse_backend_rs::abi::fuse_abi::KERNEL_VERSION {
            error!("unsupported FUSE protocol {}.{}", arg.major, arg.minor);
            return reply_errno(&mut w, hdr.unique, libc::EPROTO);
        }
        if arg.major > fuse_backend_rs::abi::fuse_abi::KERNEL_VERSION {
            let out = init::version_reply();
            return reply_ok(&mut w, hdr.unique, init::reply_bytes(&out, out.minor));
        }
        let flags2 = if u64::from(arg.flags) & FsOptions::INIT_EXT.bits() != 0 {
            let ext: InitIn2 = r.read_obj().map_err(RequestError::Decode)?;
            Some(ext.flags2)
        } else {
            None
        };
        let capable = init::capable(&arg, flags2);
        // A new session: waits of an old one (a guest reset without DESTROY) end.
        self.waiters.interrupt_all();
        self.fs.wake_waits();
        let want = match self.fs.init(capable) {
            Ok(want) => want,
            Err(e) => return reply_io_error(&mut w, hdr.unique, &e),
        };
        let offered = u64::from(arg.flags) | (u64::from(flags2.unwrap_or(0)) << 32);
        let extra = match self.fs.init_extra(offered) {
            Ok(bits) => bits,
            Err(e) => return reply_io_error(&mut w, hdr.unique, &e),
        };
        let pages = init::effective_max_pages(self.max_pages, queue_size);
        let (mut out, negotiated) =
            init::build_reply(&arg, capable, want, pages, self.max_write, self.page_size);
        init::enable_raw(&mut out, offered, self.raw_init_flags | extra);
        debug!(
            "FUSE INIT {}.{} offered {:?}, enabled {:#x}/{:#x}",
            arg.major, arg.minor, capable, out.flags, out.flags2
        );
        info!(
            "negotiated max_pages={} max_write={} (queue size {}, --max-pages {}, --max-write {})",
            negotiated.max_pages, negotiated.max_write, queue_size, self.max_pages, self.max_write
        );
        self.limits.store(negotiated.pack(), Ordering::Release);
        reply_ok(&mut w, hdr.unique, init::reply_bytes(&out, arg.minor))
    }
}
