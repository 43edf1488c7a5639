//! What the host kernel says about locks: the entries of /proc/locks on one filesystem, and a
//! bounded wait for a file a guest makes in the share. Shared by the lock test crates that
//! include it with `#[path = "support/hostlocks.rs"] mod hostlocks;`.

// Each test crate uses a different subset of this module.
#![allow(dead_code)]

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// The /proc/locks lines (POSIX, OFD and flock locks, held or waited for) on any file of the
/// filesystem that holds `path`.
pub fn locks_on_fs(path: &Path) -> Vec<String> {
    let dev = std::fs::metadata(path).unwrap().dev();
    proc_locks(|file| file.starts_with(&dev_prefix(dev)))
}

/// The /proc/locks lines on the file `path`.
pub fn locks_on_file(path: &Path) -> Vec<String> {
    let st = std::fs::metadata(path).unwrap();
    let id = format!("{}{}", dev_prefix(st.dev()), st.ino());
    proc_locks(|file| file == id)
}

/// /proc/locks names a file as MAJOR:MINOR:INODE, the device numbers in hex.
fn dev_prefix(dev: u64) -> String {
    format!("{:02x}:{:02x}:", libc::major(dev), libc::minor(dev))
}

fn proc_locks(on: impl Fn(&str) -> bool) -> Vec<String> {
    std::fs::read_to_string("/proc/locks")
        .unwrap()
        .lines()
        .filter(|l| l.split_whitespace().any(&on))
        .map(str::to_owned)
        .collect()
}

/// Waits up to `secs` seconds for `path` to exist (a guest makes it); panics after that.
pub fn wait_for(path: &Path, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "no {} after {secs} s",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
