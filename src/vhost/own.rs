//! The requests this project answers itself (`ServedBy::Daemon` in the opcode table): each is
//! decoded here, once, from the reader positioned after the header, and answered from the
//! filesystem's [`OwnOps`](crate::fs::own::OwnOps) or the dispatcher's own state.

use fuse_backend_rs::abi::fuse_abi::{InHeader, InterruptIn, LkIn, LkOut, LK_FLOCK};
use fuse_backend_rs::api::filesystem::Context;
use fuse_backend_rs::transport::{Reader, Writer};
use vm_memory::ByteValued;

use super::dispatch::{Dispatcher, ServedFs};
use super::io;
use super::opcode::{Opcode, Own};
use super::reply::{reply_io_error, reply_ok, RequestError};

impl<F: ServedFs> Dispatcher<F> {
    /// Serves `own` for the request `hdr` (`r` is past the header).
    pub(super) fn serve_own(
        &self,
        own: Own,
        hdr: &InHeader,
        mut r: Reader<'_, ()>,
        mut w: Writer<'_, ()>,
        queue_size: u16,
    ) -> Result<usize, RequestError> {
        if own == Own::Init {
            return self.init(hdr, r, w, queue_size);
        }
        let mut ctx = Context::from(hdr);
        if let Err(e) = self.fs.id_remap(&mut ctx) {
            return reply_io_error(&mut w, hdr.unique, &e);
        }
        match own {
            Own::Init => unreachable!("served above"),
            Own::Read => io::read(
                &*self.fs,
                &ctx,
                hdr,
                r,
                w,
                self.limits().max_read(self.page_size),
            ),
            Own::Write => io::write(&*self.fs, &ctx, hdr, r, w, self.limits().max_write),
            Own::Getlk => {
                let arg: LkIn = r.read_obj().map_err(RequestError::Decode)?;
                match self
                    .fs
                    .lock_get(&ctx, hdr.nodeid, arg.fh, arg.owner, arg.lk)
                {
                    Ok(lk) => reply_ok(&mut w, hdr.unique, LkOut { lk }.as_slice()),
                    Err(e) => reply_io_error(&mut w, hdr.unique, &e),
                }
            }
            Own::Setlk => {
                let arg: LkIn = r.read_obj().map_err(RequestError::Decode)?;
                let wait = hdr.opcode == Opcode::Setlkw as u32;
                let flock = arg.lk_flags & LK_FLOCK != 0;
                let res = if wait {
                    let reg = self.waiters.register(hdr.unique);
                    let cancelled = || reg.cancelled();
                    self.fs.lock_set(
                        &ctx, hdr.nodeid, arg.fh, arg.owner, arg.lk, flock, true, &cancelled,
                    )
                } else {
                    self.fs.lock_set(
                        &ctx,
                        hdr.nodeid,
                        arg.fh,
                        arg.owner,
                        arg.lk,
                        flock,
                        false,
                        &|| false,
                    )
                };
                match res {
                    Ok(()) => reply_ok(&mut w, hdr.unique, &[]),
                    Err(e) => reply_io_error(&mut w, hdr.unique, &e),
                }
            }
            Own::Interrupt => {
                // No reply: the interrupted request answers (EINTR) if it was waiting.
                let arg: InterruptIn = r.read_obj().map_err(RequestError::Decode)?;
                self.waiters.interrupt(arg.unique);
                Ok(0)
            }
        }
    }
}
