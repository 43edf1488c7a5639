//! One pass over a descriptor chain: its device-readable and device-writable buffers as guest
//! memory slices, in order, for the protocol layer's cursors (`crate::fuse::buf`) to read the
//! request and write the reply across. READ and WRITE are served from these (a Linux guest sends a 1 MiB READ as 258
//! descriptors, one per page: walking the chain once instead of three times is most of what
//! such a request costs the daemon besides the copy). Knows descriptors, not FUSE.

use smallvec::SmallVec;
use std::mem::size_of;
use std::ops::Deref;
use virtio_queue::desc::split::Descriptor;
use virtio_queue::DescriptorChain;
use vm_memory::bitmap::{BitmapSlice, MS};
use vm_memory::{GuestAddress, GuestMemory, GuestMemoryMmap, VolatileMemory, VolatileSlice};

use crate::fuse::Cursor;

/// How guest memory marks what the daemon writes into it: nothing until the front-end
/// shares a dirty log (VHOST_USER_SET_LOG_BASE, for a migration), then every page written.
pub type Logged = vhost_user_backend::bitmap::BitmapMmapRegion;
/// Guest memory as the vhost-user handler maps it.
pub type GuestMem = vm_memory::GuestMemoryAtomic<GuestMemoryMmap<Logged>>;

/// Buffers kept inline: a metadata request's chain (header, arguments, out header, reply)
/// needs no allocation.
const INLINE: usize = 6;

/// A chain's buffers split by direction.
pub(crate) struct Parts<'a, B: BitmapSlice> {
    readable: SmallVec<[VolatileSlice<'a, B>; INLINE]>,
    writable: SmallVec<[VolatileSlice<'a, B>; INLINE]>,
    /// Where each readable buffer starts in guest memory (for the thread that serves the
    /// request elsewhere to map it again: [`Parts::spans`]).
    readable_at: SmallVec<[GuestAddress; INLINE]>,
    /// Where each writable buffer starts in guest memory (for another thread to map a part
    /// of the reply again: [`Parts::writable_spans`]).
    writable_at: SmallVec<[GuestAddress; INLINE]>,
}

/// A walked chain's buffers as guest memory spans (address, length), split by direction:
/// what a thread other than the one that walked the chain maps to serve it
/// ([`Parts::of_spans`]), without reading the descriptor table again.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Spans {
    readable: SmallVec<[(GuestAddress, usize); INLINE]>,
    writable: SmallVec<[(GuestAddress, usize); INLINE]>,
}

/// Why a chain cannot be served.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Bad {
    /// A device-readable buffer after a device-writable one (virtio forbids it).
    Order,
    /// A buffer outside guest memory.
    Address,
}

/// The slices of the daemon's guest memory.
pub(crate) type Mapped<'a> = MS<'a, GuestMemoryMmap<Logged>>;

impl<'a> Parts<'a, Mapped<'a>> {
    /// Maps every buffer of `descriptors` (already bounded by the queue: virtio-queue's
    /// iterator follows indirect tables, stops at the queue size and at 4 GiB).
    pub(crate) fn map<I>(mem: &'a GuestMemoryMmap<Logged>, descriptors: I) -> Result<Self, Bad>
    where
        I: IntoIterator<Item = Descriptor>,
    {
        let mut parts = Parts {
            readable: SmallVec::new(),
            writable: SmallVec::new(),
            readable_at: SmallVec::new(),
            writable_at: SmallVec::new(),
        };
        for d in descriptors {
            if d.len() == 0 {
                continue;
            }
            let s = mem
                .get_slice(d.addr(), d.len() as usize)
                .map_err(|_| Bad::Address)?;
            if d.is_write_only() {
                parts.writable.push(s);
                parts.writable_at.push(d.addr());
            } else if parts.writable.is_empty() {
                parts.readable.push(s);
                parts.readable_at.push(d.addr());
            } else {
                return Err(Bad::Order);
            }
        }
        Ok(parts)
    }

    /// Maps `spans` (from [`Parts::spans`] of a chain of `mem`) again, on the thread that
    /// serves the request: the same buffers, whatever the guest wrote into its descriptor
    /// table since.
    pub(crate) fn of_spans(mem: &'a GuestMemoryMmap<Logged>, spans: &Spans) -> Result<Self, Bad> {
        let map =
            |&(at, len): &(GuestAddress, usize)| mem.get_slice(at, len).map_err(|_| Bad::Address);
        Ok(Parts {
            readable: spans.readable.iter().map(map).collect::<Result<_, _>>()?,
            writable: spans.writable.iter().map(map).collect::<Result<_, _>>()?,
            readable_at: spans.readable.iter().map(|s| s.0).collect(),
            writable_at: spans.writable.iter().map(|s| s.0).collect(),
        })
    }
}

