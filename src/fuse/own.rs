//! The requests fuse-backend-rs's `FileSystem` trait has no method for, or sizes differently
//! (lock requests, INTERRUPT, COPY_FILE_RANGE, IOCTL, SETXATTR with FUSE_SETXATTR_EXT, TMPFILE,
//! STATX's reply): each decoded from the request's private copy and answered from the
//! filesystem ([`Filesystem`](super::Filesystem)) or the server's own state. Called by the
//! router.

use std::ffi::CStr;

use fuse_backend_rs::abi::fuse_abi::{
    CopyFileRangeIn, CreateIn, EntryOut, InHeader, InterruptIn, IoctlIn, IoctlOut, LkIn, LkOut,
    OpenOut, SetxattrIn, WriteOut, LK_FLOCK,
};
use vm_memory::bitmap::BitmapSlice;
use vm_memory::ByteValued;

use super::body::Body;
use super::buf::Cursor;
use super::filesystem::{Request, ServedFs};
use super::reply::{reply_io_error, reply_ok, RequestError};
use super::router::Opcode;
use super::server::Server;
use crate::sys::abi::fuse::{SetxattrInExt, StatxOut, SETXATTR_EXT};

type Served = Result<usize, RequestError>;

impl<F: ServedFs> Server<F> {
    /// GETLK: the first lock that would conflict with the one described, or F_UNLCK.
    pub(super) fn getlk<B: BitmapSlice>(
        &self,
        req: &Request<'_, F::View>,
        hdr: &InHeader,
        mut b: Body<'_>,
        w: &mut Cursor<'_, '_, B>,
    ) -> Served {
        let arg: LkIn = b.obj()?;
        match self.fs.getlk(req, hdr.nodeid, arg.fh, arg.owner, arg.lk) {
            Ok(lk) => reply_ok(w, hdr.unique, LkOut { lk }.as_slice()),
            Err(e) => reply_io_error(w, hdr.unique, &e),
        }
    }

    /// SETLK and SETLKW (which waits, registered so that an INTERRUPT or the end of the
    /// session ends the wait).
    pub(super) fn setlk<B: BitmapSlice>(
        &self,
        req: &Request<'_, F::View>,
        hdr: &InHeader,
        mut b: Body<'_>,
        w: &mut Cursor<'_, '_, B>,
    ) -> Served {
        let arg: LkIn = b.obj()?;
        let wait = hdr.opcode == Opcode::Setlkw as u32;
        let flock = arg.lk_flags & LK_FLOCK != 0;
        let res = if wait {
            let reg = self.waiters.register(hdr.unique);
            let cancelled = || reg.cancelled();
            self.fs.setlk(
                req, hdr.nodeid, arg.fh, arg.owner, arg.lk, flock, true, &cancelled,
            )
        } else {
            self.fs.setlk(
                req,
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
            Ok(()) => reply_ok(w, hdr.unique, &[]),
            Err(e) => reply_io_error(w, hdr.unique, &e),
        }
    }

    /// INTERRUPT: no reply; the interrupted request answers (EINTR) if it was waiting.
    pub(super) fn interrupt(&self, mut b: Body<'_>) -> Served {
        let arg: InterruptIn = b.obj()?;
        if self.waiters.interrupt(arg.unique) {
            self.fs.wake_waits();
        }
        Ok(0)
    }

    /// COPY_FILE_RANGE: the bytes copied, in a WRITE's reply.
    pub(super) fn copy_file_range<B: BitmapSlice>(
        &self,
        req: &Request<'_, F::View>,
        hdr: &InHeader,
        mut b: Body<'_>,
        w: &mut Cursor<'_, '_, B>,
    ) -> Served {
        let a: CopyFileRangeIn = b.obj()?;
        let res = self.fs.copy_file_range(
            req,
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
                reply_ok(w, hdr.unique, out.as_slice())
            }
            Err(e) => reply_io_error(w, hdr.unique, &e),
        }
    }

