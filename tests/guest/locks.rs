//! Host-side locks seen from real guests (QEMU, Debian kernel, util-linux's flock(1) and the
//! project's fcntl tool examples/guest_lock.rs): two guests, each with its own daemon over the
//! same branch, see each other's flock and fcntl record locks (a non-blocking attempt fails
//! while the other holds it, F_GETLK reports it, a waiting one succeeds once it lets go), and a
//! guest and a host process see each other's locks in both directions. The parties
//! wait for each other through files in the share, always with a deadline. The lifetime of
//! OFD and POSIX locks (examples/guest_lockmatrix.rs: clones with and without CLONE_FILES,
//! dup and close, the holder's exit) is the guest's own tmpfs's, line for line.

use std::os::fd::AsRawFd;
use std::path::Path;

use testkit::guest::{Backend, Guest, Mode};
use testkit::tmpfs::Tmpfs;
use testkit::{guest, hostlocks};

/// Scenario helper: wait (up to 60 s) until a file exists in the share.
const WAIT_FOR: &str = r#"export PATH=/opt/tools/bin:$PATH
wait_for() { i=0; while [ ! -e "$1" ]; do i=$((i+1)); [ $i -lt 600 ] || fail "no $1 after 60 s"; sleep 0.1; done; }
"#;

fn guest() -> Guest {
    Guest {
        extra_initrd: vec![guest::tools_initrd()],
        ..Guest::default()
    }
}

fn backend(dir: &Path) -> Backend {
    Backend::union(&[(dir, Mode::Rw)], &["-o", "minfreespace=1M"])
}

#[test]
fn two_guests_through_two_daemons_see_each_others_locks() {
    let t = Tmpfs::new("16M");
    std::fs::write(t.path().join("f"), "shared\n").unwrap();
    let holder = format!(
        r#"{WAIT_FOR}
flock -x f -c 'touch a-holds; wait_for() {{ i=0; while [ ! -e "$1" ]; do i=$((i+1)); [ $i -lt 600 ] || exit 9; sleep 0.1; done; }}; wait_for b-tried'
echo "holder released: $?"
"#
    );
    let other = format!(
        r#"{WAIT_FOR}
wait_for a-holds
if flock -n -x f true; then fail "got the lock the other guest holds"; fi
flock -n -s f true && fail "got a shared lock beside the other guest's exclusive one"
echo "conflict seen"
touch b-tried
flock -x -w 60 f -c 'echo "got it after the other guest let go"'
"#
    );
    let runs = two_guests(t.path(), &holder, &other);
    assert!(
        runs[0].console.contains("holder released: 0"),
        "{}",
        runs[0].transcript()
    );
    assert!(
        runs[1].console.contains("conflict seen"),
        "{}",
        runs[1].transcript()
    );
    assert!(
        runs[1]
            .console
            .contains("got it after the other guest let go"),
        "{}",
        runs[1].transcript()
    );
}

/// Two guests at once, each with its own daemon over `dir`, running `first` and `second`;
/// both must succeed.
fn two_guests(dir: &Path, first: &str, second: &str) -> Vec<guest::GuestRun> {
    let (ba, bb) = (backend(dir), backend(dir));
    let (ga, gb) = (guest(), guest());
    let runs = guest::run_together(&[(&ba, &ga, first), (&bb, &gb, second)]);
    for r in &runs {
        r.assert_success();
    }
    runs
}

/// Waits up to 120 s for `path` to exist (the guest makes it).
fn wait_for(path: &Path) {
    hostlocks::wait_for(path, 120);
}

fn try_flock(f: &std::fs::File, op: i32) -> i32 {
    // SAFETY: flock on a valid descriptor.
    if unsafe { libc::flock(f.as_raw_fd(), op | libc::LOCK_NB) } == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
    }
}

