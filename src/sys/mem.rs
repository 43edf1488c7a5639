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
