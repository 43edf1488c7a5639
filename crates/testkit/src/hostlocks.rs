//! What the host kernel says about locks: the entries of /proc/locks on one filesystem or file,
//! the locks a process owns through its descriptors (/proc/PID/fdinfo), a host process's own
//! fcntl(2) attempt, and a bounded wait for a file a guest makes in the share. A lock this
//! process takes is the whole process's: tests that take them use files of their own.

use std::os::fd::AsRawFd;
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

/// The locks that processes `pids` own through their descriptors on the file `path`: the
/// `lock:` lines of /proc/PID/fdinfo/FD for each such descriptor (flock and OFD locks are
/// listed on the descriptor of the open file description that owns them, classic POSIX locks
/// on every descriptor of the owning process). Unlike /proc/locks, whose holder of an OFD lock
/// is `-1`, this names who holds it.
pub fn owned_through(pids: &[u32], path: &Path) -> Vec<String> {
    let st = std::fs::metadata(path).unwrap();
    let mut lines = Vec::new();
    for pid in pids {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            // Opening the magic link reaches the file itself, wherever the process sees it.
            let Ok(m) = std::fs::metadata(fd.path()) else {
                continue;
            };
            if (m.dev(), m.ino()) != (st.dev(), st.ino()) {
                continue;
            }
            let info = format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy());
            let Ok(info) = std::fs::read_to_string(info) else {
                continue;
            };
            lines.extend(
                info.lines()
                    .filter_map(|l| l.strip_prefix("lock:"))
                    .map(|l| l.trim().to_owned()),
            );
        }
    }
    lines
}

/// A classic POSIX lock (fcntl F_SETLK, `kind` F_RDLCK or F_WRLCK) on the `len` bytes at
/// `start` (len 0: to the end) of `path`, tried by this host process on a descriptor of its
/// own and let go at once: `Ok` if it was granted, else the errno (EAGAIN or EACCES while
/// another holder has a conflicting lock).
pub fn try_posix_lock(path: &Path, kind: i32, start: i64, len: i64) -> Result<(), i32> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    // Closing the descriptor lets go of this process's locks on the file.
    posix_lock(&file, kind, start, len)
}

/// The same lock taken through `file` and held by this host process (what any host program
/// holds) until it unlocks the range or closes a descriptor of the file: `Ok` if granted,
/// else the errno.
pub fn posix_lock(file: &std::fs::File, kind: i32, start: i64, len: i64) -> Result<(), i32> {
    // SAFETY: a zeroed flock is a valid value; the fields that matter are set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start;
    fl.l_len = len;
    // SAFETY: a valid descriptor and a pointer to a live flock.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &fl) } < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(-1));
    }
    Ok(())
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
