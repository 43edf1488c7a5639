//! Moving frames through a [`Device`]'s queues: place buffers in guest RAM, queue chains, reap
//! completions (in any order), pipelining. Knows frame bytes, not FUSE operations.

use std::time::Duration;

use crate::device::{Device, REQUEST_QUEUE};
use crate::error::{Error, Result};
use crate::request::{
    FuseReply, FuseRequest, RawCompletion, RawSegment, IN_HEADER_LEN, OUT_HEADER_LEN,
};
use crate::vring::Segment;

/// Identifies one queued chain until it completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ticket {
    /// Queue index the chain went to.
    pub queue: usize,
    /// Driver-wide sequence number (also the FUSE `unique` for [`FuseRequest`]s).
    pub seq: u64,
}

/// Bookkeeping for a chain in flight.
pub(crate) struct Pending {
    seq: u64,
    /// Every allocation (gpa, len) to free on completion.
    allocs: Vec<(u64, u64)>,
    /// Writable buffers (gpa, len) to read back, in chain order.
    outs: Vec<(u64, u32)>,
    /// Read back only `used_len` bytes (normal requests) instead of whole buffers.
    trim: bool,
}

impl Device {
    fn alloc_buf(&mut self, len: u64, allocs: &mut Vec<(u64, u64)>) -> Result<u64> {
        match self.ram.alloc(len) {
            Some(gpa) => {
                allocs.push((gpa, len));
                Ok(gpa)
            }
            None => {
                for (g, l) in allocs.drain(..) {
                    self.ram.free(g, l);
                }
                Err(Error::NoRoom("guest RAM data area full"))
            }
        }
    }

    fn check_queue(&self, queue: usize) -> Result<()> {
        if queue < self.queues.len() {
            Ok(())
        } else {
            Err(Error::NoSuchQueue(queue))
        }
    }

    fn enqueue(&mut self, queue: usize, segs: &[Segment], p: Pending) -> Result<Ticket> {
        let seq = p.seq;
        let head = match self.queues[queue].add_chain(&self.ram, segs) {
            Ok(h) => h,
            Err(e) => {
                for (g, l) in &p.allocs {
                    self.ram.free(*g, *l);
                }
                return Err(e);
            }
        };
        self.pending[queue].insert(head, p);
        Ok(Ticket { queue, seq })
    }

    /// Queue a FUSE request on `queue` without kicking; see [`Device::kick`].
    pub fn queue_request(&mut self, queue: usize, req: &FuseRequest) -> Result<Ticket> {
        self.check_queue(queue)?;
        self.seq += 1;
        let seq = self.seq;
        let head = req.head_bytes(seq);
        let mut allocs = Vec::new();
        let mut segs = Vec::with_capacity(3);
        let linux = self.linux_layout;
        let page = |len: usize| if linux { 4096 } else { len.max(1) };
        let g = self.alloc_buf(head.len() as u64, &mut allocs)?;
        self.ram.write(g, &head)?;
        let split = if linux && head.len() > IN_HEADER_LEN {
            IN_HEADER_LEN
        } else {
            head.len()
        };
        for (at, len) in [(0, split), (split, head.len() - split)] {
            if len > 0 {
                segs.push(Segment {
                    addr: g + at as u64,
                    len: len as u32,
                    writable: false,
                });
            }
        }
        if let Some(data) = req.data.as_ref().filter(|d| !d.is_empty()) {
            let g = self.alloc_buf(data.len() as u64, &mut allocs)?;
            self.ram.write(g, data)?;
            let step = page(data.len());
            for at in (0..data.len()).step_by(step) {
                segs.push(Segment {
                    addr: g + at as u64,
                    len: step.min(data.len() - at) as u32,
                    writable: false,
                });
            }
        }
        let mut outs = Vec::new();
        if req.reply_capacity > 0 {
            let cap = req.reply_capacity as usize;
            let g = self.alloc_buf(cap as u64, &mut allocs)?;
            let mut pieces = vec![(0, cap)];
            if linux && cap > OUT_HEADER_LEN {
                pieces = vec![(0, OUT_HEADER_LEN)];
                let rest = cap - OUT_HEADER_LEN;
                for at in (0..rest).step_by(4096) {
                    pieces.push((OUT_HEADER_LEN + at, 4096.min(rest - at)));
                }
            }
            for (at, len) in pieces {
                segs.push(Segment {
                    addr: g + at as u64,
                    len: len as u32,
                    writable: true,
                });
                outs.push((g + at as u64, len as u32));
            }
        }
        let p = Pending {
            seq,
            allocs,
            outs,
            trim: true,
        };
        self.enqueue(queue, &segs, p)
    }

    /// Queue an arbitrary descriptor chain on `queue` without kicking.
    pub fn queue_raw(&mut self, queue: usize, chain: &[RawSegment]) -> Result<Ticket> {
        self.check_queue(queue)?;
        self.seq += 1;
        let mut allocs = Vec::new();
        let mut outs = Vec::new();
        let mut segs = Vec::with_capacity(chain.len());
        for s in chain {
            let seg = match s {
                RawSegment::In(bytes) => {
                    let g = self.alloc_buf(bytes.len() as u64, &mut allocs)?;
                    self.ram.write(g, bytes)?;
                    Segment {
                        addr: g,
                        len: bytes.len() as u32,
                        writable: false,
                    }
                }
                RawSegment::Out(len) => {
                    let g = self.alloc_buf(u64::from(*len), &mut allocs)?;
                    self.ram.write(g, &vec![0u8; *len as usize])?;
                    outs.push((g, *len));
                    Segment {
                        addr: g,
                        len: *len,
                        writable: true,
                    }
                }
                RawSegment::Addr {
                    addr,
                    len,
                    writable,
                } => Segment {
                    addr: *addr,
                    len: *len,
                    writable: *writable,
                },
            };
            segs.push(seg);
        }
        let p = Pending {
            seq: self.seq,
            allocs,
            outs,
            trim: false,
        };
        self.enqueue(queue, &segs, p)
    }

