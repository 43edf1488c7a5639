//! FUSE_INIT negotiation, done here instead of in fuse-backend-rs because its `Server` hard-codes
//! `max_pages = 256`. Pure functions of the guest's offer and our limits; no I/O, no queues.

use fuse_backend_rs::abi::fuse_abi::{
    FsOptions, InitIn, InitOut, FUSE_COMPAT_22_INIT_OUT_SIZE, FUSE_COMPAT_INIT_OUT_SIZE,
    KERNEL_MINOR_VERSION, KERNEL_MINOR_VERSION_INIT_22_OUT_SIZE,
    KERNEL_MINOR_VERSION_INIT_OUT_SIZE, KERNEL_VERSION,
};
use vm_memory::ByteValued;

/// The largest `max_pages` we ever advertise (virtio-fs queues are at most 1024 entries and the
/// kernel needs 4 of them for FUSE headers).
pub const MAX_PAGES_LIMIT: u16 = 1020;

/// Descriptors the guest driver reserves per request for the FUSE in/out headers and arguments.
const FUSE_HEADER_OVERHEAD: u16 = 4;

/// What a kernel that does not know `FUSE_MAX_PAGES` uses per request.
const KERNEL_DEFAULT_MAX_PAGES: u16 = 32;

/// `max_write` for a kernel that offers neither `BIG_WRITES` nor `MAX_PAGES`.
const SMALL_MAX_WRITE: u32 = 4096;

/// `--max-write`'s default: 512 KiB. A Linux guest sends an O_DIRECT write larger than
/// `max_write` as several WRITEs at once (FUSE_ASYNC_DIO) and pins the pages of the next
/// while the daemon copies the first; one WRITE of 1 MiB leaves nothing to overlap.
/// Measured with `scripts/bench-maxpages.sh` (6.12 guest, 256 pages, 3 runs): 1 MiB O_DIRECT
/// writes 2,890 MiB/s with 512 KiB against 2,417 with 1 MiB (and 2,484 at 32 pages); 4 MiB
/// ones 4,409 against 4,183; with 256 KiB, `--cache never` writes (sent one after another)
/// lost 15%. Buffered writes fill at most this much per WRITE, and READs are not limited by
/// it (they still grow to max_pages).
pub const DEFAULT_MAX_WRITE: u32 = 512 * 1024;

/// The largest `--max-write`: all [`MAX_PAGES_LIMIT`] pages of 4 KiB.
pub const MAX_WRITE_LIMIT: u32 = MAX_PAGES_LIMIT as u32 * 4096;

/// The transfer limits announced to the guest in the INIT reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// Pages per request the guest may use.
    pub max_pages: u16,
    /// Largest WRITE payload in bytes.
    pub max_write: u32,
}

impl Negotiated {
    /// Both limits in one word, for an atomic (they change only at INIT and reset, and READ
    /// and WRITE read them on every request: no lock there).
    pub fn pack(self) -> u64 {
        (u64::from(self.max_pages) << 32) | u64::from(self.max_write)
    }

    /// The limits [`Negotiated::pack`] stored.
    pub fn unpack(v: u64) -> Self {
        Negotiated {
            max_pages: (v >> 32) as u16,
            max_write: v as u32,
        }
    }

    /// The limits in force before INIT: the most any INIT could grant.
    pub fn upper_bound(max_pages: u16, page_size: usize) -> Self {
        Negotiated {
            max_pages,
            max_write: u32::from(max_pages) * page_size as u32,
        }
    }

    /// Largest READ size accepted: a guest without `BIG_WRITES` still reads whole page vectors.
    pub fn max_read(&self, page_size: usize) -> u32 {
        self.max_write
            .max(u32::from(self.max_pages) * page_size as u32)
    }
}

/// Pages per request we can serve: `--max-pages`, capped by the request queue size minus the
/// header overhead, and at least one.
pub fn effective_max_pages(configured: u16, queue_size: u16) -> u16 {
    configured
        .min(MAX_PAGES_LIMIT)
        .min(queue_size.saturating_sub(FUSE_HEADER_OVERHEAD))
        .max(1)
}