#[test]
fn a_guest_and_a_host_process_see_each_others_locks() {
    let t = Tmpfs::new("16M");
    let path = t.path().join("f");
    std::fs::write(&path, "shared\n").unwrap();
    let file = std::fs::File::open(&path).unwrap();
    // The host holds an exclusive flock until the guest has tried.
    assert_eq!(try_flock(&file, libc::LOCK_EX), 0);
    // Once the guest holds the lock, a host process's attempt must fail.
    let root = t.path().to_owned();
    let host = std::thread::spawn(move || {
        let other = std::fs::File::open(root.join("f")).unwrap();
        wait_for(&root.join("guest-holds"));
        let got = try_flock(&other, libc::LOCK_SH);
        std::fs::write(root.join("host-tried"), got.to_string()).unwrap();
        got
    });
    let scenario = format!(
        r#"{WAIT_FOR}
if flock -n -x f true; then fail "got the lock the host holds"; fi
echo "host lock seen"
touch guest-tried
flock -x -w 60 f -c 'touch guest-holds; i=0; while [ ! -e host-tried ]; do i=$((i+1)); [ $i -lt 600 ] || exit 9; sleep 0.1; done'
echo "guest lock released: $?"
"#
    );
    // The guest's first attempt fails while the host holds the lock; then the host lets go.
    let releaser = {
        let root = t.path().to_owned();
        std::thread::spawn(move || {
            wait_for(&root.join("guest-tried"));
            // SAFETY: flock on a valid descriptor.
            assert_eq!(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) }, 0);
        })
    };
    let run = guest::run_scenario(&backend(t.path()), &guest(), &scenario);
    run.assert_success();
    releaser.join().unwrap();
    let host_saw = host.join().unwrap();
    assert_eq!(host_saw, libc::EWOULDBLOCK, "{}", run.transcript());
    assert!(
        run.console.contains("host lock seen"),
        "{}",
        run.transcript()
    );
    assert!(
        run.console.contains("guest lock released: 0"),
        "{}",
        run.transcript()
    );
}

#[test]
fn fcntl_record_locks_across_two_guests_and_the_host() {
    let t = Tmpfs::new("16M");
    let path = t.path().join("f");
    std::fs::write(&path, "shared\n").unwrap();
    let holder = format!(
        r#"{WAIT_FOR}
guest_lock f hold a-holds
echo "holder done: $?"
"#
    );
    let other = format!(
        r#"{WAIT_FOR}
wait_for a-holds
if guest_lock f try; then fail "got the record lock the other guest holds"; fi
expect_eq "$(guest_lock f test)" locked "F_GETLK sees the other guest's lock"
touch a-holds.done
guest_lock f wait
echo "waited and got it"
"#
    );
    let runs = two_guests(t.path(), &holder, &other);
    assert!(
        runs[0].console.contains("holder done: 0"),
        "{}",
        runs[0].transcript()
    );
    assert!(
        runs[1].console.contains("waited and got it"),
        "{}",
        runs[1].transcript()
    );

    // A host process's classic POSIX lock stops the guest; once released, the guest gets it.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    // SAFETY: a zeroed flock is valid; then a write lock on the whole file.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    // SAFETY: a valid descriptor and flock.
    let r = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &fl) };
    assert_eq!(r, 0);
    let root = t.path().to_owned();
    let releaser = std::thread::spawn(move || {
        wait_for(&root.join("guest-tried"));
        drop(file); // closing releases this process's POSIX locks on the file
    });
    let scenario = format!(
        r#"{WAIT_FOR}
if guest_lock f try; then fail "got the record lock the host holds"; fi
touch guest-tried
guest_lock f wait
echo "host lock released, guest got it"
"#
    );
    let run = guest::run_scenario(&backend(t.path()), &guest(), &scenario);
    run.assert_success();
    releaser.join().unwrap();
    assert!(run.console.contains("guest got it"), "{}", run.transcript());
}

