//! FUSE sessions through the daemon's request routing over real branches (see
//! `uvfs_fuzz::session`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| uvfs_fuzz::session(data));