impl<'a, B: BitmapSlice> Parts<'a, B> {
    /// Every buffer as a guest memory span, for another thread to map ([`Parts::of_spans`]).
    pub(crate) fn spans(&self) -> Spans {
        let span = |(&at, b): (&GuestAddress, &VolatileSlice<'a, B>)| (at, b.len());
        Spans {
            readable: self
                .readable_at
                .iter()
                .zip(&self.readable)
                .map(span)
                .collect(),
            writable: self
                .writable_at
                .iter()
                .zip(&self.writable)
                .map(span)
                .collect(),
        }
    }

    /// A cursor over the readable buffers.
    pub(crate) fn reader(&self) -> Cursor<'_, 'a, B> {
        Cursor::new(&self.readable)
    }

    /// A cursor over the writable buffers.
    pub(crate) fn writer(&self) -> Cursor<'_, 'a, B> {
        Cursor::new(&self.writable)
    }

    /// The writable bytes from `skip` on, `len` of them (at most what there is), as guest
    /// memory spans: what another thread maps with [`map_spans`] to fill that part of the
    /// reply.
    pub(crate) fn writable_spans(&self, skip: usize, len: usize) -> Vec<(GuestAddress, usize)> {
        let spans = self.writable_at.iter().zip(&self.writable);
        cut_spans(spans.map(|(&at, b)| (at, b.len())), skip, len)
    }
}

/// Bytes `start..start + len` (at most what there is) of the guest memory `spans`, as spans.
pub(crate) fn cut_spans(
    spans: impl IntoIterator<Item = (GuestAddress, usize)>,
    mut start: usize,
    len: usize,
) -> Vec<(GuestAddress, usize)> {
    let mut want = len;
    let mut out = Vec::new();
    for (at, n) in spans {
        if want == 0 {
            break;
        }
        if start >= n {
            start -= n;
            continue;
        }
        let k = (n - start).min(want);
        // Inside a buffer that was mapped: the sum cannot overflow.
        out.push((GuestAddress(at.0 + start as u64), k));
        want -= k;
        start = 0;
    }
    out
}

/// Maps `spans` (from [`Parts::writable_spans`]) of `mem`, in order.
pub(crate) fn map_spans<'a>(
    mem: &'a GuestMemoryMmap<Logged>,
    spans: &[(GuestAddress, usize)],
) -> Result<SmallVec<[VolatileSlice<'a, Mapped<'a>>; INLINE]>, Bad> {
    spans
        .iter()
        .map(|&(at, len)| mem.get_slice(at, len).map_err(|_| Bad::Address))
        .collect()
}

/// Where a queue's descriptor table is in guest memory, and its number of entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ring {
    /// Guest address of the descriptor table.
    pub table: GuestAddress,
    /// Entries in it (the queue size).
    pub size: u16,
}

/// Bytes of one split-ring descriptor.
const DESC: usize = size_of::<Descriptor>();

/// The descriptors of one chain by virtio-queue's rules (an indirect table followed once,
/// never from inside one; at most as many descriptors as the table has entries; the chain
/// ends at a bad index, a bad indirect table or at 4 GiB of buffers), read from one mapping
/// of the table instead of a guest-memory lookup per descriptor.
struct TableWalk<'a> {
    mem: &'a GuestMemoryMmap<Logged>,
    table: VolatileSlice<'a, Mapped<'a>>,
    entries: u16,
    next: u16,
    ttl: u16,
    yielded: u32,
    indirect: bool,
}

