//! The protocol server: one request in, one reply out, whatever carried them. A transport
//! reads the request's header, hands the rest as a [`Cursor`] with a cursor over the reply's
//! buffers, and gets back the bytes written. READ and WRITE move their data between the
//! transport's buffers and the filesystem without a copy (`io.rs`); every other request is
//! first copied out of the transport's buffers (so a guest cannot change it between the checks
//! made on it and its use), then decoded and answered by the router (`router.rs`). Every
//! request that needs a reply gets one. Guest input is untrusted: nothing here may panic on
//! it.

use std::io;
use std::mem::size_of;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use fuse_backend_rs::abi::fuse_abi::InHeader;
use fuse_backend_rs::api::filesystem::Context;
use fuse_backend_rs::transport::pagesize;
use log::{debug, error, warn};
use vm_memory::bitmap::BitmapSlice;

use super::buf::{Cursor, Remaining};
use super::filesystem::{Request, ServedFs};
use super::init::{self, Negotiated};
use super::io::{self as request_io, ReadJob};
use super::reply::{reply_errno, reply_io_error, RequestError};
use super::router::{self, Op};
use super::secctx::{self, SecContext};
use super::transport::{Plain, Transport};
use super::waiters::Waiters;
use crate::sys::abi::fuse::SECURITY_CTX;

/// The largest request accepted other than a WRITE (1 MiB of data plus a 4 KiB header, as
/// fuse-backend-rs's `Server`): anything longer gets ENOMEM.
const MAX_REQUEST: usize = (1 << 20) + 0x1000;

/// Serves FUSE requests to one filesystem. Shared by every thread of every transport.
pub struct Server<F> {
    pub(super) fs: Arc<F>,
    /// The `--max-pages` ceiling.
    pub(super) max_pages: u16,
    /// The `--max-write` ceiling.
    pub(super) max_write: u32,
    pub(super) page_size: usize,
    /// [`Negotiated`] packed ([`Negotiated::pack`]).
    limits: AtomicU64,
    /// Requests waiting without bound (SETLKW), for FUSE_INTERRUPT and session ends.
    pub(super) waiters: Waiters,
    /// INIT flags fuse-backend-rs has no name for, enabled when the guest offers them.
    pub(super) raw_init_flags: u64,
}

impl<F: ServedFs> Server<F> {
    /// Serves `fs`; `max_pages` is the `--max-pages` ceiling (at most 1020).
    pub fn new(fs: Arc<F>, max_pages: u16) -> Self {
        let page_size = pagesize();
        let max_pages = max_pages.clamp(1, init::MAX_PAGES_LIMIT);
        Server {
            fs,
            max_pages,
            max_write: u32::MAX,
            page_size,
            limits: AtomicU64::new(Negotiated::upper_bound(max_pages, page_size).pack()),
            waiters: Waiters::default(),
            raw_init_flags: 0,
        }
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

    /// The filesystem served.
    pub fn fs(&self) -> &Arc<F> {
        &self.fs
    }

    /// The limits currently in force (after INIT: what the guest was told).
    pub fn limits(&self) -> Negotiated {
        Negotiated::unpack(self.limits.load(Ordering::Acquire))
    }

    pub(super) fn set_limits(&self, lim: Negotiated) {
        self.limits.store(lim.pack(), Ordering::Release);
    }

    /// Forgets the session: the filesystem drops its state as on FUSE_DESTROY.
    pub fn reset(&self) {
        self.waiters.interrupt_all();
        self.fs.wake_waits();
        self.fs.destroy();
        self.set_limits(Negotiated::upper_bound(self.max_pages, self.page_size));
    }

    /// Ends the requests that wait without bound (lock waits), because the transport stops
    /// (see [`super::Cancel::RingStop`]). Whether there were any.
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
        if !reads.contains(2) {
            if let Some(why) = self.fs.needs_after_v1() {
                return Err(super::state::StateError::PeerTooOld {
                    reads,
                    why: format!(": {why}"),
                });
            }
        }
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
    ) -> io::Result<crate::fs::session::Imported> {
        let s = super::state::decode(bytes).map_err(io::Error::other)?;
        let lim = s.negotiated();
        let max_write = usize::from(init::MAX_PAGES_LIMIT) * self.page_size;
        if lim.max_pages == 0
            || lim.max_pages > init::MAX_PAGES_LIMIT
            || lim.max_write as usize > max_write
        {
            return Err(io::Error::other(format!(
                "device state negotiated max_pages={} max_write={}, outside 1..={} and {max_write}",
                lim.max_pages,
                lim.max_write,
                init::MAX_PAGES_LIMIT
            )));
        }
        let done = self
            .fs
            .import(s.session, on_error)
            .map_err(io::Error::other)?;
        self.set_limits(lim);
        Ok(done)
    }

