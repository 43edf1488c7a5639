//! A small fcntl(2) record-lock tool for the test guest (busybox and util-linux 2.38's flock(1)
//! have none), packed by scripts/build-tools-initrd.sh as /opt/tools/bin/guest_lock:
//!
//! ```text
//! guest_lock FILE try       F_SETLK a write lock on the whole file; exit 0 if granted, 1 if held
//! guest_lock FILE wait      F_SETLKW; exit 0 when granted
//! guest_lock FILE hold PATH F_SETLKW, create PATH, then keep the lock until PATH.done exists (at most 15 min)
//! guest_lock FILE test      F_GETLK; prints "unlocked" or "locked"
//! guest_lock FILE deadlock [FILE2]
//!                           two processes, each holding one byte (byte 0 of FILE, byte 1 of
//!                           FILE2 or FILE), each waiting (F_SETLKW) for the other's; prints
//!                           whom F_GETLK names as the holder and how each wait ended
//! ```

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

fn lock(fd: i32, cmd: i32, kind: i32) -> std::io::Result<libc::flock> {
    // SAFETY: a zeroed flock is a valid value; the fields that matter are set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: a valid descriptor and a pointer to a live flock.
    if unsafe { libc::fcntl(fd, cmd, &mut fl) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fl)
}

/// A lock on the `len` bytes at `start` (`kind` F_RDLCK, F_WRLCK or F_UNLCK; len 0: to the
/// end), its errno on failure.
fn lock_range(fd: i32, cmd: i32, kind: i32, start: i64, len: i64) -> Result<libc::flock, i32> {
    // SAFETY: a zeroed flock is a valid value; the fields that matter are set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start;
    fl.l_len = len;
    // SAFETY: a valid descriptor and a pointer to a live flock.
    if unsafe { libc::fcntl(fd, cmd, &mut fl) } < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(-1));
    }
    Ok(fl)
}

/// How a wait ended, as the test compares it.
fn outcome(r: Result<libc::flock, i32>) -> &'static str {
    match r {
        Ok(_) => "granted",
        Err(libc::EDEADLK) => "EDEADLK",
        Err(_) => "other error",
    }
}

fn pipe() -> (i32, i32) {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors into a live array of two.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    (fds[0], fds[1])
}

fn send(fd: i32, b: u8) {
    // SAFETY: writes one byte from a live buffer.
    let n = unsafe { libc::write(fd, [b].as_ptr().cast(), 1) };
    assert_eq!(n, 1, "pipe write");
}

fn recv(fd: i32) -> u8 {
    let mut b = [0u8];
    // SAFETY: reads one byte into a live buffer.
    let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) };
    assert_eq!(n, 1, "pipe read");
    b[0]
}

/// Two processes close a cycle: the parent holds byte 0 of `a`, the child byte 1 of `b`, then
/// each waits for the other's. Whichever asks second closes the cycle and must get EDEADLK;
/// it then lets go, so the other is granted. Pipes order the steps (no sleeps).
fn deadlock(a: i32, b: i32) -> i32 {
    let (to_parent_r, to_parent_w) = pipe();
    let (to_child_r, to_child_w) = pipe();
    lock_range(a, libc::F_SETLK, libc::F_WRLCK, 0, 1).expect("parent's first lock");
    // SAFETY: single-threaded here; the child only makes system calls and exits.
    let child = unsafe { libc::fork() };
    if child == 0 {
        lock_range(b, libc::F_SETLK, libc::F_WRLCK, 1, 1).expect("child's first lock");
        send(to_parent_w, 1);
        recv(to_child_r);
        let r = lock_range(a, libc::F_SETLKW, libc::F_WRLCK, 0, 1);
        send(to_parent_w, outcome(r).as_bytes()[0]);
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(0) };
    }
    recv(to_parent_r);
    let holder = lock_range(b, libc::F_GETLK, libc::F_WRLCK, 1, 1).expect("F_GETLK");
    println!(
        "F_GETLK names {}",
        if holder.l_pid == child {
            "the child"
        } else {
            "another process"
        }
    );
    send(to_child_w, 1);
    let mine = lock_range(b, libc::F_SETLKW, libc::F_WRLCK, 1, 1);
    if mine.is_err() {
        // Let the child through.
        lock_range(a, libc::F_SETLK, libc::F_UNLCK, 0, 0).expect("unlock");
    }
    let theirs = match recv(to_parent_r) {
        b'g' => "granted",
        b'E' => "EDEADLK",
        _ => "other error",
    };
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(child, &mut status, 0) };
    let mut ends = [outcome(mine), theirs];
    ends.sort();
    println!("waits ended: {} and {}", ends[0], ends[1]);
    0
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: guest_lock FILE try|wait|test|hold PATH");
        std::process::exit(2);
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&args[1])
        .unwrap_or_else(|e| {
            eprintln!("{}: {e}", args[1]);
            std::process::exit(2)
        });
    let fd = file.as_raw_fd();
    let code = match args[2].as_str() {
        "try" => match lock(fd, libc::F_SETLK, libc::F_WRLCK) {
            Ok(_) => 0,
            Err(e) => {
                println!("held: {e}");
                1
            }
        },
        "wait" => lock(fd, libc::F_SETLKW, libc::F_WRLCK).map_or(1, |_| 0),
        "test" => match lock(fd, libc::F_GETLK, libc::F_WRLCK) {
            Ok(fl) if i32::from(fl.l_type) == libc::F_UNLCK => {
                println!("unlocked");
                0
            }
            Ok(_) => {
                println!("locked");
                0
            }
            Err(e) => {
                eprintln!("F_GETLK: {e}");
                1
            }
        },
        "deadlock" => {
            let other = match args.get(3) {
                Some(p) => std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(p)
                    .expect("open FILE2"),
                None => file.try_clone().expect("dup"),
            };
            deadlock(fd, other.as_raw_fd())
        }
        "hold" if args.len() == 4 => {
            if lock(fd, libc::F_SETLKW, libc::F_WRLCK).is_err() {
                std::process::exit(1);
            }
            std::fs::write(&args[3], "").expect("create the signal file");
            let done = format!("{}.done", args[3]);
            let deadline = Instant::now() + Duration::from_secs(900);
            while !std::path::Path::new(&done).exists() {
                if Instant::now() > deadline {
                    std::process::exit(9);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            0
        }
        _ => 2,
    };
    std::process::exit(code);
}
