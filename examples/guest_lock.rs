//! A small fcntl(2) record-lock tool for the test guest (busybox and util-linux 2.38's flock(1)
//! have none), packed by scripts/build-tools-initrd.sh as /opt/tools/bin/guest_lock:
//!
//! ```text
//! guest_lock FILE try       F_SETLK a write lock on the whole file; exit 0 if granted, 1 if held
//! guest_lock FILE wait      F_SETLKW; exit 0 when granted
//! guest_lock FILE hold PATH F_SETLKW, create PATH, then keep the lock until PATH2 = PATH.done exists
//! guest_lock FILE test      F_GETLK; prints "unlocked" or "locked"
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
        "hold" if args.len() == 4 => {
            if lock(fd, libc::F_SETLKW, libc::F_WRLCK).is_err() {
                std::process::exit(1);
            }
            std::fs::write(&args[3], "").expect("create the signal file");
            let done = format!("{}.done", args[3]);
            let deadline = Instant::now() + Duration::from_secs(60);
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
