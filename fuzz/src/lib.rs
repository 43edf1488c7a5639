//! Fuzz-target support for union-virtiofsd (run by `scripts/fuzz.sh`): the host side of a
//! session (`env`), FUSE requests made from fuzzer bytes (`input`, `wire`), sessions through
//! the daemon's real request routing (`guest`), descriptor-chain layouts (`layout`) and command
//! lines (`options`). The targets in `fuzz_targets/` are one call each into this crate. Replay
//! an input with `UVFS_FUZZ_TRACE=1 <target binary> <file>` to see one line per request.

#![forbid(unsafe_code)]

pub mod env;
pub mod guest;
pub mod input;
pub mod layout;
pub mod options;
pub mod wire;

#[cfg(test)]
mod seeds;

use std::sync::OnceLock;

use input::Input;

/// Whether the known (reported, not yet fixed) finding `id` may pass: `UVFS_FUZZ_KNOWN` lists
/// such ids, comma-separated, so that a long run gets past a finding it would otherwise stop
/// at every time (`scripts/fuzz.sh` sets it from `fuzz/known.txt`). Unset, every finding stops
/// the run.
pub fn known(id: &str) -> bool {
    static KNOWN: OnceLock<Vec<String>> = OnceLock::new();
    KNOWN
        .get_or_init(|| {
            std::env::var("UVFS_FUZZ_KNOWN")
                .unwrap_or_default()
                .split(',')
                .map(str::to_string)
                .collect()
        })
        .iter()
        .any(|k| k == id)
}

/// The `session` target: an option-set byte, then INIT and requests (see [`wire`]), ending
/// with DESTROY; panics if an invariant of [`guest::Harness::finish`] breaks.
pub fn session(data: &[u8]) {
    let mut input = Input::new(data);
    let opts = input.u8();
    // Every other option set's sessions reach the protocol layer in plain byte buffers.
    guest::Harness::begin(opts, 1020, opts & 0x40 != 0).run(&mut input);
}
