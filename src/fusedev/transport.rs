//! What a /dev/fuse connection carries: how many pages a request may hold (the host's
//! `fs.fuse.max_pages_limit`, at most 1020) and so how large the buffers a reader thread
//! reads requests into and writes replies from must be. READ data is filled on the thread
//! that read the request (the trait's default): no split across helpers here.

use fuse_backend_rs::abi::fuse_abi::InHeader;
use vm_memory::bitmap::BitmapSlice;

use crate::fuse::{ServedFs, Transport, MAX_PAGES_LIMIT};

/// Room for the headers and arguments of a request or reply beside its data pages.
const HEADER_ROOM: usize = 4096;

/// The kernel refuses a read of the device into less than this (`FUSE_MIN_READ_BUFFER`).
const MIN_READ_BUFFER: usize = 8192;

/// A /dev/fuse connection as the protocol sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Device {
    /// The most pages one request may carry: what INIT caps `max_pages` by.
    pub max_pages: u16,
    /// The host's page size.
    pub page_size: usize,
}

impl Device {
    /// The host's connection: pages per request as its kernel allows, capped at `configured`
    /// (`--max-pages`).
    pub fn host(configured: u16) -> Self {
        let kernel = crate::sys::fusedev::max_pages_limit().min(u32::from(MAX_PAGES_LIMIT));
        Device {
            max_pages: configured.min(kernel as u16).max(1),
            page_size: fuse_backend_rs::transport::pagesize(),
        }
    }

    /// The size of a reader's request buffer: a whole WRITE of `max_pages` pages and its
    /// headers, and never below what the kernel accepts.
    pub fn request_buffer(&self) -> usize {
        (usize::from(self.max_pages) * self.page_size + HEADER_ROOM)
            .max(MIN_READ_BUFFER + std::mem::size_of::<InHeader>())
    }

    /// The size of a reader's reply buffer: a whole READ of `max_pages` pages and its header.
    pub fn reply_buffer(&self) -> usize {
        usize::from(self.max_pages) * self.page_size + HEADER_ROOM
    }
}

impl<F: ServedFs, B: BitmapSlice> Transport<F, B> for Device {
    fn max_pages(&self) -> u16 {
        self.max_pages
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_hold_a_whole_request_and_the_kernels_minimum() {
        let d = Device {
            max_pages: 256,
            page_size: 4096,
        };
        assert_eq!(d.request_buffer(), 256 * 4096 + 4096);
        assert_eq!(d.reply_buffer(), 256 * 4096 + 4096);
        let small = Device {
            max_pages: 1,
            page_size: 4096,
        };
        assert!(small.request_buffer() >= 8192 + 40);
        assert!(Device::host(1020).max_pages <= MAX_PAGES_LIMIT);
        assert_eq!(Device::host(8).max_pages, 8);
    }
}
