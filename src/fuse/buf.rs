//! A request's and a reply's bytes as the protocol layer sees them: a cursor over a list of
//! byte buffers (a descriptor chain's guest pages, a /dev/fuse read buffer, a test's plain
//! vector), read and written in order, and handed to a file for zero-copy READ and WRITE
//! data. Knows slices and their dirty-page log, not where the buffers come from.

use std::io;

use fuse_backend_rs::api::filesystem::{ZeroCopyReader, ZeroCopyWriter};
use fuse_backend_rs::file_buf::FileVolatileSlice;
use fuse_backend_rs::file_traits::FileReadWriteVolatile;
use smallvec::SmallVec;
use vm_memory::bitmap::BitmapSlice;
use vm_memory::VolatileSlice;

/// Buffers a cursor hands a file without allocating.
const INLINE: usize = 6;

/// A position in a list of byte buffers (a request's or a reply's, in whatever memory the
/// transport has them).
#[derive(Clone)]
pub struct Cursor<'p, 'a, B: BitmapSlice> {
    bufs: &'p [VolatileSlice<'a, B>],
    /// Index of the buffer the position is in.
    at: usize,
    /// Offset within it.
    off: usize,
    /// Bytes from the position to the end (or to the limit set by [`Cursor::limit`]).
    left: usize,
}

impl<'p, 'a, B: BitmapSlice> Cursor<'p, 'a, B> {
    /// A cursor at the start of `bufs`.
    pub fn new(bufs: &'p [VolatileSlice<'a, B>]) -> Self {
        let left = bufs.iter().map(|b| b.len()).sum();
        Cursor {
            bufs,
            at: 0,
            off: 0,
            left,
        }
    }

    /// Bytes left to read or write.
    pub fn available(&self) -> usize {
        self.left
    }

    /// Stops the cursor `n` bytes from here (no effect if fewer are left).
    pub fn limit(&mut self, n: usize) {
        self.left = self.left.min(n);
    }

    /// Moves on `n` bytes (at most what is left).
    #[inline]
    pub fn skip(&mut self, n: usize) {
        let mut n = n.min(self.left);
        self.left -= n;
        while n > 0 {
            let here = self.bufs[self.at].len() - self.off;
            if n < here {
                self.off += n;
                return;
            }
            n -= here;
            self.at += 1;
            self.off = 0;
        }
        // Land on the next non-empty buffer so that `pieces` starts in one.
        while self.at < self.bufs.len() && self.off == self.bufs[self.at].len() {
            self.at += 1;
            self.off = 0;
        }
    }

    /// The next `n` bytes (at most what is left) as (buffer, offset in it, length), without
    /// moving.
    fn spans(&self, n: usize) -> impl Iterator<Item = (&VolatileSlice<'a, B>, usize, usize)> {
        let mut want = n.min(self.left);
        let mut off = self.off;
        self.bufs[self.at.min(self.bufs.len())..]
            .iter()
            .map_while(move |b| {
                if want == 0 {
                    return None;
                }
                let start = std::mem::take(&mut off);
                let k = (b.len() - start).min(want);
                want -= k;
                Some((b, start, k))
            })
            .filter(|&(_, _, k)| k > 0)
    }

    /// The next `count` bytes (at most what is left) as slices a file can read into or
    /// write from, without moving.
    /// One allocation at most, sized for every buffer left: a 1 MiB READ's 256 pages grown
    /// by doubling reallocated (and copied) the list seven times.
    fn pieces(&self, count: usize) -> SmallVec<[FileVolatileSlice<'a>; INLINE]> {
        let mut out = SmallVec::with_capacity(self.bufs.len().saturating_sub(self.at));
        out.extend(
            self.spans(count)
                .filter_map(|(b, off, k)| b.subslice(off, k).ok())
                .map(|s| FileVolatileSlice::from_volatile_slice(&s)),
        );
        out
    }

    /// Marks the next `n` bytes dirty in the migration log (a file wrote them).
    fn mark_dirty(&self, n: usize) {
        for (b, off, k) in self.spans(n) {
            b.bitmap().mark_dirty(off, k);
        }
    }

    /// Copies out exactly `buf.len()` bytes, or fails with UnexpectedEof moving nothing.
    pub fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        if buf.len() > self.left {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let mut done = 0;
        for (b, off, k) in self.spans(buf.len()) {
            b.subslice(off, k)
                .map_err(io::Error::other)?
                .copy_to(&mut buf[done..done + k]);
            done += k;
        }
        self.skip(done);
        Ok(())
    }

    /// Copies in all of `data`, or fails with WriteZero writing nothing if it does not fit.
    pub fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        if data.len() > self.left {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let mut done = 0;
        for (b, off, k) in self.spans(data.len()) {
            // VolatileSlice copies mark what they write dirty.
            b.subslice(off, k)
                .map_err(io::Error::other)?
                .copy_from(&data[done..done + k]);
            done += k;
        }
        self.skip(done);
        Ok(())
    }

    /// Reads one plain-data object.
    pub fn read_obj<T: vm_memory::ByteValued + Default>(&mut self) -> io::Result<T> {
        let mut v = T::default();
        self.read_exact(v.as_mut_slice())?;
        Ok(v)
    }
}

/// A request's bytes still to be read, wherever they are.
pub trait Remaining: io::Read {
    /// How many are left.
    fn remaining(&self) -> usize;
}

impl<B: BitmapSlice> Remaining for Cursor<'_, '_, B> {
    fn remaining(&self) -> usize {
        self.left
    }
}

impl<B: BitmapSlice> io::Write for Cursor<'_, '_, B> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = buf.len().min(self.left);
        self.write_all(&buf[..n])?;
        Ok(n)
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let mut total = 0;
        for b in bufs {
            let n = b.len().min(self.left);
            self.write_all(&b[..n])?;
            total += n;
            if n < b.len() {
                break;
            }
        }
        Ok(total)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<B: BitmapSlice> io::Read for Cursor<'_, '_, B> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.left);
        self.read_exact(&mut buf[..n])?;
        Ok(n)
    }
}

impl<B: BitmapSlice> ZeroCopyWriter for Cursor<'_, '_, B> {
    /// Reads up to `count` bytes of `f` at `off` straight into the guest's buffers.
    fn write_from(
        &mut self,
        f: &mut dyn FileReadWriteVolatile,
        count: usize,
        off: u64,
    ) -> io::Result<usize> {
        let pieces = self.pieces(count);
        if pieces.is_empty() {
            return Ok(0);
        }
        let n = f.read_vectored_at_volatile(&pieces, off)?;
        let n = n.min(self.left);
        self.mark_dirty(n);
        self.skip(n);
        Ok(n)
    }

    fn available_bytes(&self) -> usize {
        self.left
    }
}

impl<B: BitmapSlice> ZeroCopyReader for Cursor<'_, '_, B> {
    /// Writes up to `count` bytes from the guest's buffers into `f` at `off`.
    fn read_to(
        &mut self,
        f: &mut dyn FileReadWriteVolatile,
        count: usize,
        off: u64,
    ) -> io::Result<usize> {
        let pieces = self.pieces(count);
        if pieces.is_empty() {
            return Ok(0);
        }
        let n = f.write_vectored_at_volatile(&pieces, off)?.min(self.left);
        self.skip(n);
        Ok(n)
    }
}
