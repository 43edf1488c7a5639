//! Serves one FUSE request from one descriptor chain: peeks the header, handles INIT, READ and
//! WRITE here, hands every other opcode to fuse-backend-rs's `Server`, and makes sure every
//! request that needs a reply gets one. Guest input is untrusted: nothing here may panic on it.

use std::mem::size_of;
use std::ops::Deref;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use fuse_backend_rs::abi::fuse_abi::{
    EntryOut, FsOptions, InHeader, InitIn, InitIn2, Opcode, OpenOut, OutHeader,
};
use fuse_backend_rs::api::filesystem::{Context, FileSystem};
use fuse_backend_rs::api::server::Server;
use fuse_backend_rs::transport::{pagesize, Reader, VirtioFsWriter, Writer};
use log::{debug, error, info, warn};
use virtio_queue::DescriptorChain;
use vm_memory::bitmap::BitmapSlice;
use vm_memory::GuestMemory;

use super::init::{self, Negotiated};
use super::io;
use super::reply::{reply_errno, reply_io_error, reply_ok, RequestError};

/// Turns descriptor chains into FUSE replies for one filesystem. Shared by all queue threads
/// and workers.
pub struct Dispatcher<F: FileSystem + Send + Sync> {
    fs: Arc<F>,
    server: Server<Arc<F>>,
    max_pages: u16,
    page_size: usize,
    limits: Mutex<Negotiated>,
}

/// Opcodes that never get a reply.
fn is_no_reply(opcode: u32) -> bool {
    opcode == Opcode::Forget as u32
        || opcode == Opcode::BatchForget as u32
        || opcode == Opcode::Interrupt as u32
}

/// Opcodes fuse-backend-rs knows. Others (including the gaps at 7 and 19, which its
/// `Opcode::from` would transmute into invalid enum values) are answered ENOSYS here.
fn server_knows(opcode: u32) -> bool {
    (1..Opcode::MaxOpcode as u32).contains(&opcode) && opcode != 7 && opcode != 19
}

/// READs at least this large are worth a worker thread (reads of one file run in parallel).
const HEAVY_READ: u32 = 64 * 1024;
/// WRITEs at least this large are worth one: buffered writes to one file serialize on its inode
/// lock in the host kernel, so smaller ones only add a hand-off and lock contention.
const HEAVY_WRITE: u32 = 1024 * 1024;

/// Whether the request in `chain` is costly enough to hand to a worker: large READ/WRITE and
/// operations that change the namespace (several syscalls each). Cheap requests (getattr,
/// lookup, small I/O…) are served on the queue thread, where a hand-off would cost more than
/// the request. Reads only the first descriptor; anything unusual counts as cheap.
pub(crate) fn is_heavy<M>(chain: &DescriptorChain<M>) -> bool
where
    M: Deref + Clone,
    M::Target: GuestMemory + Sized,
{
    use vm_memory::{Address, Bytes};
    let Some(first) = chain.clone().next() else {
        return false;
    };
    if first.is_write_only() || (first.len() as usize) < size_of::<InHeader>() {
        return false;
    }
    let mem = chain.memory();
    let Ok(hdr) = mem.read_obj::<InHeader>(first.addr()) else {
        return false;
    };
    let op = hdr.opcode;
    if op == Opcode::Read as u32 || op == Opcode::Write as u32 {
        // ReadIn and WriteIn both start with fh (u64), offset (u64), size (u32).
        let at = first.addr().checked_add(size_of::<InHeader>() as u64 + 16);
        let fits = first.len() as usize >= size_of::<InHeader>() + 20;
        return match at {
            Some(a) if fits => mem.read_obj::<u32>(a).is_ok_and(|size| {
                size >= if op == Opcode::Read as u32 {
                    HEAVY_READ
                } else {
                    HEAVY_WRITE
                }
            }),
            _ => false,
        };
    }
    [
        Opcode::Create,
        Opcode::Mkdir,
        Opcode::Mknod,
        Opcode::Symlink,
        Opcode::Link,
        Opcode::Unlink,
        Opcode::Rmdir,
        Opcode::Rename,
        Opcode::Rename2,
        Opcode::Setattr,
        Opcode::Fsync,
        Opcode::Fsyncdir,
        Opcode::Fallocate,
        Opcode::Readdir,
        Opcode::Readdirplus,
        Opcode::Setxattr,
        Opcode::Removexattr,
    ]
    .iter()
    .any(|o| *o as u32 == op)
}

