//! Reads a directory in two parts with a pause between them, for the test guest (a directory
//! read that spans a migration or an upgrade), packed by scripts/build-tools-initrd.sh as
//! /opt/tools/bin/guest_readdir:
//!
//! ```text
//! guest_readdir DIR FIRST STARTED GO
//! ```
//!
//! Opens DIR, reads entries until it has FIRST names (each `getdents64` of the guest's FUSE
//! client is one READDIR request of at most a page), creates the file STARTED, waits until GO
//! exists (at most 15 minutes), reads the rest of the same open directory and prints every
//! name read (`.` and `..` left out), one per line. Exit status 1 and a message on failure.

use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 5 {
        eprintln!("usage: guest_readdir DIR FIRST STARTED GO");
        std::process::exit(2);
    }
    let first: usize = args[2].parse().unwrap_or_else(|_| {
        eprintln!("guest_readdir: FIRST must be a number, not {}", args[2]);
        std::process::exit(2)
    });
    let fail = |what: &str, e: std::io::Error| -> ! {
        eprintln!("guest_readdir: {what}: {e}");
        std::process::exit(1)
    };
    let mut dir = std::fs::read_dir(&args[1]).unwrap_or_else(|e| fail("open", e));
    let mut names = Vec::new();
    while names.len() < first {
        match dir.next() {
            Some(entry) => names.push(entry.unwrap_or_else(|e| fail("read", e)).file_name()),
            None => break,
        }
    }
    std::fs::write(&args[3], "").unwrap_or_else(|e| fail("create STARTED", e));
    let deadline = Instant::now() + Duration::from_secs(15 * 60);
    while !std::path::Path::new(&args[4]).exists() {
        if Instant::now() > deadline {
            eprintln!("guest_readdir: no {} after 15 minutes", args[4]);
            std::process::exit(1);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for entry in dir {
        names.push(
            entry
                .unwrap_or_else(|e| fail("read after the pause", e))
                .file_name(),
        );
    }
    for n in names {
        println!("{}", n.to_string_lossy());
    }
}
