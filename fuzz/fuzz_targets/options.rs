//! Command lines, `-o` strings and config files through the config layer (see
//! `uvfs_fuzz::options`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| uvfs_fuzz::options::run(data));