/// The smallest reply buffer an opcode that creates guest-held state (a node reference or an
/// open handle) needs for that state to reach the guest.
fn min_reply(opcode: u32) -> Option<usize> {
    const HDR: usize = size_of::<OutHeader>();
    const ENTRY: usize = size_of::<EntryOut>();
    const OPEN: usize = size_of::<OpenOut>();
    match opcode {
        x if x == Opcode::Lookup as u32
            || x == Opcode::Mkdir as u32
            || x == Opcode::Mknod as u32
            || x == Opcode::Symlink as u32
            || x == Opcode::Link as u32 =>
        {
            Some(HDR + ENTRY)
        }
        x if x == Opcode::Create as u32 => Some(HDR + ENTRY + OPEN),
        x if x == Opcode::Open as u32 || x == Opcode::Opendir as u32 => Some(HDR + OPEN),
        _ => None,
    }
}

/// Whether every device-readable descriptor of `chain` comes before every writable one.
fn readable_then_writable<M>(chain: &DescriptorChain<M>) -> bool
where
    M: Deref + Clone,
    M::Target: GuestMemory + Sized,
{
    let mut seen_writable = false;
    for d in chain.clone() {
        if d.is_write_only() {
            seen_writable = true;
        } else if seen_writable {
            return false;
        }
    }
    true
}

