//! The requests this project answers itself (`ServedBy::Daemon` in the opcode table): each is
//! decoded here, once, from the reader positioned after the header, and answered from the
//! filesystem's [`OwnOps`](crate::fs::own::OwnOps) or the dispatcher's own state.

use fuse_backend_rs::abi::fuse_abi::{
    CopyFileRangeIn, CreateIn, EntryOut, InHeader, InterruptIn, IoctlIn, IoctlOut, LkIn, LkOut,
    OpenOut, SetxattrIn, WriteOut, LK_FLOCK,
};
use fuse_backend_rs::api::filesystem::Context;
use std::ffi::CStr;

use fuse_backend_rs::transport::{Reader, Writer};
use vm_memory::ByteValued;

use super::dispatch::{Dispatcher, ServedFs};
use super::opcode::{Opcode, Own};
use super::reply::{reply_io_error, reply_ok, RequestError};
use crate::fs::secctx;
use crate::sys::abi::fuse::{SetxattrInExt, StatxOut, SyncfsIn, SECURITY_CTX, SETXATTR_EXT};

impl<F: ServedFs> Dispatcher<F> {
    /// Serves `own` for the request `hdr` (`r` is past the header).
    pub(super) fn serve_own(
        &self,
        own: Own,
        hdr: &InHeader,
        mut r: Reader<'_, super::backend::Logged>,
        mut w: Writer<'_, super::backend::Logged>,
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
            Own::Read | Own::Write => unreachable!("served from the chain's buffers"),
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
                        &|| None,
                    )
                };
                match res {
                    Ok(()) => reply_ok(&mut w, hdr.unique, &[]),
                    Err(e) => reply_io_error(&mut w, hdr.unique, &e),
                }
            }
            Own::Syncfs => {
                let _: SyncfsIn = r.read_obj().map_err(RequestError::Decode)?;
                match self.fs.syncfs(&ctx, hdr.nodeid) {
                    Ok(()) => reply_ok(&mut w, hdr.unique, &[]),
                    Err(e) => reply_io_error(&mut w, hdr.unique, &e),
                }
            }
            Own::CopyFileRange => {
                let a: CopyFileRangeIn = r.read_obj().map_err(RequestError::Decode)?;
                let res = self.fs.copy_file_range(
                    &ctx,
                    hdr.nodeid,
                    a.fh_in,
                    a.offset_in,
                    a.nodeid_out,
                    a.fh_out,
                    a.offset_out,
                    a.len,
                    a.flags,
                );
                match res {
                    Ok(n) => {
                        let out = WriteOut {
                            size: u32::try_from(n).unwrap_or(u32::MAX),
                            padding: 0,
                        };
                        reply_ok(&mut w, hdr.unique, out.as_slice())
                    }
                    Err(e) => reply_io_error(&mut w, hdr.unique, &e),
                }
            }
            Own::Ioctl => {
                let a: IoctlIn = r.read_obj().map_err(RequestError::Decode)?;
                // Only restricted ioctls on files: the guest kernel sized the argument from
                // the command; unrestricted ones (a pointer chase) and directories are refused.
                const UNRESTRICTED: u32 = 2;
                const DIR: u32 = 16;
                if a.flags & (UNRESTRICTED | DIR) != 0 || a.in_size > 4096 || a.out_size > 4096 {
                    return reply_io_error(
                        &mut w,
                        hdr.unique,
                        &std::io::Error::from_raw_os_error(libc::ENOTTY),
                    );
                }
                let mut input = [0u8; 4096];
                let input = &mut input[..a.in_size as usize];
                std::io::Read::read_exact(&mut r, input).map_err(RequestError::Decode)?;
                match self
                    .fs
                    .inode_ioctl(&ctx, hdr.nodeid, a.fh, a.cmd, input, a.out_size)
                {
                    Ok(out) => {
                        let head = IoctlOut {
                            result: 0,
                            ..Default::default()
                        };
                        let mut bytes = head.as_slice().to_vec();
                        bytes.extend_from_slice(&out);
                        reply_ok(&mut w, hdr.unique, &bytes)
                    }
                    Err(e) => reply_io_error(&mut w, hdr.unique, &e),
                }
            }
            Own::Setxattr => self.setxattr(&ctx, hdr, r, w),
            Own::Tmpfile => {
                // fuse_create_in, then a name the kernel sends but that means nothing here,
                // then (FUSE_SECURITY_CTX) the new file's security context.
                let args: CreateIn = r.read_obj().map_err(RequestError::Decode)?;
                let ext = match self.extensions(hdr, &mut r) {
                    Ok(ext) => ext,
                    Err(e) => return reply_io_error(&mut w, hdr.unique, &e),
                };
                let res = secctx::scoped(ext, || self.fs.tmpfile(&ctx, hdr.nodeid, args));
                match res {
                    Ok((e, fh, opts)) => {
                        let entry = EntryOut {
                            nodeid: e.inode,
                            generation: e.generation,
                            entry_valid: e.entry_timeout.as_secs(),
                            attr_valid: e.attr_timeout.as_secs(),
                            entry_valid_nsec: e.entry_timeout.subsec_nanos(),
                            attr_valid_nsec: e.attr_timeout.subsec_nanos(),
                            attr: e.attr.into(),
                        };
                        let open = OpenOut {
                            fh: fh.unwrap_or(0),
                            open_flags: opts.bits(),
                            ..Default::default()
                        };
                        let mut bytes = entry.as_slice().to_vec();
                        bytes.extend_from_slice(open.as_slice());
                        reply_ok(&mut w, hdr.unique, &bytes)
                    }
                    Err(e) => reply_io_error(&mut w, hdr.unique, &e),
                }
            }
            Own::Interrupt => {
                // No reply: the interrupted request answers (EINTR) if it was waiting.
                let arg: InterruptIn = r.read_obj().map_err(RequestError::Decode)?;
                if self.waiters.interrupt(arg.unique) {
                    self.fs.wake_waits();
                }
                Ok(0)
            }
        }
    }
}

