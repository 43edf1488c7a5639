//! Driver side of one split virtqueue living in [`GuestRam`]: writes descriptors and the avail
//! ring, reaps the used ring, kicks and waits on eventfds. Knows nothing about FUSE.

use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use vhost::VringConfigData;
use vm_memory::{Bytes, GuestAddress};
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use crate::error::{Error, Result};
use crate::memory::GuestRam;

/// `VRING_DESC_F_NEXT`: the chain continues at `next`.
const DESC_F_NEXT: u16 = 1;
/// `VRING_DESC_F_WRITE`: the device writes this buffer.
const DESC_F_WRITE: u16 = 2;
/// `VRING_USED_F_NO_NOTIFY`: the device asks not to be kicked.
const USED_F_NO_NOTIFY: u16 = 1;
/// Alignment we give each ring part; generous so parts never share a page.
const PART_ALIGN: u64 = 4096;

/// One buffer of a descriptor chain, by guest address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Guest physical address (may deliberately point outside guest RAM in raw tests).
    pub addr: u64,
    /// Length in bytes as written into the descriptor.
    pub len: u32,
    /// Device-writable (`VRING_DESC_F_WRITE`).
    pub writable: bool,
}

/// A completion taken off the used ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Used {
    /// Head descriptor index of the completed chain.
    pub head: u16,
    /// Bytes the device says it wrote.
    pub len: u32,
}

/// A driver-owned split virtqueue.
pub struct DriverQueue {
    index: usize,
    size: u16,
    desc: u64,
    avail: u64,
    used: u64,
    free: Vec<u16>,
    chains: Vec<Option<Vec<u16>>>,
    next_avail: u16,
    published: u16,
    last_used: u16,
    event_idx: bool,
    kick: EventFd,
    call: EventFd,
    epoll: Epoll,
    kicks: u64,
}

/// Bytes of guest memory one queue of `size` entries occupies (all three parts, aligned).
pub fn ring_bytes(size: u16) -> u64 {
    let n = u64::from(size);
    (16 * n).next_multiple_of(PART_ALIGN)
        + (6 + 2 * n).next_multiple_of(PART_ALIGN)
        + (6 + 8 * n).next_multiple_of(PART_ALIGN)
}

/// `vring_need_event` from the virtio spec: has `event` been crossed going from `old` to `new`?
fn need_event(event: u16, new: u16, old: u16) -> bool {
    new.wrapping_sub(event).wrapping_sub(1) < new.wrapping_sub(old)
}

impl DriverQueue {
    /// Lay out queue `index` with `size` entries (a power of two) at guest address `base`.
    pub fn new(index: usize, size: u16, base: u64, event_idx: bool) -> Result<Self> {
        if !size.is_power_of_two() {
            return Err(Error::NoRoom("queue size must be a power of two"));
        }
        let n = u64::from(size);
        let desc = base;
        let avail = desc + (16 * n).next_multiple_of(PART_ALIGN);
        let used = avail + (6 + 2 * n).next_multiple_of(PART_ALIGN);
        let kick = EventFd::new(EFD_NONBLOCK).map_err(Error::io("eventfd"))?;
        let call = EventFd::new(EFD_NONBLOCK).map_err(Error::io("eventfd"))?;
        let epoll = Epoll::new().map_err(Error::io("epoll_create"))?;
        epoll
            .ctl(
                ControlOperation::Add,
                std::os::fd::AsRawFd::as_raw_fd(&call),
                EpollEvent::new(EventSet::IN, 0),
            )
            .map_err(Error::io("epoll_ctl"))?;
        Ok(DriverQueue {
            index,
            size,
            desc,
            avail,
            used,
            free: (0..size).rev().collect(),
            chains: vec![None; usize::from(size)],
            next_avail: 0,
            published: 0,
            last_used: 0,
            event_idx,
            kick,
            call,
            epoll,
            kicks: 0,
        })
    }

    /// Queue index as the backend knows it.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Number of ring entries.
    pub fn size(&self) -> u16 {
        self.size
    }

    /// Free descriptors left.
    pub fn free_descriptors(&self) -> usize {
        self.free.len()
    }

    /// Chains made available and not yet seen in the used ring.
    pub fn in_flight(&self) -> usize {
        self.chains.iter().filter(|c| c.is_some()).count()
    }

    /// How many times this queue kicked the backend.
    pub fn kicks(&self) -> u64 {
        self.kicks
    }

    /// The eventfd the backend reads for kicks.
    pub fn kick_fd(&self) -> &EventFd {
        &self.kick
    }

    /// The eventfd the backend writes for used-buffer notifications.
    pub fn call_fd(&self) -> &EventFd {
        &self.call
    }

    /// SET_VRING_ADDR payload: frontend virtual addresses of the three parts.
    pub fn config_data(&self, ram: &GuestRam) -> Result<VringConfigData> {
        Ok(VringConfigData {
            queue_max_size: self.size,
            queue_size: self.size,
            flags: 0,
            desc_table_addr: ram.host_addr(self.desc)?,
            used_ring_addr: ram.host_addr(self.used)?,
            avail_ring_addr: ram.host_addr(self.avail)?,
            log_addr: None,
        })
    }

    fn store16(ram: &GuestRam, gpa: u64, v: u16, order: Ordering) -> Result<()> {
        ram.mem()
            .store(v, GuestAddress(gpa), order)
            .map_err(|e| Error::Memory(e.to_string()))
    }

