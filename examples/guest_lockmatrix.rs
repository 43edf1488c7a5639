//! The lock-lifetime matrix for the test guest (issue 48; fstests' OFD lock test does the
//! same), packed by scripts/build-tools-initrd.sh as /opt/tools/bin/guest_lockmatrix:
//!
//! ```text
//! guest_lockmatrix DIR
//! guest_lockmatrix ofd-hold FILE PATH
//! ```
//!
//! `ofd-hold` takes an OFD write lock on bytes 0..100 of FILE (F_OFD_SETLKW), closes a dup of
//! its descriptor, creates PATH, waits until PATH.done exists (at most 60 s), then closes and
//! exits: a contender outside the guest sees the lock until then, and not after.
//!
//! For each combination of lock family (OFD, POSIX) × the holder's lock (read, write) × the
//! question asked (a write lock over the held bytes, a read lock over them, a write lock on
//! other bytes) × the holder's open mode (O_RDONLY, O_RDWR) × what happens to the holder's
//! descriptor (a clone with CLONE_FILES closes it, a clone without CLONE_FILES closes its
//! copy, a dup of it is closed), on a file of its own in DIR: a holder process opens the file
//! and takes its lock (F_OFD_SETLKW or F_SETLKW on bytes 0..100), the descriptor event happens,
//! then a second process asks F_OFD_GETLK or F_GETLK (same family); the holder then closes and
//! exits, and the second process asks again and tries to take the lock without waiting. One
//! line per combination, so that the same run on a local filesystem and over the share can be
//! compared line by line. Then a few lines (prefix `x`) ask across families (F_GETLK about an
//! OFD lock, F_OFD_GETLK about a POSIX lock), where the pid reported differs by design over
//! FUSE (docs/src/locks.md).

use std::ffi::CString;

#[derive(Clone, Copy, PartialEq)]
enum Family {
    Ofd,
    Posix,
}

#[derive(Clone, Copy)]
enum Event {
    /// clone(CLONE_FILES): the child closes the shared descriptor.
    CloneFiles,
    /// clone() without CLONE_FILES (a fork): the child closes its copy.
    CloneCopy,
    /// dup() and close the duplicate.
    Dup,
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
}

fn errname(e: i32) -> String {
    match e {
        libc::EAGAIN => "EAGAIN".into(),
        libc::EACCES => "EACCES".into(),
        libc::EBADF => "EBADF".into(),
        libc::EDEADLK => "EDEADLK".into(),
        libc::EINVAL => "EINVAL".into(),
        e => format!("errno{e}"),
    }
}

/// fcntl(2) lock call `cmd` with `kind` on `len` bytes at `start`: the flock back, or errno.
fn fcntl_lock(fd: i32, cmd: i32, kind: i32, start: i64, len: i64) -> Result<libc::flock, i32> {
    // SAFETY: a zeroed flock is a valid value (l_pid 0, as OFD requests require).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start;
    fl.l_len = len;
    // SAFETY: a descriptor and a pointer to a live flock.
    if unsafe { libc::fcntl(fd, cmd, &mut fl) } < 0 {
        return Err(errno());
    }
    Ok(fl)
}

fn cmds(f: Family) -> (i32, i32, i32) {
    match f {
        Family::Ofd => (libc::F_OFD_SETLK, libc::F_OFD_SETLKW, libc::F_OFD_GETLK),
        Family::Posix => (libc::F_SETLK, libc::F_SETLKW, libc::F_GETLK),
    }
}

fn open(path: &CString, flags: i32) -> i32 {
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) };
    assert!(fd >= 0, "open: errno {}", errno());
    fd
}

fn close(fd: i32) {
    // SAFETY: closing a descriptor this process owns (or a stale number: EBADF, ignored).
    unsafe { libc::close(fd) };
}

fn pipe() -> (i32, i32) {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors into a live array of two.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    (fds[0], fds[1])
}

fn put(fd: i32, b: u8) {
    // SAFETY: one byte from a live local.
    assert_eq!(unsafe { libc::write(fd, (&b as *const u8).cast(), 1) }, 1);
}

fn get(fd: i32) -> u8 {
    let mut b = 0u8;
    // SAFETY: one byte into a live local.
    assert_eq!(unsafe { libc::read(fd, (&mut b as *mut u8).cast(), 1) }, 1);
    b
}

/// clone(2) with `flags` | SIGCHLD and no new stack (the child runs on a copy of this one, as
/// after fork); 0 in the child.
fn clone(flags: libc::c_long) -> libc::pid_t {
    // SAFETY: without CLONE_VM the child has its own copy of the address space, so sharing the
    // stack pointer is what fork does; the child only makes system calls and _exits.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags | libc::SIGCHLD as libc::c_long,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    assert!(pid >= 0, "clone: errno {}", errno());
    pid as libc::pid_t
}

fn exit_now(code: i32) -> ! {
    // SAFETY: ends this process without running the parent's atexit handlers twice.
    unsafe { libc::_exit(code) }
}

fn reap(pid: libc::pid_t) {
    let mut st = 0;
    // SAFETY: waiting for a child of this process into a live local.
    let r = unsafe { libc::waitpid(pid, &mut st, 0) };
    assert_eq!(r, pid, "waitpid: errno {}", errno());
}

