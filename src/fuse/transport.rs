//! The seam between the protocol and whatever carries its requests: how many pages a
//! request may carry on it, and how READ data is filled (virtio may cut a large READ into
//! pieces for several threads). A transport that is only byte buffers is [`Plain`].

use std::io;

use vm_memory::bitmap::BitmapSlice;

use super::buf::Cursor;
use super::filesystem::ServedFs;
use super::io::ReadJob;

/// What the protocol asks of the transport a request came on.
pub trait Transport<F: ServedFs, B: BitmapSlice> {
    /// The most pages one request can carry on it (virtio: the queue size less the four
    /// descriptors of headers and arguments), what INIT caps `max_pages` by.
    fn max_pages(&self) -> u16;

    /// Fills READ's data, `data` (a cursor over exactly `job.size()` bytes behind the reply
    /// header), returning the bytes read. On this thread unless the transport has helpers.
    fn fill_read(&self, job: &ReadJob<'_, F>, data: &mut Cursor<'_, '_, B>) -> io::Result<usize> {
        job.fill(data, 0, job.size())
    }
}

/// A transport that is only byte buffers (tests, fuzzing): READs filled on the serving
/// thread, requests of up to this many pages.
pub struct Plain(pub u16);

impl<F: ServedFs, B: BitmapSlice> Transport<F, B> for Plain {
    fn max_pages(&self) -> u16 {
        self.0
    }
}