impl Iterator for TableWalk<'_> {
    type Item = Descriptor;

    fn next(&mut self) -> Option<Descriptor> {
        loop {
            if self.ttl == 0 || self.next >= self.entries {
                return None;
            }
            // One volatile load of the 16 bytes (no copy loop).
            let d: Descriptor = self
                .table
                .get_ref::<Descriptor>(usize::from(self.next) * DESC)
                .ok()?
                .load();
            if d.refers_to_indirect_table() {
                let entries = d.len() as usize / DESC;
                if self.indirect
                    || !(d.len() as usize).is_multiple_of(DESC)
                    || entries > usize::from(u16::MAX)
                {
                    return None;
                }
                self.table = self.mem.get_slice(d.addr(), d.len() as usize).ok()?;
                self.entries = entries as u16;
                self.next = 0;
                self.ttl = self.entries;
                self.indirect = true;
                continue;
            }
            self.yielded = self.yielded.checked_add(d.len())?;
            if d.has_next() {
                self.next = d.next();
                self.ttl -= 1;
            } else {
                self.ttl = 0;
            }
            return Some(d);
        }
    }
}

impl<'a> Parts<'a, Mapped<'a>> {
    /// Maps the buffers of `chain`, a chain of the queue `ring` (its descriptors read from
    /// one mapping of the table; by virtio-queue's iterator where the table is not in one
    /// piece of guest memory).
    pub(crate) fn of_chain<M>(
        mem: &'a GuestMemoryMmap<Logged>,
        chain: &DescriptorChain<M>,
        ring: Ring,
    ) -> Result<Self, Bad>
    where
        M: Deref<Target = GuestMemoryMmap<Logged>> + Clone,
    {
        let table = usize::from(ring.size)
            .checked_mul(DESC)
            .and_then(|len| mem.get_slice(ring.table, len).ok());
        match table {
            Some(table) => Self::map(
                mem,
                TableWalk {
                    mem,
                    table,
                    entries: ring.size,
                    next: chain.head_index(),
                    ttl: ring.size,
                    yielded: 0,
                    indirect: false,
                },
            ),
            None => Self::map(mem, chain.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuse_backend_rs::api::filesystem::{ZeroCopyReader, ZeroCopyWriter};
    use std::io::{Read, Seek, Write};
    use virtio_queue::desc::split::Descriptor;
    use vm_memory::{Bytes, GuestAddress};

    const WRITE: u16 = virtio_bindings::virtio_ring::VRING_DESC_F_WRITE as u16;

    fn mem() -> GuestMemoryMmap<Logged> {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10_0000)]).unwrap()
    }

    fn d(addr: u64, len: u32, writable: bool) -> Descriptor {
        Descriptor::new(addr, len, if writable { WRITE } else { 0 }, 0)
    }

    /// Each buffer of `parts` as (host address, length), readable then writable.
    fn spans(parts: &Parts<'_, Mapped<'_>>) -> Vec<(usize, usize, bool)> {
        let one = |w: bool| {
            move |s: &VolatileSlice<'_, Mapped<'_>>| (s.ptr_guard().as_ptr() as usize, s.len(), w)
        };
        parts
            .readable
            .iter()
            .map(one(false))
            .chain(parts.writable.iter().map(one(true)))
            .collect()
    }

    /// `descs` put on a fresh 16-entry mock queue: its first chain and where its table is.
    fn queued<'m>(
        m: &'m GuestMemoryMmap<Logged>,
        descs: &[virtio_queue::desc::RawDescriptor],
    ) -> (DescriptorChain<&'m GuestMemoryMmap<Logged>>, Ring) {
        use virtio_queue::mock::MockSplitQueue;
        use virtio_queue::{Queue, QueueOwnedT};
        let q = MockSplitQueue::new(m, 16);
        q.add_desc_chains(descs, 0).unwrap();
        let chain = q.create_queue::<Queue>().unwrap().iter(m).unwrap().next();
        let ring = Ring {
            table: q.desc_table_addr(),
            size: 16,
        };
        (chain.unwrap(), ring)
    }

    #[test]
    fn writable_spans_map_back_to_the_same_bytes() {
        let m = mem();
        // Header and argument readable; a 16-byte reply header, then three data buffers.
        let descs = [
            d(0x2000, 40, false),
            d(0x2100, 40, false),
            d(0x3000, 16, true),
            d(0x5000, 100, true),
            d(0x7000, 50, true),
            d(0x9000, 200, true),
        ];
        let parts = Parts::map(&m, descs).unwrap();
        let a = GuestAddress;
        assert_eq!(
            parts.writable_spans(16, 170),
            vec![(a(0x5000), 100), (a(0x7000), 50), (a(0x9000), 20)]
        );
        assert_eq!(
            parts.writable_spans(10, 100),
            vec![(a(0x300a), 6), (a(0x5000), 94)]
        );
        assert_eq!(parts.writable_spans(366, 10), vec![]);
        assert_eq!(parts.writable_spans(300, 1000), vec![(a(0x9000 + 134), 66)]);
        // Mapped again, a span list reads and writes the very bytes the cursor does.
        let data: Vec<u8> = (0..=255u8).cycle().take(350).collect();
        parts
            .writer()
            .write_all(&{
                let mut v = vec![0u8; 16];
                v.extend(&data);
                v
            })
            .unwrap();
        let spans = parts.writable_spans(16 + 90, 100);
        let cut = cut_spans(parts.writable_spans(16, 350), 90, 100);
        assert_eq!(spans, cut);
        let slices = map_spans(&m, &spans).unwrap();
        let mut got = vec![0u8; 100];
        Cursor::new(&slices).read_exact(&mut got).unwrap();
        assert_eq!(got, &data[90..190]);
        assert_eq!(
            map_spans(&m, &[(a(0x10_0000 - 8), 16)]).unwrap_err(),
            Bad::Address
        );
    }

    #[test]
    fn the_table_walk_finds_what_virtio_queue_finds() {
        use virtio_bindings::virtio_ring::{VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT};
        use virtio_queue::desc::RawDescriptor;
        const NEXT: u16 = VRING_DESC_F_NEXT as u16;
        const INDIRECT: u16 = VRING_DESC_F_INDIRECT as u16;
        let raw = |addr: u64, len: u32, flags: u16, next: u16| {
            RawDescriptor::from(Descriptor::new(addr, len, flags, next))
        };
        let m = mem();
        // An indirect table at 0x8000: header, arguments, then two writable pages.
        let indirect = [
            raw(0x2000, 40, NEXT, 1),
            raw(0x2100, 40, NEXT, 2),
            raw(0x3000, 16, WRITE | NEXT, 3),
            raw(0x4000, 4096, WRITE, 0),
        ];
        for (i, d) in indirect.iter().enumerate() {
            m.write_obj(*d, GuestAddress(0x8000 + 16 * i as u64))
                .unwrap();
        }
        // A nested indirect table at 0x9000 (must end the chain).
        m.write_obj(raw(0x8000, 64, INDIRECT, 0), GuestAddress(0x9000))
            .unwrap();
        let layouts: Vec<Vec<RawDescriptor>> = vec![
            // Plain, Linux-style.
            vec![
                raw(0x2000, 40, NEXT, 1),
                raw(0x2100, 40, NEXT, 2),
                raw(0x3000, 16, WRITE, 0),
            ],
            // Through the indirect table.
            vec![raw(0x8000, 64, INDIRECT, 0)],
            // Direct, then indirect.
            vec![raw(0x2000, 40, NEXT, 1), raw(0x8000, 64, INDIRECT, 0)],
            // Indirect inside indirect.
            vec![raw(0x9000, 16, INDIRECT, 0)],
            // A table whose length is not whole descriptors.
            vec![raw(0x8000, 60, INDIRECT, 0)],
            // A loop: bounded by the table's size.
            vec![raw(0x2000, 40, NEXT, 1), raw(0x3000, 16, WRITE | NEXT, 0)],
            // A next index beyond the table.
            vec![raw(0x2000, 40, NEXT, 200)],
            // 4 GiB of buffers.
            vec![raw(0x2000, u32::MAX, NEXT, 1), raw(0x3000, 16, WRITE, 0)],
        ];
        for (i, descs) in layouts.iter().enumerate() {
            let (chain, ring) = queued(&m, descs);
            let ours = Parts::of_chain(&m, &chain, ring).map(|p| spans(&p));
            let theirs = Parts::map(&m, chain.clone()).map(|p| spans(&p));
            assert_eq!(ours, theirs, "layout {i}");
        }
        // What the plain and indirect layouts hold, to be sure both walks see something.
        let (chain, ring) = queued(&m, &layouts[1]);
        let parts = Parts::of_chain(&m, &chain, ring).unwrap();
        assert_eq!(
            (parts.reader().available(), parts.writer().available()),
            (80, 4112)
        );
    }

    #[test]
    fn a_readable_buffer_after_a_writable_one_is_refused() {
        let m = mem();
        let chain = [d(0, 40, false), d(0x1000, 16, true), d(0x2000, 8, false)];
        assert_eq!(Parts::map(&m, chain).err(), Some(Bad::Order));
    }

    #[test]
    fn a_buffer_outside_guest_memory_is_refused() {
        let m = mem();
        for chain in [
            [d(0, 40, false), d(0x10_0000, 16, true)],
            [d(0, 40, false), d(0xf_fff0, 32, true)],
            [d(u64::MAX - 8, 40, false), d(0, 16, true)],
        ] {
            assert_eq!(Parts::map(&m, chain).err(), Some(Bad::Address));
        }
    }

    #[test]
    fn reads_and_writes_cross_buffers_and_empty_ones_are_skipped() {
        let m = mem();
        m.write_slice(&[1, 2, 3], GuestAddress(0x100)).unwrap();
        m.write_slice(&[4, 5, 6, 7], GuestAddress(0x200)).unwrap();
        let chain = [
            d(0x100, 3, false),
            d(0x300, 0, false),
            d(0x200, 4, false),
            d(0x400, 2, true),
            d(0x500, 5, true),
        ];
        let parts = Parts::map(&m, chain).unwrap();
        let mut r = parts.reader();
        assert_eq!(r.available(), 7);
        let mut two = [0u8; 2];
        r.read_exact(&mut two).unwrap();
        assert_eq!(two, [1, 2]);
        let mut four = [0u8; 4];
        r.read_exact(&mut four).unwrap();
        assert_eq!(four, [3, 4, 5, 6]);
        // Too much: an error, and nothing consumed.
        assert!(r.read_exact(&mut four).is_err());
        assert_eq!(r.available(), 1);
        assert_eq!(r.read(&mut four).unwrap(), 1);
        assert_eq!(four[0], 7);

        let mut w = parts.writer();
        assert_eq!(w.available(), 7);
        w.write_all(&[9, 8, 7]).unwrap();
        assert_eq!(w.write(&[6, 5, 4, 3, 2]).unwrap(), 4);
        assert_eq!(w.available(), 0);
        assert_eq!(w.write(&[1]).unwrap(), 0);
        let mut got = [0u8; 5];
        m.read_slice(&mut got[..2], GuestAddress(0x400)).unwrap();
        m.read_slice(&mut got[2..], GuestAddress(0x500)).unwrap();
        assert_eq!(got, [9, 8, 7, 6, 5]);
        let mut tail = [0u8; 2];
        m.read_slice(&mut tail, GuestAddress(0x503)).unwrap();
        assert_eq!(tail, [4, 3]);
    }

    #[test]
    fn limit_and_skip_bound_what_a_file_sees() {
        // A file read into pages (as a Linux guest's READ reply), past a 16-byte header and
        // limited to the size asked for: the bytes land in order, nothing beyond the limit.
        let m = mem();
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        f.write_all(&data).unwrap();
        let chain = [
            d(0, 40, false),
            d(0x1000, 16, true),
            d(0x2000, 4096, true),
            d(0x4000, 4096, true),
            d(0x6000, 4096, true),
        ];
        let parts = Parts::map(&m, chain).unwrap();
        let mut w = parts.writer();
        w.skip(16);
        w.limit(5000);
        let n = ZeroCopyWriter::write_from(&mut w, &mut f, 8192, 100).unwrap();
        assert_eq!(n, 5000);
        assert_eq!(w.available(), 0);
        let mut got = vec![0u8; 4096];
        m.read_slice(&mut got, GuestAddress(0x2000)).unwrap();
        assert_eq!(got[..], data[100..4196]);
        m.read_slice(&mut got, GuestAddress(0x4000)).unwrap();
        assert_eq!(got[..904], data[4196..5100]);
        assert!(
            got[904..].iter().all(|&b| b == 0),
            "nothing beyond the limit"
        );

        // And back: the guest's pages written to a file at an offset.
        let mut r = parts.writer();
        r.skip(16);
        r.limit(4096 + 10);
        let n = ZeroCopyReader::read_to(&mut r, &mut f, 1 << 20, 20_000).unwrap();
        assert_eq!(n, 4106);
        f.rewind().unwrap();
        let mut back = Vec::new();
        f.read_to_end(&mut back).unwrap();
        assert_eq!(back.len(), 20_000 + 4106);
        assert_eq!(back[20_000..24_096], data[100..4196]);
        assert_eq!(back[24_096..], data[4196..4206]);
    }
}