/// The options the guest offers: `flags`, plus `flags2` when `INIT_EXT` is set.
pub fn capable(init: &InitIn, flags2: Option<u32>) -> FsOptions {
    let mut bits = u64::from(init.flags);
    if let Some(f2) = flags2 {
        bits |= u64::from(f2) << 32;
    }
    FsOptions::from_bits_truncate(bits)
}

/// The newest protocol minor this daemon speaks: fuse-backend-rs 0.14's 7.33 plus what the
/// daemon serves itself (SYNCFS 7.34, STATX 7.39; TMPFILE 7.37 answers ENOSYS, which the
/// guest remembers). Nothing between changes the size of a request the `Server` parses.
pub const MINOR: u32 = 39;

/// The minor to reply to a guest speaking `guest`: never newer than the guest (it would
/// assume what it does not know), never older than fuse-backend-rs's.
pub fn reply_minor(guest: u32) -> u32 {
    guest.clamp(KERNEL_MINOR_VERSION, MINOR)
}

/// Builds the INIT reply for a guest speaking FUSE 7.x (`init.major == KERNEL_VERSION`).
/// `want` is what the filesystem asked for; transfer-size options are a transport concern, so
/// `BIG_WRITES` and `MAX_PAGES` are enabled whenever the guest offers them.
pub fn build_reply(
    init: &InitIn,
    capable: FsOptions,
    want: FsOptions,
    max_pages: u16,
    max_write: u32,
    page_size: usize,
) -> (InitOut, Negotiated) {
    let mut enabled = capable & (want | FsOptions::BIG_WRITES | FsOptions::MAX_PAGES);
    if enabled.bits() >> 32 != 0 && capable.contains(FsOptions::INIT_EXT) {
        // flags2 is only read by the kernel when INIT_EXT is echoed back.
        enabled |= FsOptions::INIT_EXT;
    }
    let page = page_size as u32;
    // `pages` pages of WRITE, at most `max_write` (`--max-write`) but at least one page.
    let write_of = |pages: u16| (u32::from(pages) * page).min(max_write).max(page);
    let negotiated = if enabled.contains(FsOptions::MAX_PAGES) {
        Negotiated {
            max_pages,
            max_write: write_of(max_pages),
        }
    } else {
        let pages = max_pages.min(KERNEL_DEFAULT_MAX_PAGES);
        let max_write = if enabled.contains(FsOptions::BIG_WRITES) {
            write_of(pages)
        } else {
            SMALL_MAX_WRITE
        };
        Negotiated {
            max_pages: pages,
            max_write,
        }
    };
    let out = InitOut {
        major: KERNEL_VERSION,
        minor: reply_minor(init.minor),
        max_readahead: init.max_readahead,
        flags: enabled.bits() as u32,
        max_background: u16::MAX,
        congestion_threshold: (u16::MAX / 4) * 3,
        max_write: negotiated.max_write,
        time_gran: 1,
        max_pages: if enabled.contains(FsOptions::MAX_PAGES) {
            negotiated.max_pages
        } else {
            0
        },
        flags2: (enabled.bits() >> 32) as u32,
        ..Default::default()
    };
    (out, negotiated)
}

/// `FUSE_DIRECT_IO_ALLOW_MMAP` (flags2 bit 4, Linux 6.6): shared mmap of FOPEN_DIRECT_IO
/// files is allowed. fuse-backend-rs 0.14 has no name for it.
pub const DIRECT_IO_ALLOW_MMAP: u64 = 1 << 36;

/// Enables, in `out`, the raw INIT flags in `wanted` that the guest `offered` (`flags |
/// flags2 << 32`, flags2 only with INIT_EXT): for flags fuse-backend-rs cannot name.
pub fn enable_raw(out: &mut InitOut, offered: u64, wanted: u64) {
    let bits = offered & wanted;
    out.flags |= bits as u32;
    out.flags2 |= (bits >> 32) as u32;
    if out.flags2 != 0 {
        // A high bit was offered, so the guest sent flags2 and set INIT_EXT.
        out.flags |= FsOptions::INIT_EXT.bits() as u32;
    }
}

/// `max_stack_depth` (7.40, the word after `flags2`): how deep the filesystems of backing
/// files may stack. 1: branches on plain filesystems, and the mount itself may lie under
/// an overlayfs (mergerfs's `passthrough.max-stack-depth` default).
pub const MAX_STACK_DEPTH: u32 = 1;

