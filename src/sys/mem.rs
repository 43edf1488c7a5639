//! The allocator: giving memory freed by the daemon back to the system.

/// Returns the allocator's free memory to the system: whole free pages anywhere in its heaps,
/// not only at their tops, where `free` alone gives them back. A walk of every heap: for the
/// rare moments a large part of the daemon's memory has just been freed (the node table
/// shrank, or a few hundred nodes went).
pub fn release_free() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim takes a size and touches only the allocator's own state, under its
    // own locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Sets the allocator up for a daemon that keeps its memory small: one heap shared by all
/// threads (glibc gives each thread that allocates a heap of its own, and each keeps some
/// free memory on top: about 1 MiB over the queue, worker and helper threads) and freed
/// memory at the top of it given back from 64 KiB on (glibc's default is 128 KiB, raised as
/// large blocks are freed: a node table that shrank would stay in the heap). Call before any
/// thread starts; small requests still come from each thread's own cache without a lock.
pub fn configure() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt takes two integers and changes only the allocator's parameters.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 10);
    }
}

/// Drops this process's page-table entries for the pages of guest memory `region` (a shared
/// mapping of the VM's memory file): the pages stay the guest's, in the file, contents
/// unchanged; the next access here faults them back in. What the daemon's RSS counts of
/// guest memory goes, and the page tables that mapped it. Returns false, doing nothing, for
/// a private mapping, where the same call would throw away the region's contents (only the
/// unit tests map guest memory privately).
pub fn unmap_shared_pages<B: vm_memory::bitmap::Bitmap>(
    region: &vm_memory::MmapRegion<B>,
) -> std::io::Result<bool> {
    if region.flags() & libc::MAP_SHARED == 0 || region.size() == 0 {
        return Ok(false);
    }
    // SAFETY: the range is exactly the live mapping `region` owns (it stays mapped while we
    // hold the reference), and it is MAP_SHARED: MADV_DONTNEED only zaps our page-table
    // entries; the pages and their contents stay in the shared file, and any thread touching
    // the range meanwhile or later faults the same pages back in. No Rust reference into the
    // mapping is invalidated (its bytes do not change).
    let r = unsafe { libc::madvise(region.as_ptr().cast(), region.size(), libc::MADV_DONTNEED) };
    if r == 0 {
        Ok(true)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom};
    use vm_memory::bitmap::AtomicBitmap;
    use vm_memory::{FileOffset, MmapRegion};

    /// Whether the page at `addr` is mapped in this process (/proc/self/pagemap, bit 63).
    fn present(addr: *const u8) -> bool {
        let mut pagemap = std::fs::File::open("/proc/self/pagemap").unwrap();
        let page = addr as u64 / 4096;
        pagemap.seek(SeekFrom::Start(page * 8)).unwrap();
        let mut entry = [0u8; 8];
        pagemap.read_exact(&mut entry).unwrap();
        u64::from_le_bytes(entry) >> 63 == 1
    }

    #[test]
    fn shared_pages_leave_the_process_and_come_back_unchanged() {
        let memfd = rustix::fs::memfd_create("guest", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        let file = std::fs::File::from(memfd);
        file.set_len(16 * 4096).unwrap();
        let region =
            MmapRegion::<AtomicBitmap>::from_file(FileOffset::new(file, 0), 16 * 4096).unwrap();
        // SAFETY: the region is ours, 16 pages long, mapped while it lives, and nothing else
        // uses it.
        let bytes = unsafe { std::slice::from_raw_parts_mut(region.as_ptr(), region.size()) };
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i / 4096) as u8 + 1;
        }
        assert!(present(&bytes[5 * 4096]));
        assert!(unmap_shared_pages(&region).unwrap());
        assert!(!present(&bytes[5 * 4096]), "the page is still mapped");
        assert!((0..16).all(|p| bytes[p * 4096 + 7] == p as u8 + 1));
        assert!(
            present(&bytes[5 * 4096]),
            "reading did not map the page again"
        );
    }

    #[test]
    fn private_pages_are_left_alone() {
        let region = MmapRegion::<AtomicBitmap>::new(4 * 4096).unwrap();
        // SAFETY: as above, 4 pages.
        let bytes = unsafe { std::slice::from_raw_parts_mut(region.as_ptr(), region.size()) };
        bytes.fill(9);
        assert!(!unmap_shared_pages(&region).unwrap());
        assert!(present(&bytes[4096]));
        assert!(bytes.iter().all(|b| *b == 9));
    }
}
