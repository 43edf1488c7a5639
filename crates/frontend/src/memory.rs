//! Guest RAM for the fake VM: one memfd-backed region shared with the backend, with a ring area
//! at the bottom and an allocator over the rest. Knows nothing about FUSE.

use std::fs::File;

use vhost::VhostUserMemoryRegionInfo;
use vm_memory::{Bytes, FileOffset, GuestAddress, GuestMemory, GuestMemoryMmap, GuestRegionMmap};

use crate::alloc::RangeAlloc;
use crate::error::{Error, Result};

/// Guest physical address where the single RAM region starts.
pub const RAM_BASE: u64 = 0;

/// Guest memory as the backend sees it, plus an allocator for request buffers.
pub struct GuestRam {
    mem: GuestMemoryMmap<()>,
    alloc: RangeAlloc,
    ring_end: u64,
    size: u64,
}

impl GuestRam {
    /// Create `size` bytes of memfd-backed RAM, reserving `ring_bytes` at the bottom for rings.
    pub fn new(size: usize, ring_bytes: u64) -> Result<Self> {
        let fd = rustix::fs::memfd_create("vufs-guest-ram", rustix::fs::MemfdFlags::CLOEXEC)
            .map_err(|e| Error::io("memfd_create")(e.into()))?;
        rustix::fs::ftruncate(&fd, size as u64).map_err(|e| Error::io("ftruncate")(e.into()))?;
        let file = File::from(fd);
        let region = GuestRegionMmap::from_range(
            GuestAddress(RAM_BASE),
            size,
            Some(FileOffset::new(file, 0)),
        )
        .map_err(|e| Error::Memory(e.to_string()))?;
        let mem = GuestMemoryMmap::from_regions(vec![region])
            .map_err(|e| Error::Memory(e.to_string()))?;
        let ring_end = (RAM_BASE + ring_bytes).next_multiple_of(4096);
        if ring_end >= RAM_BASE + size as u64 {
            return Err(Error::Memory(format!(
                "{size} bytes leave no room after the rings"
            )));
        }
        let alloc = RangeAlloc::new(ring_end, RAM_BASE + size as u64 - ring_end);
        Ok(GuestRam {
            mem,
            alloc,
            ring_end,
            size: size as u64,
        })
    }

    /// The vm-memory view, for ring and buffer access.
    pub fn mem(&self) -> &GuestMemoryMmap<()> {
        &self.mem
    }

    /// The region description sent with VHOST_USER_SET_MEM_TABLE.
    pub fn region_info(&self) -> Result<VhostUserMemoryRegionInfo> {
        let region = self
            .mem
            .iter()
            .next()
            .ok_or(Error::Memory("no region".into()))?;
        VhostUserMemoryRegionInfo::from_guest_region(region)
            .map_err(|e| Error::Memory(e.to_string()))
    }

    /// Frontend (our process) virtual address of a guest address, as SET_VRING_ADDR wants.
    pub fn host_addr(&self, gpa: u64) -> Result<u64> {
        self.mem
            .get_host_address(GuestAddress(gpa))
            .map(|p| p as u64)
            .map_err(|e| Error::Memory(e.to_string()))
    }

    /// Start of the data area (end of the ring area).
    pub fn ring_end(&self) -> u64 {
        self.ring_end
    }

    /// Total RAM size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Reserve a buffer of `len` bytes in the data area.
    pub fn alloc(&mut self, len: u64) -> Option<u64> {
        self.alloc.alloc(len)
    }

    /// Release a buffer obtained from [`GuestRam::alloc`].
    pub fn free(&mut self, gpa: u64, len: u64) {
        self.alloc.free(gpa, len)
    }

    /// Copy `bytes` to guest address `gpa`.
    pub fn write(&self, gpa: u64, bytes: &[u8]) -> Result<()> {
        self.mem
            .write_slice(bytes, GuestAddress(gpa))
            .map_err(|e| Error::Memory(e.to_string()))
    }

    /// Copy `len` bytes from guest address `gpa`.
    pub fn read(&self, gpa: u64, len: usize) -> Result<Vec<u8>> {
        // Fresh zeroed pages come from the allocator cheaply; no extra memset.
        let mut v = vec![0u8; len];
        self.mem
            .read_slice(&mut v, GuestAddress(gpa))
            .map_err(|e| Error::Memory(e.to_string()))?;
        Ok(v)
    }
}
