//! Descriptor-chain layouts through the daemon's request routing (see `uvfs_fuzz::layout`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| uvfs_fuzz::layout::run(data));