    /// Publish queued chains on `queue` and notify the backend if it wants to be notified.
    pub fn kick(&mut self, queue: usize) -> Result<()> {
        self.check_queue(queue)?;
        self.queues[queue].publish(&self.ram)
    }

    fn complete(
        &mut self,
        queue: usize,
        head: u16,
        used_len: u32,
    ) -> Result<(Ticket, RawCompletion)> {
        let p = self.pending[queue]
            .remove(&head)
            .ok_or_else(|| Error::BadReply(format!("completion for unknown head {head}")))?;
        let mut left = used_len as usize;
        let mut out = Vec::with_capacity(p.outs.len());
        for (g, len) in &p.outs {
            let n = if p.trim {
                left.min(*len as usize)
            } else {
                *len as usize
            };
            left = left.saturating_sub(*len as usize);
            out.push(self.ram.read(*g, n)?);
        }
        for (g, l) in p.allocs {
            self.ram.free(g, l);
        }
        Ok((
            Ticket { queue, seq: p.seq },
            RawCompletion { used_len, out },
        ))
    }

    /// Reap one completion from `queue` without blocking.
    pub fn try_reap(&mut self, queue: usize) -> Result<Option<(Ticket, RawCompletion)>> {
        self.check_queue(queue)?;
        if let Some(i) = self.stash.iter().position(|(t, _)| t.queue == queue) {
            return Ok(Some(self.stash.swap_remove(i)));
        }
        match self.queues[queue].pop_used(&self.ram)? {
            Some(u) => self.complete(queue, u.head, u.len).map(Some),
            None => Ok(None),
        }
    }

    /// Wait up to `timeout` for any completion on `queue`.
    pub fn reap(&mut self, queue: usize, timeout: Duration) -> Result<(Ticket, RawCompletion)> {
        if let Some(c) = self.try_reap(queue)? {
            return Ok(c);
        }
        let u = self.queues[queue].wait_used(&self.ram, timeout)?;
        self.complete(queue, u.head, u.len)
    }

    /// Wait for the completion of `t`, keeping other completions for later reaps.
    pub fn wait(&mut self, t: Ticket, timeout: Duration) -> Result<RawCompletion> {
        if let Some(i) = self.stash.iter().position(|(s, _)| *s == t) {
            return Ok(self.stash.swap_remove(i).1);
        }
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let u = self.queues[t.queue]
                .wait_used(&self.ram, left)
                .map_err(|e| match e {
                    Error::Timeout(_) => Error::Timeout(timeout),
                    e => e,
                })?;
            let (got, c) = self.complete(t.queue, u.head, u.len)?;
            if got == t {
                return Ok(c);
            }
            self.stash.push((got, c));
        }
    }

    /// Chains queued on `queue` and not yet completed (including ones the backend dropped).
    pub fn in_flight(&self, queue: usize) -> usize {
        self.pending.get(queue).map_or(0, |p| p.len())
    }

    /// Send one request on the first request queue and wait for its reply.
    pub fn send(&mut self, req: &FuseRequest) -> Result<FuseReply> {
        self.send_on(REQUEST_QUEUE, req)
    }

    /// Send one request on `queue` and wait for its reply.
    pub fn send_on(&mut self, queue: usize, req: &FuseRequest) -> Result<FuseReply> {
        let t = self.queue_request(queue, req)?;
        self.kick(queue)?;
        Ok(self.wait(t, self.timeout)?.into_reply())
    }

    /// Send a hand-made chain on `queue` and wait for it (with the default timeout).
    pub fn send_raw(&mut self, queue: usize, chain: &[RawSegment]) -> Result<RawCompletion> {
        let t = self.queue_raw(queue, chain)?;
        self.kick(queue)?;
        self.wait(t, self.timeout)
    }

    /// Pipeline `reqs` on the first request queue with up to `depth` in flight, calling
    /// `on_reply(index, reply)` as each completes (in completion order).
    pub fn submit_many<I, F>(&mut self, reqs: I, depth: usize, mut on_reply: F) -> Result<()>
    where
        I: IntoIterator<Item = FuseRequest>,
        F: FnMut(usize, FuseReply) -> Result<()>,
    {
        let q = REQUEST_QUEUE;
        let depth = depth.clamp(1, usize::from(self.queue_size()));
        let mut index_of = std::collections::HashMap::new();
        let mut it = reqs.into_iter().enumerate().peekable();
        loop {
            let mut queued = false;
            while index_of.len() < depth {
                let Some((i, req)) = it.peek() else { break };
                match self.queue_request(q, req) {
                    Ok(t) => {
                        index_of.insert(t.seq, *i);
                        queued = true;
                        it.next();
                    }
                    Err(Error::NoRoom(_)) if !index_of.is_empty() => break,
                    Err(e) => return Err(e),
                }
            }
            if queued {
                self.kick(q)?;
            }
            if index_of.is_empty() {
                return Ok(());
            }
            let mut next = Some(self.reap(q, self.timeout)?);
            while let Some((t, c)) = next {
                if let Some(i) = index_of.remove(&t.seq) {
                    on_reply(i, c.into_reply())?;
                }
                next = self.try_reap(q)?;
            }
        }
    }
}