/// With FUSE_PASSTHROUGH enabled in `out`, sets its `max_stack_depth` (without it the
/// kernel turns passthrough off).
pub fn set_stack_depth(out: &mut InitOut) {
    if u64::from(out.flags2) << 32 & crate::sys::abi::fuse::PASSTHROUGH != 0 {
        out.unused[0] = MAX_STACK_DEPTH;
    }
}

/// The reply asking a guest with a newer major version to retry with ours.
pub fn version_reply() -> InitOut {
    InitOut {
        major: KERNEL_VERSION,
        minor: KERNEL_MINOR_VERSION,
        ..Default::default()
    }
}

/// The bytes of `out` an INIT reply carries for a guest speaking `minor` (old guests expect a
/// shorter struct).
pub fn reply_bytes(out: &InitOut, minor: u32) -> &[u8] {
    let bytes = out.as_slice();
    if minor < KERNEL_MINOR_VERSION_INIT_OUT_SIZE {
        &bytes[..FUSE_COMPAT_INIT_OUT_SIZE]
    } else if minor < KERNEL_MINOR_VERSION_INIT_22_OUT_SIZE {
        &bytes[..FUSE_COMPAT_22_INIT_OUT_SIZE]
    } else {
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(minor: u32, flags: FsOptions) -> InitIn {
        InitIn {
            major: 7,
            minor,
            max_readahead: 131072,
            flags: flags.bits() as u32,
        }
    }

    #[test]
    fn raw_flags_are_enabled_only_when_offered() {
        let mut out = InitOut::default();
        enable_raw(&mut out, u64::from(KERNEL_VERSION), DIRECT_IO_ALLOW_MMAP);
        assert_eq!((out.flags, out.flags2), (0, 0));
        let offered = FsOptions::INIT_EXT.bits() | DIRECT_IO_ALLOW_MMAP;
        enable_raw(&mut out, offered, 0);
        assert_eq!((out.flags, out.flags2), (0, 0));
        enable_raw(&mut out, offered, DIRECT_IO_ALLOW_MMAP);
        assert_eq!(out.flags2, 1 << 4);
        assert_eq!(u64::from(out.flags), FsOptions::INIT_EXT.bits());
    }

    #[test]
    fn passthrough_sets_the_stack_depth() {
        use crate::sys::abi::fuse::PASSTHROUGH;
        let mut out = InitOut::default();
        set_stack_depth(&mut out);
        assert_eq!(out.unused[0], 0);
        enable_raw(
            &mut out,
            FsOptions::INIT_EXT.bits() | PASSTHROUGH,
            PASSTHROUGH,
        );
        set_stack_depth(&mut out);
        assert_eq!(out.flags2, 1 << 5);
        // max_stack_depth sits at byte 36 of fuse_init_out, after flags2.
        assert_eq!(out.as_slice()[36..40], 1u32.to_ne_bytes());
    }

    #[test]
    fn max_pages_is_min_of_option_and_queue() {
        assert_eq!(effective_max_pages(1020, 1024), 1020);
        assert_eq!(effective_max_pages(1020, 256), 252);
        assert_eq!(effective_max_pages(32, 1024), 32);
        assert_eq!(effective_max_pages(1020, 128), 124);
        assert_eq!(effective_max_pages(1020, 2), 1);
        assert_eq!(effective_max_pages(2000, 4096), 1020);
    }

    /// `--max-write` lowers max_write only (never below a page, never above max_pages' pages);
    /// max_pages, and with it the largest READ, stay.
    #[test]
    fn max_write_caps_writes_not_pages() {
        let caps = FsOptions::BIG_WRITES | FsOptions::MAX_PAGES;
        let init = offer(31, caps);
        for (pages, cap, want) in [
            (1020, 512 << 10, 512 << 10),
            (32, 512 << 10, 32 * 4096),
            (1020, 1, 4096),
            (1020, u32::MAX, 1020 * 4096),
        ] {
            let (out, n) = build_reply(&init, caps, FsOptions::empty(), pages, cap, 4096);
            assert_eq!(
                (out.max_pages, out.max_write),
                (pages, want),
                "{pages} {cap}"
            );
            assert_eq!((n.max_pages, n.max_write), (pages, want));
            assert_eq!(n.max_read(4096), u32::from(pages) * 4096);
        }
        // A guest without MAX_PAGES: 32 pages of BIG_WRITES, capped the same way.
        let old = offer(31, FsOptions::BIG_WRITES);
        let (out, _) = build_reply(
            &old,
            FsOptions::BIG_WRITES,
            FsOptions::empty(),
            1020,
            64 << 10,
            4096,
        );
        assert_eq!(out.max_write, 64 << 10);
    }

    #[test]
    fn reply_advertises_max_pages_and_max_write() {
        let caps = FsOptions::MAX_PAGES | FsOptions::BIG_WRITES | FsOptions::ASYNC_READ;
        let init = offer(38, caps);
        let (out, n) = build_reply(&init, caps, FsOptions::ASYNC_READ, 1020, u32::MAX, 4096);
        assert_eq!(out.max_pages, 1020);
        assert_eq!(out.max_write, 1020 * 4096);
        assert_eq!(n.max_write, 1020 * 4096);
        assert_eq!(out.major, 7);
        assert_eq!(out.minor, 38, "the guest's minor, which is newer than 7.33");
        assert_eq!(reply_minor(41), MINOR);
        assert_eq!(reply_minor(20), KERNEL_MINOR_VERSION);
        assert_eq!(out.time_gran, 1);
        assert_eq!(out.max_readahead, 131072);
        let flags = FsOptions::from_bits_truncate(u64::from(out.flags));
        assert!(flags.contains(FsOptions::MAX_PAGES | FsOptions::BIG_WRITES));
        assert!(flags.contains(FsOptions::ASYNC_READ));
        assert_eq!(reply_bytes(&out, 38).len(), 64);
    }

    #[test]
    fn fs_cannot_enable_what_guest_lacks() {
        let caps = FsOptions::ASYNC_READ;
        let init = offer(38, caps);
        let (out, n) = build_reply(&init, caps, FsOptions::all(), 1020, u32::MAX, 4096);
        let flags = FsOptions::from_bits_truncate(u64::from(out.flags));
        assert_eq!(flags, FsOptions::ASYNC_READ);
        assert_eq!(out.max_pages, 0);
        assert_eq!(out.max_write, 4096);
        assert_eq!(n.max_read(4096), 32 * 4096);
    }

    #[test]
    fn big_writes_without_max_pages_uses_kernel_default() {
        let caps = FsOptions::BIG_WRITES;
        let (out, _) = build_reply(
            &offer(27, caps),
            caps,
            FsOptions::empty(),
            1020,
            u32::MAX,
            4096,
        );
        assert_eq!(out.max_write, 32 * 4096);
        assert_eq!(out.max_pages, 0);
    }

    #[test]
    fn flags2_needs_init_ext() {
        let hi = FsOptions::from_bits_truncate(1 << 33);
        let caps = FsOptions::INIT_EXT | FsOptions::MAX_PAGES | hi;
        let init = offer(38, caps);
        assert_eq!(capable(&init, Some((caps.bits() >> 32) as u32)), caps);
        let (out, _) = build_reply(&init, caps, hi, 32, u32::MAX, 4096);
        assert_eq!(out.flags2, (hi.bits() >> 32) as u32);
        assert_ne!(u64::from(out.flags) & FsOptions::INIT_EXT.bits(), 0);
        assert_eq!(out.max_pages, 32);
        assert_eq!(out.max_write, 32 * 4096);
    }

    #[test]
    fn limits_pack_into_one_word_and_back() {
        for n in [
            Negotiated {
                max_pages: 1020,
                max_write: 1020 * 4096,
            },
            Negotiated {
                max_pages: 32,
                max_write: 4096,
            },
            Negotiated {
                max_pages: u16::MAX,
                max_write: u32::MAX,
            },
        ] {
            let back = Negotiated::unpack(n.pack());
            assert_eq!((back.max_pages, back.max_write), (n.max_pages, n.max_write));
        }
    }

    #[test]
    fn old_minors_get_short_replies() {
        let out = version_reply();
        assert_eq!(reply_bytes(&out, 4).len(), 8);
        assert_eq!(reply_bytes(&out, 22).len(), 24);
        assert_eq!(reply_bytes(&out, 23).len(), 64);
    }
}