impl<F> Dispatcher<F>
where
    F: FileSystem<Inode = u64, Handle = u64> + Send + Sync + 'static,
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
            page_size,
            limits: Mutex::new(Negotiated::upper_bound(max_pages, page_size)),
        }
    }

    /// The limits currently in force (after INIT: what the guest was told).
    pub fn limits(&self) -> Negotiated {
        *self.limits.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The wrapped filesystem, for assertions in tests.
    #[cfg(test)]
    pub(crate) fn fs_for_tests(&self) -> &F {
        &self.fs
    }

    /// Forgets the session: the filesystem drops its state as on FUSE_DESTROY.
    pub fn reset(&self) {
        self.fs.destroy();
        *self.limits.lock().unwrap_or_else(|e| e.into_inner()) =
            Negotiated::upper_bound(self.max_pages, self.page_size);
    }

    /// Serves the request in `chain`, arriving on a queue of `queue_size` entries. Returns the
    /// number of bytes written into the chain, for `add_used`. Never panics on guest input.
    pub fn handle<M>(&self, chain: DescriptorChain<M>, queue_size: u16) -> u32
    where
        M: Deref + Clone,
        M::Target: GuestMemory + Sized,
    {
        let head = chain.head_index();
        let mem = chain.memory();
        if !readable_then_writable(&chain) {
            // Virtio requires device-readable descriptors first; QEMU calls such a chain a
            // broken driver. Serving a reordered view of it would be guesswork: drop it.
            warn!("descriptor chain {head}: writable descriptor before a readable one, dropped");
            return 0;
        }
        let hdr = match Reader::from_descriptor_chain(mem, chain.clone())
            .ok()
            .and_then(|mut r| r.read_obj::<InHeader>().ok())
        {
            Some(h) => h,
            None => {
                warn!("descriptor chain {head}: no readable FUSE header, dropped");
                return 0;
            }
        };
        debug!(
            "unique={} opcode={} nodeid={} len={} uid={} pid={}",
            hdr.unique, hdr.opcode, hdr.nodeid, hdr.len, hdr.uid, hdr.pid
        );
        let result = catch_unwind(AssertUnwindSafe(|| {
            self.serve(&hdr, mem, &chain, queue_size)
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
            Err(e) if is_no_reply(hdr.opcode) => {
                debug!("unique={} opcode={}: {e}", hdr.unique, hdr.opcode);
                0
            }
            Err(e) => {
                let errno = e.errno();
                warn!(
                    "unique={} opcode={}: {e}; replying errno {errno}",
                    hdr.unique, hdr.opcode
                );
                match VirtioFsWriter::new(mem, chain.clone()) {
                    Ok(w) => reply_errno(&mut w.into(), hdr.unique, errno).unwrap_or(0),
                    Err(_) => 0,
                }
            }
        };
        u32::try_from(used).unwrap_or(0)
    }

    fn serve<M>(
        &self,
        hdr: &InHeader,
        mem: &M::Target,
        chain: &DescriptorChain<M>,
        queue_size: u16,
    ) -> Result<usize, RequestError>
    where
        M: Deref + Clone,
        M::Target: GuestMemory + Sized,
    {
        let mut r =
            Reader::from_descriptor_chain(mem, chain.clone()).map_err(RequestError::Chain)?;
        let w: Writer<'_, _> = VirtioFsWriter::new(mem, chain.clone())
            .map_err(RequestError::Chain)?
            .into();
        let op = hdr.opcode;
        if op == Opcode::Init as u32 || op == Opcode::Read as u32 || op == Opcode::Write as u32 {
            // Skip the header we already peeked.
            r.read_obj::<InHeader>().map_err(RequestError::Decode)?;
            let mut ctx = Context::from(hdr);
            if op == Opcode::Init as u32 {
                return self.init(hdr, r, w, queue_size);
            }
            if let Err(e) = self.fs.id_remap(&mut ctx) {
                let mut w = w;
                return reply_io_error(&mut w, hdr.unique, &e);
            }
            let limits = self.limits();
            if op == Opcode::Read as u32 {
                io::read(&*self.fs, &ctx, hdr, r, w, limits.max_read(self.page_size))
            } else {
                io::write(&*self.fs, &ctx, hdr, r, w, limits.max_write)
            }
        } else if !server_knows(op) {
            if is_no_reply(op) {
                return Ok(0);
            }
            let mut w = w;
            reply_errno(&mut w, hdr.unique, libc::ENOSYS)
        } else {
            if let Some(need) = min_reply(op) {
                if w.available_bytes() < need {
                    // The filesystem would open a handle or take a reference the guest could
                    // never learn about (and so never release): refuse before acting.
                    let mut w = w;
                    return reply_errno(&mut w, hdr.unique, libc::EINVAL);
                }
            }
            let n = self
                .server
                .handle_message(r, w, None, None)
                .map_err(RequestError::Server)?;
            // fuse-backend-rs replies to DESTROY but reports 0 bytes written.
            if op == Opcode::Destroy as u32 {
                Ok(n.max(size_of::<OutHeader>()))
            } else {
                Ok(n)
            }
        }
    }

    fn init<S: BitmapSlice>(
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
        let want = match self.fs.init(capable) {
            Ok(want) => want,
            Err(e) => return reply_io_error(&mut w, hdr.unique, &e),
        };
        let pages = init::effective_max_pages(self.max_pages, queue_size);
        let (out, negotiated) = init::build_reply(&arg, capable, want, pages, self.page_size);
        debug!(
            "FUSE INIT {}.{} offered {:?}, enabled {:#x}/{:#x}",
            arg.major, arg.minor, capable, out.flags, out.flags2
        );
        info!(
            "negotiated max_pages={} max_write={} (queue size {}, --max-pages {})",
            negotiated.max_pages, negotiated.max_write, queue_size, self.max_pages
        );
        *self.limits.lock().unwrap_or_else(|e| e.into_inner()) = negotiated;
        reply_ok(&mut w, hdr.unique, init::reply_bytes(&out, arg.minor))
    }
}