/// Issue 48 (fstests' OFD lock test): who a lock belongs to and when it ends, over the share
/// exactly as on the guest's own tmpfs, for every combination of OFD/POSIX × read/write lock
/// × conflicting or not × O_RDONLY/O_RDWR × clone with CLONE_FILES / clone without / dup and
/// close: asked with GETLK after the descriptor event, then after the holder closed and
/// exited, when a non-blocking lock must be granted at once. Asking across families differs
/// only in the pid, as docs/src/locks.md explains from the guest kernel's code.
#[test]
fn lock_lifetimes_over_the_share_match_the_guests_tmpfs() {
    let t = Tmpfs::new("16M");
    let scenario = r#"export PATH=/opt/tools/bin:$PATH
mkdir -p /tmp/local && mount -t tmpfs local /tmp/local || fail "tmpfs"
guest_lockmatrix /tmp/local > /tmp/local.txt || fail "matrix on tmpfs"
mkdir m && guest_lockmatrix m > /tmp/share.txt || fail "matrix over the share"
echo "=== local"; cat /tmp/local.txt; echo "=== share"; cat /tmp/share.txt; echo "=== end"
"#;
    let run = guest::run_scenario(&backend(t.path()), &guest(), scenario);
    run.assert_success();
    let section = |from: &str, to: &str| -> Vec<String> {
        let c = &run.console;
        let a = c
            .find(from)
            .unwrap_or_else(|| panic!("{}", run.transcript()))
            + from.len();
        let b = a + c[a..].find(to).unwrap();
        c[a..b]
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("OFD ") || l.starts_with("POSIX ") || l.starts_with("x "))
            .map(str::to_owned)
            .collect()
    };
    let local = section("=== local", "=== share");
    let share = section("=== share", "=== end");
    let (lx, lm): (Vec<_>, Vec<_>) = local.iter().partition(|l| l.starts_with("x "));
    let (sx, sm): (Vec<_>, Vec<_>) = share.iter().partition(|l| l.starts_with("x "));
    assert_eq!(lm.len(), 72, "{}", run.transcript());
    for (l, s) in lm.iter().zip(&sm) {
        assert_eq!(l, s, "over the share vs the guest's tmpfs");
    }
    assert_eq!(lm.len(), sm.len());
    // Asked across families, the pid differs and nothing else: F_GETLK about an OFD lock
    // names its taker over FUSE (-1 locally), F_OFD_GETLK about a POSIX lock says -1 over FUSE
    // (the holder locally).
    assert_eq!(lx.len(), 6, "{}", run.transcript());
    for (l, s) in lx.iter().zip(&sx) {
        let over_fuse = if l.contains("OFD-held") {
            l.replace("pid=-1", "pid=holder")
        } else {
            l.replace("pid=holder", "pid=-1")
        };
        assert_eq!(&over_fuse, *s, "across families");
    }
    assert_eq!(
        hostlocks::locks_on_fs(t.path()),
        Vec::<String>::new(),
        "no lock left on the host"
    );
}

/// Issue 48's leak, seen from the host: a guest's OFD write lock is a lock on the host file
/// (a host process cannot take the range, the host's /proc/locks lists it) while the guest's
/// description is open, closing a dup of it changes nothing, and once the guest closed it and
/// the holder exited, the host process takes the range at once and /proc/locks is empty.
#[test]
fn a_guest_ofd_lock_ends_on_the_host_when_its_description_closes() {
    let t = Tmpfs::new("16M");
    let path = t.path().join("f");
    std::fs::write(&path, vec![b'x'; 256]).unwrap();
    let root = t.path().to_owned();
    let host = std::thread::spawn(move || {
        let f = root.join("f");
        wait_for(&root.join("a-holds"));
        let during = (
            hostlocks::try_posix_lock(&f, libc::F_WRLCK, 50, 1),
            hostlocks::locks_on_file(&f),
        );
        std::fs::write(root.join("a-holds.done"), "").unwrap();
        wait_for(&root.join("closed"));
        let after = (
            hostlocks::try_posix_lock(&f, libc::F_WRLCK, 0, 0),
            hostlocks::locks_on_file(&f),
        );
        (during, after)
    });
    let scenario = r#"export PATH=/opt/tools/bin:$PATH
guest_lockmatrix ofd-hold f a-holds || fail "ofd-hold"
touch closed
echo "holder closed"
"#;
    let run = guest::run_scenario(&backend(t.path()), &guest(), scenario);
    run.assert_success();
    let (during, after) = host.join().unwrap();
    assert_eq!(during.0, Err(libc::EAGAIN), "{}", run.transcript());
    assert!(
        during.1.len() == 1 && during.1[0].contains("OFDLCK") && during.1[0].contains("WRITE"),
        "{:?}",
        during.1
    );
    assert_eq!(after, (Ok(()), Vec::new()), "{}", run.transcript());
}