    fn load16(ram: &GuestRam, gpa: u64, order: Ordering) -> Result<u16> {
        ram.mem()
            .load(GuestAddress(gpa), order)
            .map_err(|e| Error::Memory(e.to_string()))
    }

    /// Write a descriptor chain and put its head in the avail ring (not yet published).
    pub fn add_chain(&mut self, ram: &GuestRam, segs: &[Segment]) -> Result<u16> {
        if segs.is_empty() {
            return Err(Error::NoRoom("a chain needs at least one descriptor"));
        }
        if segs.len() > self.free.len() {
            return Err(Error::NoRoom("not enough free descriptors"));
        }
        let ids: Vec<u16> = (0..segs.len())
            .map(|_| self.free.pop().unwrap_or(0))
            .collect();
        for (i, seg) in segs.iter().enumerate() {
            let mut flags = if seg.writable { DESC_F_WRITE } else { 0 };
            let next = ids.get(i + 1).copied().unwrap_or(0);
            if i + 1 < segs.len() {
                flags |= DESC_F_NEXT;
            }
            let mut d = [0u8; 16];
            d[0..8].copy_from_slice(&seg.addr.to_le_bytes());
            d[8..12].copy_from_slice(&seg.len.to_le_bytes());
            d[12..14].copy_from_slice(&flags.to_le_bytes());
            d[14..16].copy_from_slice(&next.to_le_bytes());
            ram.write(self.desc + 16 * u64::from(ids[i]), &d)?;
        }
        let head = ids[0];
        let slot = u64::from(self.next_avail % self.size);
        Self::store16(ram, self.avail + 4 + 2 * slot, head, Ordering::Relaxed)?;
        self.next_avail = self.next_avail.wrapping_add(1);
        self.chains[usize::from(head)] = Some(ids);
        Ok(head)
    }

    /// Publish the avail index (release) and kick unless the device suppressed notifications.
    pub fn publish(&mut self, ram: &GuestRam) -> Result<()> {
        if self.next_avail == self.published {
            return Ok(());
        }
        Self::store16(ram, self.avail + 2, self.next_avail, Ordering::Release)?;
        // The device reads avail_event/flags after updating them; pair with its full fence.
        fence(Ordering::SeqCst);
        let kick = if self.event_idx {
            let n = u64::from(self.size);
            let avail_event = Self::load16(ram, self.used + 4 + 8 * n, Ordering::Acquire)?;
            need_event(avail_event, self.next_avail, self.published)
        } else {
            Self::load16(ram, self.used, Ordering::Acquire)? & USED_F_NO_NOTIFY == 0
        };
        self.published = self.next_avail;
        if kick {
            self.kicks += 1;
            self.kick.write(1).map_err(Error::io("kick eventfd"))?;
        }
        Ok(())
    }

    /// Take one completion off the used ring, freeing its descriptors.
    pub fn pop_used(&mut self, ram: &GuestRam) -> Result<Option<Used>> {
        let used_idx = Self::load16(ram, self.used + 2, Ordering::Acquire)?;
        if used_idx == self.last_used {
            return Ok(None);
        }
        let slot = u64::from(self.last_used % self.size);
        let elem = ram.read(self.used + 4 + 8 * slot, 8)?;
        let id = u32::from_le_bytes([elem[0], elem[1], elem[2], elem[3]]);
        let len = u32::from_le_bytes([elem[4], elem[5], elem[6], elem[7]]);
        self.last_used = self.last_used.wrapping_add(1);
        if self.event_idx {
            let n = u64::from(self.size);
            Self::store16(
                ram,
                self.avail + 4 + 2 * n,
                self.last_used,
                Ordering::Release,
            )?;
        }
        let head = u16::try_from(id)
            .ok()
            .filter(|&h| h < self.size)
            .ok_or_else(|| Error::BadReply(format!("used id {id} out of range")))?;
        let ids = self.chains[usize::from(head)]
            .take()
            .ok_or_else(|| Error::BadReply(format!("used id {id} was not in flight")))?;
        self.free.extend(ids.into_iter().rev());
        Ok(Some(Used { head, len }))
    }

    /// Wait up to `timeout` for one completion.
    pub fn wait_used(&mut self, ram: &GuestRam, timeout: Duration) -> Result<Used> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(u) = self.pop_used(ram)? {
                return Ok(u);
            }
            if self.event_idx {
                // Ask for a call at the next entry, then re-check to close the race.
                let n = u64::from(self.size);
                Self::store16(
                    ram,
                    self.avail + 4 + 2 * n,
                    self.last_used,
                    Ordering::Release,
                )?;
                fence(Ordering::SeqCst);
                if let Some(u) = self.pop_used(ram)? {
                    return Ok(u);
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout(timeout));
            }
            let mut events = [EpollEvent::default(); 1];
            let ms = i32::try_from(left.as_millis().max(1)).unwrap_or(i32::MAX);
            match self.epoll.wait(ms, &mut events) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io("epoll_wait")(e)),
            }
            // Drain the counter; EAGAIN just means it was already drained.
            let _ = self.call.read();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::need_event;

    #[test]
    fn need_event_matches_spec() {
        assert!(need_event(0, 1, 0));
        assert!(!need_event(1, 1, 0));
        assert!(need_event(65535, 0, 65535));
        assert!(need_event(3, 10, 2));
        assert!(!need_event(10, 10, 2));
    }
}