    /// IOCTL: only restricted ioctls on files (the guest kernel sized the argument from the
    /// command); unrestricted ones (a pointer chase) and directories are refused.
    pub(super) fn ioctl<B: BitmapSlice>(
        &self,
        req: &Request<'_, F::View>,
        hdr: &InHeader,
        mut b: Body<'_>,
        w: &mut Cursor<'_, '_, B>,
    ) -> Served {
        let a: IoctlIn = b.obj()?;
        const UNRESTRICTED: u32 = 2;
        const DIR: u32 = 16;
        if a.flags & (UNRESTRICTED | DIR) != 0 || a.in_size > 4096 || a.out_size > 4096 {
            return reply_io_error(
                w,
                hdr.unique,
                &std::io::Error::from_raw_os_error(libc::ENOTTY),
            );
        }
        let input = b
            .rest()
            .get(..a.in_size as usize)
            .ok_or_else(|| RequestError::Decode(std::io::ErrorKind::UnexpectedEof.into()))?;
        match self
            .fs
            .ioctl(req, hdr.nodeid, a.fh, a.cmd, input, a.out_size)
        {
            Ok(out) => {
                let head = IoctlOut {
                    result: 0,
                    ..Default::default()
                };
                let mut bytes = head.as_slice().to_vec();
                bytes.extend_from_slice(&out);
                reply_ok(w, hdr.unique, &bytes)
            }
            Err(e) => reply_io_error(w, hdr.unique, &e),
        }
    }

    /// SETXATTR: `fuse_setxattr_in` (16 bytes with FUSE_SETXATTR_EXT, else 8), the name, the
    /// value; each length checked against the others and Linux's limits.
    pub(super) fn setxattr<B: BitmapSlice>(
        &self,
        req: &Request<'_, F::View>,
        hdr: &InHeader,
        mut b: Body<'_>,
        w: &mut Cursor<'_, '_, B>,
    ) -> Served {
        let (size, flags, setxattr_flags) = if self.fs.extra_flags() & SETXATTR_EXT != 0 {
            let a: SetxattrInExt = b.obj()?;
            (a.size, a.flags, a.setxattr_flags)
        } else {
            let a: SetxattrIn = b.obj()?;
            (a.size, a.flags, 0)
        };
        let einval = std::io::Error::from_raw_os_error(libc::EINVAL);
        // Name (at most 255 bytes and its NUL) and value (at most 64 KiB), as declared.
        let rest = b.rest();
        if rest.len() > 256 + 65536 {
            return reply_io_error(w, hdr.unique, &einval);
        }
        let Some(nul) = rest.iter().position(|&c| c == 0) else {
            return reply_io_error(w, hdr.unique, &einval);
        };
        let (name, value) = (&rest[..=nul], &rest[nul + 1..]);
        if value.len() != size as usize {
            return reply_io_error(w, hdr.unique, &einval);
        }
        let Ok(name) = CStr::from_bytes_with_nul(name) else {
            return reply_io_error(w, hdr.unique, &einval);
        };
        match self
            .fs
            .setxattr(req, hdr.nodeid, name, value, flags, setxattr_flags)
        {
            Ok(()) => reply_ok(w, hdr.unique, &[]),
            Err(e) => reply_io_error(w, hdr.unique, &e),
        }
    }

    /// TMPFILE: `fuse_create_in`, then a name the kernel sends but that means nothing here
    /// (the security context, if any, was taken off the end already).
    pub(super) fn tmpfile<B: BitmapSlice>(
        &self,
        req: &Request<'_, F::View>,
        hdr: &InHeader,
        mut b: Body<'_>,
        w: &mut Cursor<'_, '_, B>,
    ) -> Served {
        let args: CreateIn = b.obj()?;
        match self.fs.tmpfile(req, hdr.nodeid, args) {
            Ok((e, fh, opts)) => {
                const E: usize = size_of::<EntryOut>();
                let mut out = [0u8; E + size_of::<OpenOut>()];
                out[..E].copy_from_slice(EntryOut::from(e).as_slice());
                let open = OpenOut {
                    fh: fh.unwrap_or(0),
                    open_flags: opts.bits(),
                    ..Default::default()
                };
                out[E..].copy_from_slice(open.as_slice());
                reply_ok(w, hdr.unique, &out)
            }
            Err(e) => reply_io_error(w, hdr.unique, &e),
        }
    }
}

/// The STATX reply for attributes `st` (valid for `valid`) and `extra` (served by the router).
pub(super) fn statx_out(
    st: &fuse_backend_rs::abi::fuse_abi::stat64,
    valid: std::time::Duration,
    extra: &super::filesystem::StatxExtra,
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