    /// Serves the request whose header `hdr` the transport read (`r` is past it, over the
    /// rest of the request's bytes); the reply goes into `w`. Returns the bytes written.
    /// Never panics on guest input.
    pub fn serve<B, T>(
        &self,
        hdr: &InHeader,
        r: Cursor<'_, '_, B>,
        w: Cursor<'_, '_, B>,
        t: &T,
    ) -> usize
    where
        B: BitmapSlice,
        T: Transport<F, B>,
    {
        let info = router::info(hdr.opcode);
        debug!(
            "unique={} opcode={} nodeid={} len={} uid={} pid={}",
            hdr.unique, hdr.opcode, hdr.nodeid, hdr.len, hdr.uid, hdr.pid
        );
        let result = catch_unwind(AssertUnwindSafe(|| {
            let mut w = w.clone();
            match info.op {
                Op::Unsupported if !info.replies => Ok(0),
                Op::Unsupported => reply_errno(&mut w, hdr.unique, libc::ENOSYS),
                // The filesystem would open a handle or take a reference the guest could
                // never learn about (and so never release): refuse before acting.
                _ if w.available() < info.min_reply => {
                    reply_errno(&mut w, hdr.unique, libc::EINVAL)
                }
                Op::Read => self.read(hdr, r, w, t),
                Op::Write => self.write(hdr, r, w),
                op => self.serve_copied(op, info.replies, hdr, r, w, t.max_pages()),
            }
        }))
        .unwrap_or_else(|_| {
            error!(
                "unique={} opcode={}: filesystem panicked",
                hdr.unique, hdr.opcode
            );
            Err(RequestError::Panic)
        });
        match result {
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
                reply_errno(&mut w.clone(), hdr.unique, errno).unwrap_or(0)
            }
        }
    }

    /// Serves one whole request in `request` (header first) with its reply in `reply`, as a
    /// transport of plain byte buffers would (tests, fuzzing). Returns the bytes written.
    pub fn serve_bytes(&self, request: &mut [u8], reply: &mut [u8], max_pages: u16) -> usize {
        let readable = [vm_memory::VolatileSlice::from(request)];
        let writable = [vm_memory::VolatileSlice::from(reply)];
        let mut r = Cursor::new(&readable);
        let Ok(hdr) = r.read_obj::<InHeader>() else {
            return 0;
        };
        self.serve(&hdr, r, Cursor::new(&writable), &Plain(max_pages))
    }

    /// READ: its arguments from `r`, its data filled by the transport straight behind the
    /// reply header.
    fn read<B: BitmapSlice, T: Transport<F, B>>(
        &self,
        hdr: &InHeader,
        r: Cursor<'_, '_, B>,
        w: Cursor<'_, '_, B>,
        t: &T,
    ) -> Result<usize, RequestError> {
        // The caller as the guest names it: the filesystem maps its ids.
        let ctx = Context::from(hdr);
        let max_read = self.limits().max_read(self.page_size);
        let view = self.fs.view();
        request_io::read(hdr, r, w, max_read, |arg, owner, data| {
            let job = ReadJob {
                fs: &self.fs,
                req: Request {
                    unique: hdr.unique,
                    ctx,
                    secctx: None,
                    view: &view,
                },
                nodeid: hdr.nodeid,
                arg: *arg,
                owner,
            };
            t.fill_read(&job, data)
        })
    }

    /// WRITE: its arguments from `r`, its data handed to the filesystem from there.
    fn write<B: BitmapSlice>(
        &self,
        hdr: &InHeader,
        r: Cursor<'_, '_, B>,
        w: Cursor<'_, '_, B>,
    ) -> Result<usize, RequestError> {
        let ctx = Context::from(hdr);
        let view = self.fs.view();
        let req = Request {
            unique: hdr.unique,
            ctx,
            secctx: None,
            view: &view,
        };
        request_io::write(&*self.fs, &req, hdr, r, w, self.limits().max_write)
    }

    /// Serves `op` from a private copy of the request's body (on the stack unless large),
    /// the reply written straight into `w`.
    fn serve_copied<B: BitmapSlice>(
        &self,
        op: Op,
        replies: bool,
        hdr: &InHeader,
        mut r: Cursor<'_, '_, B>,
        mut w: Cursor<'_, '_, B>,
        max_pages: u16,
    ) -> Result<usize, RequestError> {
        if hdr.len as usize > MAX_REQUEST {
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
        body.resize(hdr.len as usize - size_of::<InHeader>(), 0);
        r.read_exact(&mut body).map_err(RequestError::Decode)?;
        if op == Op::Init {
            return self.init(&hdr, &body, &mut w, max_pages);
        }
        let ctx = Context::from(&hdr);
        let view = self.fs.view();
        let req = Request {
            unique: hdr.unique,
            ctx,
            secctx: ext.as_ref(),
            view: &view,
        };
        self.route(op, &req, &hdr, &body, &mut w)
    }

    /// Checks the length the header `hdr` declares against the request (`r` is past the
    /// header) and takes any extensions off the end of the request, parsed; `r` is left at
    /// the body, whose length is what the returned header declares. Errors are the guest's:
    /// EINVAL for a length shorter than the header or longer than the request's bytes (a
    /// Linux guest's is always exact), or extensions that were not negotiated or do not fit
    /// or parse.
    fn body_of<B: BitmapSlice>(
        &self,
        hdr: &InHeader,
        r: &mut Cursor<'_, '_, B>,
    ) -> io::Result<(InHeader, Option<SecContext>)> {
        let einval = || io::Error::from_raw_os_error(libc::EINVAL);
        let mut hdr = *hdr;
        let body_len = (hdr.len as usize)
            .checked_sub(size_of::<InHeader>())
            .filter(|&n| n <= r.remaining())
            .ok_or_else(einval)?;
        // total_extlen: the low half of what fuse-backend-rs calls padding.
        let ext_len = usize::from(hdr.padding as u16) * 8;
        if ext_len == 0 {
            return Ok((hdr, None));
        }
        if ext_len > body_len || self.fs.extra_flags() & SECURITY_CTX == 0 {
            return Err(einval());
        }
        let mut tail = r.clone();
        tail.skip(body_len - ext_len);
        let mut block = vec![0u8; ext_len];
        tail.read_exact(&mut block)?;
        let ext = secctx::parse(&block).map_err(|_| einval())?;
        hdr.len = (size_of::<InHeader>() + body_len - ext_len) as u32;
        hdr.padding &= !0xffff;
        Ok((hdr, ext))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuse::state::{StateError, Versions};

    /// A filesystem whose guest relies on something the previous release does not do.
    struct Relies;

    impl crate::fs::session::Sessions for Relies {
        fn needs_after_v1(&self) -> Option<&'static str> {
            Some("something new")
        }
    }

    impl super::super::Filesystem for Relies {
        type View = ();
        fn view(&self) {}
    }

    #[test]
    fn a_session_that_relies_on_this_build_goes_to_no_reader_of_version_1_only() {
        let s = Server::new(Arc::new(Relies), 32);
        let opts = crate::fs::session::ExportOptions::default();
        match s.save_state(opts, Versions::FIRST) {
            Err(e @ StateError::PeerTooOld { .. }) => {
                assert!(e.to_string().contains("something new"), "{e}")
            }
            other => panic!("saved for version 1: {:?}", other.map(|b| b.len())),
        }
        assert!(s.save_state(opts, Versions::OURS).is_ok());
    }
}
