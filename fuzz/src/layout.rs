//! The `chain` target: how a request is laid out in descriptors. Each record picks a request
//! (a well-formed one from [`crate::wire`], or raw bytes), possibly lies in its header's
//! length, and spreads it over readable descriptors of odd sizes followed (or not) by writable
//! ones, some out of guest memory, straddling a region's end, aliasing each other or the
//! descriptor table, looping, or pointing into an indirect table. The daemon must answer with
//! a well-formed reply (an errno, or success for a request that is whole) or drop the chain,
//! and never panic; the session then ends as in the `session` target.

use virtio_bindings::virtio_ring::{VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::RawDescriptor;
use vm_memory::{Address, Bytes, GuestAddress};

use crate::guest::{chain_of, check_reply, desc, memory, trace, Harness, QUEUE_LEN, REGIONS};
use crate::wire::{Input, Request, State, SETLKW};

/// An INIT that negotiates what a Linux guest asks for (FUSE 7.38, MAX_PAGES, BIG_WRITES…).
const INIT: [u8; 11] = [11, 0, 0x3b, 0xf0, 0x7f, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00];
/// Records per input at most.
const MAX_RECORDS: usize = 32;
/// Where sequentially placed readable descriptors start.
const READ_AREA: u64 = 0x10_0000;
/// Where sequentially placed writable descriptors start.
const WRITE_AREA: u64 = 0x80_0000;
/// Where indirect tables go.
const INDIRECT_AREA: u64 = 0x30_0000;

/// Runs the `chain` target on `data`.
pub fn run(data: &[u8]) {
    let mut input = Input::new(data);
    let mut h = Harness::begin(0, 1020, false);
    let init = h.state.init(&mut Input::new(&INIT));
    h.serve(&init);
    let mut n = 0;
    while !input.is_empty() && n < MAX_RECORDS {
        n += 1;
        record(&mut h, &mut input);
    }
    h.finish();
}

fn record(h: &mut Harness, input: &mut Input<'_>) {
    let queue_size = match input.u8() % 8 {
        0 | 1 => 1024,
        2 => 16,
        3 => 128,
        4 => 1,
        5 => 0,
        6 => 32768,
        _ => input.u16(),
    };
    let req = message(&mut h.state, input);
    let mut p = Placer::new(req.bytes.len());
    let descs = p.descriptors(input, 0);
    let mem = memory();
    // The request first: where a readable descriptor aliases the descriptor table, the table
    // wins, as it would in a guest that rewrote it.
    let Some(chain) = chain_of(0, &descs) else {
        return;
    };
    // Zeros after the request, so that what the daemon reads past it is the same each time
    // (not what an earlier record left there).
    static ZEROS: [u8; 0x1_0000] = [0; 0x1_0000];
    let mut rest = &req.bytes[..];
    for d in chain.clone().readable() {
        let n = rest.len().min(d.len() as usize);
        let _ = mem.write_slice(&rest[..n], d.addr());
        rest = &rest[n..];
        let pad = (d.len() as usize - n).min(ZEROS.len());
        if let Some(at) = d.addr().checked_add(n as u64).filter(|_| pad > 0) {
            let _ = mem.write_slice(&ZEROS[..pad], at);
        }
    }
    let Some(chain) = chain_of(0, &descs) else {
        return;
    };
    // The daemon's view: the descriptors as they are when it starts.
    let writable: Vec<(GuestAddress, u32)> = chain
        .clone()
        .writable()
        .map(|d| (d.addr(), d.len()))
        .collect();
    let mut spans: Vec<(u64, u64)> = chain
        .clone()
        .map(|d| (d.addr().0, d.addr().0.saturating_add(u64::from(d.len()))))
        .collect();
    spans.extend_from_slice(&p.tables);
    let crate::guest::Carrier::Chain(d) = &h.via else {
        unreachable!("layouts are descriptor chains")
    };
    let used = d.handle(chain, crate::guest::ring(0), queue_size);
    let room: u64 = writable.iter().map(|w| u64::from(w.1)).sum();
    // (fuzz/regressions/chain/destroy-used-without-writable: DESTROY once reported 16 bytes
    // used where the chain had no room for them.)
    assert!(
        u64::from(used) <= room,
        "{used} bytes used, {room} writable"
    );
    let mut reply = Vec::with_capacity(used as usize);
    for (addr, len) in writable {
        let want = (used as usize - reply.len()).min(len as usize);
        let mut buf = vec![0u8; want];
        if want == 0 || mem.read_slice(&mut buf, addr).is_err() {
            break;
        }
        reply.extend_from_slice(&buf);
    }
    trace(&req, used, &reply);
    // Where descriptors overlap each other or a descriptor table, what the daemon read is not
    // the request and what it wrote cannot be read back in order: only "no panic" holds.
    if reply.len() == used as usize && !overlapping(&mut spans) {
        check_reply(&req, used, &reply);
        h.state.learn(req.opcode, &reply);
    }
}

/// Whether any two of the non-empty `spans` overlap.
fn overlapping(spans: &mut Vec<(u64, u64)>) -> bool {
    spans.retain(|s| s.1 > s.0);
    spans.sort_unstable();
    spans.windows(2).any(|w| w[1].0 < w[0].1)
}

/// The request of a record: a well-formed one (SETLKW made SETLK: nothing here would end its
/// wait), or raw bytes; then perhaps a header that lies about the length.
fn message(state: &mut State, input: &mut Input<'_>) -> Request {
    let mut req = if input.u8() & 1 == 0 {
        state.request(input)
    } else {
        let bytes = input.blob().to_vec();
        // As the daemon reads them: bytes past the end are the zeros that follow the request.
        let field = |at: usize, n: usize| {
            let mut b = [0u8; 8];
            for (i, c) in bytes.iter().skip(at).take(n).enumerate() {
                b[i] = *c;
            }
            u64::from_le_bytes(b)
        };
        Request {
            opcode: field(4, 4) as u32,
            unique: field(8, 8),
            bytes: bytes.clone(),
        }
    };
    if req.opcode == SETLKW && req.bytes.len() >= 8 {
        req.opcode = SETLKW - 1;
        req.bytes[4..8].copy_from_slice(&req.opcode.to_le_bytes());
    }
    if req.bytes.len() >= 4 {
        let len = req.bytes.len() as u32;
        let lie = match input.u8() {
            0..=0xbf => None,
            0xc0 => Some(0),
            0xc1 => Some(len - 1),
            0xc2 => Some(len + 1),
            0xc3 => Some(u32::MAX),
            0xc4 => Some(40),
            _ => Some(input.u32()),
        };
        if let Some(l) = lie {
            req.bytes[..4].copy_from_slice(&l.to_le_bytes());
        }
    }
    req
}

/// Lays descriptors out: sequential areas for the plain cases, and the odd places.
struct Placer {
    /// Request bytes not yet given a readable descriptor.
    unplaced: usize,
    read_at: u64,
    write_at: u64,
    last: u64,
    /// The descriptor tables: the queue's, then each indirect one written.
    tables: Vec<(u64, u64)>,
}

impl Placer {
    fn new(len: usize) -> Self {
        Placer {
            unplaced: len,
            read_at: READ_AREA,
            write_at: WRITE_AREA,
            last: 0,
            tables: vec![(0, u64::from(QUEUE_LEN) * 16)],
        }
    }

    /// A descriptor table (the queue's, or at `depth` 1 an indirect one).
    fn descriptors(&mut self, input: &mut Input<'_>, depth: u8) -> Vec<RawDescriptor> {
        let n = 1 + input.u8() as usize % if depth == 0 { QUEUE_LEN as usize } else { 8 };
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let kind = input.u8();
            let writable = kind & 1 != 0;
            // Tables inside tables are invalid, but made (a few levels deep) so the daemon sees them.
            let indirect = kind & 6 == 6 && self.tables.len() <= 8 && depth < 3;
            let mut flags = if writable {
                VRING_DESC_F_WRITE as u16
            } else {
                0
            };
            let next = if kind & 8 != 0 {
                flags |= VRING_DESC_F_NEXT as u16;
                u16::from(input.u8())
            } else if i + 1 < n {
                flags |= VRING_DESC_F_NEXT as u16;
                i as u16 + 1
            } else {
                0
            };
            if indirect {
                let (addr, len) = self.indirect(input, depth);
                out.push(desc(addr, len, flags | VRING_DESC_F_INDIRECT as u16, next));
                continue;
            }
            let len = self.len(input, writable);
            let addr = self.addr((kind >> 4) & 7, len, writable, input);
            self.last = addr;
            out.push(desc(addr, len, flags, next));
        }
        out
    }

    /// An indirect table written to memory: its address and length.
    fn indirect(&mut self, input: &mut Input<'_>, depth: u8) -> (u64, u32) {
        let at = INDIRECT_AREA + self.tables.len() as u64 * 0x400;
        // A table inside a table is invalid; keep making one so the daemon sees it.
        let table = self.descriptors(input, depth + 1);
        let mut bytes = Vec::with_capacity(table.len() * 16);
        for d in &table {
            bytes.extend_from_slice(vm_memory::ByteValued::as_slice(d));
        }
        let _ = memory().write_slice(&bytes, GuestAddress(at));
        self.tables.push((at, at + bytes.len() as u64));
        let len = match input.u8() {
            0..=0xef => bytes.len() as u32,
            0xf0 => 0,
            0xf1 => bytes.len() as u32 + 8,
            _ => input.u32(),
        };
        let addr = if input.u8() == 0xff { input.u64() } else { at };
        self.tables
            .push((addr, addr.saturating_add(u64::from(len))));
        (addr, len)
    }

    fn len(&mut self, input: &mut Input<'_>, writable: bool) -> u32 {
        match input.u8() {
            b @ 0..=0x7f if !writable => {
                let n = match b {
                    0 => self.unplaced,
                    b => self.unplaced.min(usize::from(b)),
                };
                self.unplaced -= n;
                n as u32
            }
            0 => 0x2000,
            b @ 1..=0x7f => u32::from(b) * 7,
            0x80..=0xef => u32::from(input.u16()),
            0xf0 => 0,
            0xf1 => u32::MAX,
            _ => input.u32(),
        }
    }

    fn addr(&mut self, class: u8, len: u32, writable: bool, input: &mut Input<'_>) -> u64 {
        let region1_end = REGIONS[0].0 + REGIONS[0].1 as u64;
        match class {
            0..=2 => {
                let cursor = if writable {
                    &mut self.write_at
                } else {
                    &mut self.read_at
                };
                let at = *cursor;
                *cursor += u64::from(len.min(0x10_0000)).next_multiple_of(8) + 8;
                at
            }
            3 => region1_end + u64::from(input.u16()),
            4 => region1_end - u64::from(input.u8()),
            5 => REGIONS[1].0 + u64::from(input.u16()) * 16,
            6 => self.last,
            _ => match input.u8() {
                0 => 0,
                1 => u64::MAX - u64::from(input.u8()),
                2 => REGIONS[1].0 + REGIONS[1].1 as u64 - u64::from(input.u8()),
                _ => input.u64(),
            },
        }
    }
}
