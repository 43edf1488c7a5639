//! FUSE_INIT as served: the guest's offer decoded from the request's body, the filesystem
//! asked what it wants, the limits fixed and the reply written. What is negotiated, as pure
//! functions, is `init.rs`.

use fuse_backend_rs::abi::fuse_abi::{FsOptions, InHeader, InitIn, InitIn2, KERNEL_VERSION};
use log::{debug, error, info};
use vm_memory::bitmap::BitmapSlice;

use super::body::Body;
use super::buf::Cursor;
use super::filesystem::ServedFs;
use super::init;
use super::reply::{reply_errno, reply_io_error, reply_ok, RequestError};
use super::server::Server;

impl<F: ServedFs> Server<F> {
    /// Serves INIT (`body` is its private copy) for a transport carrying at most `max_pages`
    /// pages per request.
    pub(super) fn init<B: BitmapSlice>(
        &self,
        hdr: &InHeader,
        body: &[u8],
        w: &mut Cursor<'_, '_, B>,
        max_pages: u16,
    ) -> Result<usize, RequestError> {
        let mut b = Body(body);
        let arg: InitIn = b.obj()?;
        if arg.major < KERNEL_VERSION {
            error!("unsupported FUSE protocol {}.{}", arg.major, arg.minor);
            return reply_errno(w, hdr.unique, libc::EPROTO);
        }
        if arg.major > KERNEL_VERSION {
            let out = init::version_reply();
            return reply_ok(w, hdr.unique, init::reply_bytes(&out, out.minor));
        }
        let flags2 = if u64::from(arg.flags) & FsOptions::INIT_EXT.bits() != 0 {
            let ext: InitIn2 = b.obj()?;
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
            Err(e) => return reply_io_error(w, hdr.unique, &e),
        };
        let offered = u64::from(arg.flags) | (u64::from(flags2.unwrap_or(0)) << 32);
        let extra = match self.fs.init_extra(offered) {
            Ok(bits) => bits,
            Err(e) => return reply_io_error(w, hdr.unique, &e),
        };
        let pages = self.max_pages.min(max_pages).max(1);
        let (mut out, negotiated) =
            init::build_reply(&arg, capable, want, pages, self.max_write, self.page_size);
        init::enable_raw(&mut out, offered, self.raw_init_flags | extra);
        init::set_stack_depth(&mut out);
        debug!(
            "FUSE INIT {}.{} offered {:?}, enabled {:#x}/{:#x}",
            arg.major, arg.minor, capable, out.flags, out.flags2
        );
        info!(
            "negotiated max_pages={} max_write={} (transport carries {} pages, --max-pages {}, --max-write {})",
            negotiated.max_pages, negotiated.max_write, max_pages, self.max_pages, self.max_write
        );
        self.set_limits(negotiated);
        reply_ok(w, hdr.unique, init::reply_bytes(&out, arg.minor))
    }
}