impl<F: ServedFs> Dispatcher<F> {
    /// SETXATTR: `fuse_setxattr_in` (16 bytes with FUSE_SETXATTR_EXT, else 8), the name, the
    /// value; each length checked against the others and Linux's limits.
    fn setxattr(
        &self,
        ctx: &Context,
        hdr: &InHeader,
        mut r: Reader<'_, super::backend::Logged>,
        mut w: Writer<'_, super::backend::Logged>,
    ) -> Result<usize, RequestError> {
        let (size, flags, setxattr_flags, arg_len) = if self.fs.extra_flags() & SETXATTR_EXT != 0 {
            let a: SetxattrInExt = r.read_obj().map_err(RequestError::Decode)?;
            (
                a.size,
                a.flags,
                a.setxattr_flags,
                size_of::<SetxattrInExt>(),
            )
        } else {
            let a: SetxattrIn = r.read_obj().map_err(RequestError::Decode)?;
            (a.size, a.flags, 0, size_of::<SetxattrIn>())
        };
        let einval = std::io::Error::from_raw_os_error(libc::EINVAL);
        // Name (at most 255 bytes and its NUL) and value (at most 64 KiB), as declared.
        let rest = (hdr.len as usize)
            .checked_sub(size_of::<InHeader>() + arg_len)
            .filter(|&n| n <= 256 + 65536 && n <= r.available_bytes());
        let Some(rest) = rest else {
            return reply_io_error(&mut w, hdr.unique, &einval);
        };
        let mut buf = vec![0u8; rest];
        std::io::Read::read_exact(&mut r, &mut buf).map_err(RequestError::Decode)?;
        let Some(nul) = buf.iter().position(|&b| b == 0) else {
            return reply_io_error(&mut w, hdr.unique, &einval);
        };
        let (name, value) = (&buf[..=nul], &buf[nul + 1..]);
        if value.len() != size as usize {
            return reply_io_error(&mut w, hdr.unique, &einval);
        }
        let name = CStr::from_bytes_with_nul(name).expect("ends at its first NUL");
        match self
            .fs
            .set_xattr(ctx, hdr.nodeid, name, value, flags, setxattr_flags)
        {
            Ok(()) => reply_ok(&mut w, hdr.unique, &[]),
            Err(e) => reply_io_error(&mut w, hdr.unique, &e),
        }
    }

    /// The security context a create-like request carries after its arguments (the last
    /// `total_extlen * 8` bytes, FUSE_SECURITY_CTX only); `r` is left at the extension.
    /// EINVAL for extensions that were not negotiated or do not parse.
    pub(super) fn extensions<R: super::chain::Remaining>(
        &self,
        hdr: &InHeader,
        r: &mut R,
    ) -> std::io::Result<Option<secctx::SecContext>> {
        let ext_len = usize::from(hdr.padding as u16) * 8;
        if ext_len == 0 {
            return Ok(None);
        }
        let einval = || std::io::Error::from_raw_os_error(libc::EINVAL);
        if self.fs.extra_flags() & SECURITY_CTX == 0 || ext_len > r.remaining() {
            return Err(einval());
        }
        // Whatever lies between the arguments read and the extension is skipped.
        let skip = r.remaining() - ext_len;
        let mut sink = vec![0u8; skip.min(4096)];
        let mut left = skip;
        while left > 0 {
            let n = left.min(sink.len());
            std::io::Read::read_exact(r, &mut sink[..n])?;
            left -= n;
        }
        let mut block = vec![0u8; ext_len];
        std::io::Read::read_exact(r, &mut block)?;
        secctx::parse(&block).map_err(|_| einval())
    }
}

/// The STATX reply for attributes `st` (valid for `valid`) and `extra` (served in `meta.rs`).
pub(super) fn statx_out(
    st: &fuse_backend_rs::abi::fuse_abi::stat64,
    valid: std::time::Duration,
    extra: &crate::fs::own::StatxExtra,
) -> StatxOut {
    use crate::sys::abi::fuse::{Statx, SxTime};
    let t = |sec: i64, nsec: i64| SxTime {
        tv_sec: sec,
        tv_nsec: nsec as u32,
        reserved: 0,
    };
    let mut mask = libc::STATX_BASIC_STATS;
    let btime = match extra.btime {
        Some((s, ns)) => {
            mask |= libc::STATX_BTIME;
            t(s, i64::from(ns))
        }
        None => SxTime::default(),
    };
    StatxOut {
        attr_valid: valid.as_secs(),
        attr_valid_nsec: valid.subsec_nanos(),
        stat: Statx {
            mask,
            blksize: st.st_blksize as u32,
            attributes: extra.attributes,
            nlink: st.st_nlink as u32,
            uid: st.st_uid,
            gid: st.st_gid,
            mode: st.st_mode as u16,
            ino: st.st_ino,
            size: st.st_size as u64,
            blocks: st.st_blocks as u64,
            attributes_mask: extra.attributes_mask,
            atime: t(st.st_atime, st.st_atime_nsec),
            btime,
            ctime: t(st.st_ctime, st.st_ctime_nsec),
            mtime: t(st.st_mtime, st.st_mtime_nsec),
            rdev_major: libc::major(st.st_rdev),
            rdev_minor: libc::minor(st.st_rdev),
            ..Default::default()
        },
        ..Default::default()
    }
}
