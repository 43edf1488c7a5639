//! A reader thread's request and reply buffers, placed so that the data they carry starts on
//! a page boundary: a WRITE's payload (after its 40-byte `fuse_in_header` and 40-byte
//! `fuse_write_in`) and a READ reply's data (after its 16-byte `fuse_out_header`). The daemon
//! writes and reads the branch file straight from and into them, so a branch file opened with
//! O_DIRECT (ext4, xfs: the buffer must be aligned to the device's logical block) gets an
//! aligned buffer whenever the caller's offset and size are aligned, as on the branch itself.
//! Allocates only; reads and writes nothing.

use std::mem::size_of;

use fuse_backend_rs::abi::fuse_abi::{InHeader, OutHeader, WriteIn};

/// Where a WRITE's payload starts in a request.
pub const WRITE_DATA: usize = size_of::<InHeader>() + size_of::<WriteIn>();

/// Where a READ's data starts in its reply.
pub const READ_DATA: usize = size_of::<OutHeader>();

/// `len` bytes whose byte `lead` is on a page boundary (one page more is allocated to place
/// them; the memory never moves).
pub struct Aligned {
    bytes: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    /// A zeroed buffer of `len` bytes whose byte `lead` sits on a multiple of `page` (a power
    /// of two).
    pub fn new(len: usize, lead: usize, page: usize) -> Self {
        let bytes = vec![0u8; len + page];
        let at = bytes.as_ptr() as usize + lead;
        let start = (page - at % page) % page;
        Aligned { bytes, start, len }
    }

    /// The buffer.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.bytes[self.start..self.start + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_after_the_headers_starts_on_a_page() {
        assert_eq!((WRITE_DATA, READ_DATA), (80, 16));
        for len in [8192, 4096 * 257, 1 << 20] {
            for lead in [WRITE_DATA, READ_DATA] {
                let mut b = Aligned::new(len, lead, 4096);
                let s = b.as_mut_slice();
                assert_eq!(s.len(), len);
                assert_eq!(
                    (s.as_ptr() as usize + lead) % 4096,
                    0,
                    "len {len} lead {lead}"
                );
                s[len - 1] = 1;
            }
        }
    }
}