/// What a GETLK answered, with the pid named relative to the holder.
fn describe(r: Result<libc::flock, i32>, holder: libc::pid_t) -> String {
    let fl = match r {
        Err(e) => return errname(e),
        Ok(fl) => fl,
    };
    let kind = match i32::from(fl.l_type) {
        libc::F_UNLCK => return "unlocked".into(),
        libc::F_RDLCK => "rd",
        libc::F_WRLCK => "wr",
        _ => "?",
    };
    let pid = match fl.l_pid {
        p if p == holder => "holder".to_owned(),
        -1 => "-1".to_owned(),
        p => p.to_string(),
    };
    format!("{kind} {}+{} pid={pid}", fl.l_start, fl.l_len)
}

/// One combination, on `path`: the line to print.
#[allow(clippy::too_many_arguments)]
fn run(
    path: &CString,
    hold: Family,
    ask: Family,
    held: i32,
    (qkind, qstart, qlen): (i32, i64, i64),
    mode: i32,
    event: Event,
) -> String {
    let (ready_r, ready_w) = pipe();
    let (go_r, go_w) = pipe();
    let holder = clone(0);
    if holder == 0 {
        close(ready_r);
        close(go_w);
        let fd = open(path, mode);
        let r = fcntl_lock(fd, cmds(hold).1, held, 0, 100);
        match event {
            Event::Dup => {
                // SAFETY: duplicating a descriptor this process owns.
                let d = unsafe { libc::dup(fd) };
                assert!(d >= 0);
                close(d);
            }
            Event::CloneFiles | Event::CloneCopy => {
                let flags = match event {
                    Event::CloneFiles => libc::CLONE_FILES as libc::c_long,
                    _ => 0,
                };
                let child = clone(flags);
                if child == 0 {
                    close(fd);
                    exit_now(0);
                }
                reap(child);
            }
        }
        put(ready_w, r.err().map_or(0, |e| e as u8));
        get(go_r);
        close(fd);
        exit_now(0);
    }
    close(ready_w);
    close(go_r);
    let locked = match get(ready_r) {
        0 => "ok".to_owned(),
        e => errname(i32::from(e)),
    };
    let (setlk, _, getlk) = cmds(ask);
    let fd = open(path, libc::O_RDWR);
    let during = describe(fcntl_lock(fd, getlk, qkind, qstart, qlen), holder);
    close(fd);
    put(go_w, 1);
    reap(holder);
    close(ready_r);
    close(go_w);
    let fd = open(path, libc::O_RDWR);
    let after = describe(fcntl_lock(fd, getlk, qkind, qstart, qlen), holder);
    let took = match fcntl_lock(fd, setlk, qkind, qstart, qlen) {
        Ok(_) => "ok".to_owned(),
        Err(e) => errname(e),
    };
    close(fd);
    format!("lock={locked} | after-event: {during} | after-exit: {after}, setlk={took}")
}

/// `ofd-hold FILE PATH` (see the module's doc).
fn ofd_hold(file: &str, path: &str) -> ! {
    let fd = open(&CString::new(file).unwrap(), libc::O_RDWR);
    if let Err(e) = fcntl_lock(fd, libc::F_OFD_SETLKW, libc::F_WRLCK, 0, 100) {
        eprintln!("F_OFD_SETLKW: {}", errname(e));
        exit_now(1);
    }
    // SAFETY: duplicating a descriptor this process owns.
    let d = unsafe { libc::dup(fd) };
    assert!(d >= 0);
    close(d);
    std::fs::write(path, b"").expect("announce");
    let done = format!("{path}.done");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !std::path::Path::new(&done).exists() {
        if std::time::Instant::now() > deadline {
            exit_now(9);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    close(fd);
    exit_now(0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 4 && args[1] == "ofd-hold" {
        ofd_hold(&args[2], &args[3]);
    }
    if args.len() != 2 {
        eprintln!("usage: guest_lockmatrix DIR | ofd-hold FILE PATH");
        std::process::exit(2);
    }
    let dir = std::path::Path::new(&args[1]);
    let fam = |f| match f {
        Family::Ofd => "OFD",
        Family::Posix => "POSIX",
    };
    let kinds = [(libc::F_RDLCK, "rd"), (libc::F_WRLCK, "wr")];
    let questions = [
        ((libc::F_WRLCK, 0, 100), "wr@0+100"),
        ((libc::F_RDLCK, 50, 10), "rd@50+10"),
        ((libc::F_WRLCK, 200, 0), "wr@200+0"),
    ];
    let modes = [(libc::O_RDONLY, "ro"), (libc::O_RDWR, "rw")];
    let events = [
        (Event::CloneFiles, "clone-files"),
        (Event::CloneCopy, "clone-copy"),
        (Event::Dup, "dup-close"),
    ];
    let mut n = 0;
    let mut file = || {
        n += 1;
        let p = dir.join(format!("lockmatrix-{n}"));
        std::fs::write(&p, [b'x'; 256]).expect("make the file");
        CString::new(p.into_os_string().into_encoded_bytes()).unwrap()
    };
    for family in [Family::Ofd, Family::Posix] {
        for (held, hname) in kinds {
            for (q, qname) in questions {
                for (mode, mname) in modes {
                    for (event, ename) in events {
                        let line = run(&file(), family, family, held, q, mode, event);
                        println!("{} {hname} {mname} {ename} q={qname}: {line}", fam(family));
                    }
                }
            }
        }
    }
    for (hold, ask) in [(Family::Ofd, Family::Posix), (Family::Posix, Family::Ofd)] {
        for (event, ename) in events {
            let q = (libc::F_WRLCK, 0, 100);
            let line = run(&file(), hold, ask, libc::F_WRLCK, q, libc::O_RDWR, event);
            println!(
                "x {}-held {}-asked wr rw {ename} q=wr@0+100: {line}",
                fam(hold),
                fam(ask)
            );
        }
    }
}
