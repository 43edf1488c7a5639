//! The allocator: giving memory freed by the daemon back to the system.

/// Returns the allocator's free memory to the system: whole free pages anywhere in its heaps,
/// not only at their tops, where `free` alone gives them back. A walk of every heap: for the
/// rare moments a large part of the daemon's memory has just been freed (the node table
/// shrank).
pub fn release_free() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim takes a size and touches only the allocator's own state, under its
    // own locks.
    unsafe {
        libc::malloc_trim(0);
    }
}
