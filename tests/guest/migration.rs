//! Live migration of a real guest (QEMU 10, TCG) between two QEMUs on this host, each with a
//! backend of its own over the same host directory: a busy guest (a writer appending numbered
//! lines, a reader checking every round of a file, a file held open, a flock and an fcntl
//! record lock held, a working directory in the share, and with union-virtiofsd a file it
//! unlinked held open) carries on after the switch-over with nothing lost; with `cow=true` a
//! file copied up before the migration is written again after it, into the upper branch only;
//! and a file the guest holds open but the host removed fails the migration (the guest
//! carries on on the source, its descriptors and locks intact) or only that file (the
//! destination's choice).
//!
//! Each scenario is generic over how the backends are built (a function from the shared host
//! directory to a [`Backend`]) and runs against union-virtiofsd and, as the reference, against
//! virtiofsd 1.14. Across releases, the busy guest moves from the previous release's daemon
//! (`testkit::builds::Build::Previous`, which writes device state version 1) to this build's,
//! and the other way the previous release refuses this build's version 2 in one line while
//! the guest goes on on the source.

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use testkit::builds::Build;
use testkit::guest::{Backend, Guest};
use testkit::migrate::{MigrationRun, Outcome, Plan, Side};
use testkit::tmpfs::Tmpfs;
use testkit::{guest, hostlocks, migrate, tree};

/// Builds a backend that serves one host directory (both sides serve the same one).
type BuildBackend = fn(&Path) -> Backend;

/// virtiofsd with its migration defaults (`--migration-mode find-paths`,
/// `--migration-on-error abort`); no sandbox, so /proc/PID/fd shows host paths.
fn virtiofsd(dir: &Path) -> Backend {
    let dir = dir.to_str().expect("utf-8 path");
    Backend::command(
        guest::virtiofsd_binary(),
        &[
            "--socket-path",
            "{socket}",
            "--shared-dir",
            dir,
            "--cache",
            "never",
            "--sandbox",
            "none",
        ],
    )
}

/// [`virtiofsd`] that, as a destination, lets a migration finish and fails only the guest's
/// accesses to what it could not migrate.
fn virtiofsd_guest_error(dir: &Path) -> Backend {
    let mut b = virtiofsd(dir);
    b.args
        .extend(["--migration-on-error", "guest-error"].map(str::to_owned));
    b
}

fn guest() -> Guest {
    Guest {
        smp: 2,
        mem: "512M".to_owned(),
        timeout: Duration::from_secs(100),
        ..Guest::default()
    }
}

/// Lines in the host's copy of the writer's log.
fn host_lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |s| s.lines().count())
}

fn report(name: &str, run: &MigrationRun) {
    eprintln!(
        "{name}: outcome={:?} total_time={:?} downtime={:?} host-measured={:?} exit {:?} on \
         {:?}, run {:?}",
        run.outcome,
        run.total_time,
        run.downtime,
        run.migrate_wall,
        run.exit_code,
        run.exit_on,
        run.elapsed
    );
    if std::env::var_os("UVFS_MIGRATION_TRANSCRIPT").is_some() {
        eprintln!("{}", run.transcript());
    }
}

/// Where a guest's locks (flock(2) and fcntl(2) record locks alike) live with a backend.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Locks {
    /// In the guest kernel: the backend does not offer FUSE locks (virtiofsd 1.14).
    GuestLocal,
    /// On the host, taken by the backend (union-virtiofsd): the destination must hold them
    /// once the guest runs there.
    OnHost,
}

/// What a backend is asked to carry across in [`busy_guest_migrates`] beyond what every
/// backend does.
#[derive(Clone, Copy, Debug)]
struct Busy {
    /// Where the guest's locks live.
    locks: Locks,
    /// Whether the guest also holds a file it unlinked, written and read through descriptors
    /// opened before the migration. union-virtiofsd moves it by file handle
    /// (docs/src/migration.md, "Open files unlinked in the guest": both daemons here run as
    /// root over one tmpfs) and the guest reads and writes it afterwards; virtiofsd 1.14's
    /// find-paths has no path for it.
    unlinked: bool,
}

/// How a migration of the busy guest ends.
#[derive(Clone, Copy, Debug)]
enum Ends {
    /// The guest runs on the destination, which serves everything the source served.
    Completed,
    /// The destination refuses the device state, with this line in its log; the guest goes on
    /// on the source, which serves everything as before (the host locks taken back).
    Refused(&'static str),
}

/// What the previous release says of this build's device state (docs/src/migration.md,
/// "Across daemon versions").
const REFUSED_BY_THE_PREVIOUS_RELEASE: &str = "device state version 2 is not one this daemon \
    reads (it reads 1 to 1); upgrade the destination";

/// The host's view, at one moment, of the record lock a guest process holds on `plock`.
#[derive(Debug, Default)]
struct RecordLockView {
    /// /proc/locks on the file.
    proc_locks: Vec<String>,
    /// The locks the serving backend's processes own through their descriptors on it.
    owned: Vec<String>,
    /// How a host process's F_SETLK of a write lock on the whole file ended.
    host_attempt: Option<Result<(), i32>>,
}

impl RecordLockView {
    /// The view of `file` with the backend whose process group is `backend` serving.
    fn take(file: &Path, backend: u32) -> RecordLockView {
        RecordLockView {
            proc_locks: hostlocks::locks_on_file(file),
            owned: hostlocks::owned_through(&migrate::group_pids(backend), file),
            host_attempt: Some(hostlocks::try_posix_lock(file, libc::F_WRLCK, 0, 0)),
        }
    }
}

/// What the host saw from the hooks of the busy-guest migration: before `migrate`, and once
/// the outcome is known, with the backend that then serves the guest (the destination, or
/// the source again after a refusal).
#[derive(Default)]
struct HostView {
    /// Lines of /mnt/log on the host just before `migrate`.
    lines_before: usize,
    /// ... and once the outcome is known.
    lines_after: usize,
    /// Whether the serving backend then has open.txt open.
    holds_open_after: bool,
    /// /proc/locks on the lock file before `migrate`, and the source backend's processes.
    locks_before: Vec<String>,
    source_pids: Vec<u32>,
    /// /proc/locks on the lock file once the outcome is known, and the serving processes.
    locks_after: Vec<String>,
    serving_pids: Vec<u32>,
    /// The record lock on plock before `migrate` (source) and once the outcome is known.
    record_before: RecordLockView,
    record_after: RecordLockView,
    /// The unlinked file as the source backend held it before `migrate` ([`Busy::unlinked`]).
    unlinked: Option<std::fs::Metadata>,
    /// Whether the serving backend then holds that file.
    holds_unlinked_after: bool,
}

/// The holder pids in /proc/locks lines (`N: FLOCK ADVISORY WRITE PID MAJ:MIN:INO ...`).
fn lock_pids(lines: &[String]) -> Vec<u32> {
    lines
        .iter()
        .filter_map(|l| l.split_whitespace().nth(4)?.parse().ok())
        .collect()
}

/// Checks the host's view of the guest's flock: none with [`Locks::GuestLocal`], else held
/// by one of `holders` (the processes of the backend that should hold it, named `who`).
fn assert_host_flock(locks: Locks, lines: &[String], holders: &[u32], who: &str, t: &str) {
    match locks {
        Locks::GuestLocal => assert!(
            lines.is_empty(),
            "host locks although flocks are guest-local: {lines:?}: {t}"
        ),
        Locks::OnHost => {
            let pids = lock_pids(lines);
            assert!(
                !pids.is_empty() && pids.iter().all(|p| holders.contains(p)),
                "the {who} backend ({holders:?}) should hold the guest's flock: {lines:?}: {t}"
            );
        }
    }
}

/// Checks the host's view of the guest's record lock (a write lock on the whole file): with
/// [`Locks::GuestLocal`] none, and a host process gets one; else exactly one write lock from 0
/// to EOF in /proc/locks (a POSIX or OFD record lock), owned through a descriptor of the `who`
/// backend, and a host process's F_SETLK fails with EAGAIN or EACCES.
fn assert_host_record_lock(locks: Locks, v: &RecordLockView, who: &str, t: &str) {
    match locks {
        Locks::GuestLocal => {
            assert!(
                v.proc_locks.is_empty(),
                "host locks although record locks are guest-local: {v:?}: {t}"
            );
            assert_eq!(
                v.host_attempt,
                Some(Ok(())),
                "a host process could not lock a file only the guest locks: {v:?}: {t}"
            );
        }
        Locks::OnHost => {
            // N: OFDLCK|POSIX ADVISORY WRITE PID MAJ:MIN:INO START END
            let fields = |l: &str| -> Vec<String> {
                l.split_whitespace().skip(1).map(str::to_owned).collect()
            };
            let [line] = &v.proc_locks[..] else {
                panic!("expected one host lock on the guest's record-locked file: {v:?}: {t}");
            };
            let f = fields(line);
            assert!(
                f.len() == 7
                    && matches!(f[0].as_str(), "OFDLCK" | "POSIX")
                    && f[2] == "WRITE"
                    && f[5..] == ["0", "EOF"],
                "the host lock is not a record write lock on the whole file: {v:?}: {t}"
            );
            assert!(
                v.owned.iter().any(|o| fields(o) == f),
                "the {who} backend does not own the guest's record lock: {v:?}: {t}"
            );
            assert!(
                matches!(v.host_attempt, Some(Err(libc::EAGAIN | libc::EACCES))),
                "a host process's F_SETLK should fail while the guest holds the lock: {v:?}: {t}"
            );
        }
    }
}

/// The busy guest's scenario; `@UNLINKED_BEFORE@` and `@UNLINKED_AFTER@` are replaced by
/// [`UNLINKED_BEFORE`] and [`UNLINKED_AFTER`] with [`Busy::unlinked`], else by nothing.
const BUSY_SCENARIO: &str = r#"
export PATH=/opt/tools/bin:$PATH
# wait_file FILE WHY: bounded wait for a file another process makes; fail with WHY.
wait_file() { i=0; while [ ! -e "$1" ]; do i=$((i+1)); [ $i -lt 300 ] || fail "$2"; sleep 0.1; done; }
mkdir -p dir/sub
echo alpha > dir/a.txt
echo held > open.txt
exec 3<>/mnt/open.txt
echo lock > lockfile
exec 4<>/mnt/lockfile
flock -x -n 4 || fail "flock on a fresh file"
# An fcntl record lock (F_SETLKW, write, whole file) held by a process of its own.
echo record > plock
guest_lock /mnt/plock hold /mnt/plock-held &
holder=$!
wait_file /mnt/plock-held "guest_lock did not take the record lock"
if guest_lock /mnt/plock try; then fail "another process got the record lock"; fi
@UNLINKED_BEFORE@
# A reader that keeps reading a file and comparing it with the guest's own copy.
seq 1 40000 > /tmp/data
cp /tmp/data /mnt/data
( r=0
  while [ ! -e /tmp/stop ]; do
    cmp /mnt/data /tmp/data > /tmp/cmp 2>&1 || {
      echo "reader: round $((r+1)) read wrong data: $(cat /tmp/cmp)"; exit 1; }
    r=$((r+1)); echo $r > /tmp/rounds.new; mv /tmp/rounds.new /tmp/rounds
  done ) &
reader=$!
cd /mnt/dir
( n=0
  while [ ! -e /tmp/stop ]; do
    n=$((n+1)); echo "line $n" >> /mnt/log || { echo "writer failed at line $n"; exit 1; }
  done
  echo $n > /tmp/written ) &
writer=$!
i=0; while [ ! -s /mnt/log ]; do i=$((i+1)); [ $i -lt 300 ] || fail "writer did not start"; sleep 0.1; done
wait_file /tmp/rounds "reader did not start"
r0=$(cat /tmp/rounds)
migrate_now
outcome=$(wait_migrated)
expect_eq "$outcome" @OUTCOME@ "migration outcome"
r1=$(cat /tmp/rounds)
# The record lock is still held: another process neither gets it nor misses it.
if guest_lock /mnt/plock try; then fail "the record lock held across the migration was lost"; fi
expect_eq "$(guest_lock /mnt/plock test)" locked "F_GETLK of the record lock after the migration"
# The writer goes on where the guest now runs (20 more lines at least), and the reader (3 rounds).
n0=$(wc -l < /mnt/log); i=0
while [ "$(wc -l < /mnt/log)" -lt $((n0 + 20)) ] || [ "$(cat /tmp/rounds)" -lt $((r1 + 3)) ]; do
  i=$((i+1)); [ $i -lt 300 ] || fail "writer or reader stalled after the migration"; sleep 0.1
done
touch /tmp/stop
wait $writer || fail "writer failed"
wait $reader || fail "reader failed"
section reads echo "$r0 $r1 $(cat /tmp/rounds)"
n=$(cat /tmp/written)
seq 1 "$n" | sed 's/^/line /' > /tmp/expect
cmp /tmp/expect /mnt/log || fail "/mnt/log is not lines 1..$n"
section log echo "$n"
expect_eq "$(cat <&3)" held "read through the descriptor held across the migration"
echo after >&3
expect_eq "$(cat /mnt/open.txt)" "held
after" "open.txt after writing through the held descriptor"
exec 3>&-
if flock -x -n /mnt/lockfile true; then fail "the flock held across the migration was lost"; fi
flock -u 4
flock -x -n /mnt/lockfile true || fail "the flock let go after the migration is still held"
exec 4>&-
touch /mnt/plock-held.done
wait $holder || fail "the record lock's holder failed"
guest_lock /mnt/plock try || fail "the record lock let go after the migration is still held"
@UNLINKED_AFTER@
expect_eq "$(pwd)" /mnt/dir "working directory"
expect_eq "$(cat a.txt)" alpha "a path relative to the working directory"
echo rel > rel.txt
mkdir sub/deeper
section ls ls -1 .
section ls-sub ls -1 sub
"#;

/// [`Busy::unlinked`], before the migration: a file written through one descriptor, opened
/// for reading through another, then unlinked and written again.
const UNLINKED_BEFORE: &str = r#"exec 7<>/mnt/unlinked 8</mnt/unlinked
echo before >&7
rm /mnt/unlinked
[ ! -e /mnt/unlinked ] || fail "unlinked still has a path"
echo gone >&7
"#;

/// [`Busy::unlinked`], after it: written again, then read from the start.
const UNLINKED_AFTER: &str = r#"echo after >&7 || fail "write through the unlinked file's descriptor after the migration"
expect_eq "$(cat <&8)" "before
gone
after" "the unlinked file read through a descriptor held across the migration"
exec 7>&- 8<&-
"#;

/// A busy guest: a background writer appends numbered lines to /mnt/log during the
/// migration and after it, a background reader keeps reading /mnt/data and comparing it with
/// the guest's copy (with `--cache never` every READ lands in the reader's buffers in guest
/// memory, which the dirty log must carry), a file stays open (read-write) across it, another
/// holds an exclusive flock across it, a process of its own holds an fcntl write lock, the
/// working directory is in the share, and with [`Busy::unlinked`] a file the guest unlinked
/// stays open. Afterwards every line is there once and in order, every read matched, the
/// held descriptors read and write, the locks are still held (and can be let go), relative
/// paths resolve, and the host's files say the same. The destination backend holds the open
/// file once the guest runs there (and the unlinked one, and the locks, with
/// [`Locks::OnHost`]: a host process cannot take the record lock); the source backend exits
/// once its QEMU is gone. When the destination refuses the state ([`Ends::Refused`]) the
/// guest checks the same on the source, and the source backend holds all that again.
fn busy_guest_migrates(source: BuildBackend, dest: BuildBackend, busy: Busy, ends: Ends) {
    let share = Tmpfs::new("64M");
    let root = share.path().to_owned();
    let (before, after) = if busy.unlinked {
        (UNLINKED_BEFORE, UNLINKED_AFTER)
    } else {
        ("", "")
    };
    let outcome = match ends {
        Ends::Completed => "done",
        Ends::Refused(_) => "failed",
    };
    let scenario = BUSY_SCENARIO
        .replace("@UNLINKED_BEFORE@\n", before)
        .replace("@UNLINKED_AFTER@\n", after)
        .replace("@OUTCOME@", outcome);
    let view = Rc::new(RefCell::new(HostView::default()));
    let (log, open, lockfile, plock) = (
        root.join("log"),
        root.join("open.txt"),
        root.join("lockfile"),
        root.join("plock"),
    );
    let plan = Plan::new(root.join(".migrated")).before_migrate({
        let (view, log, lockfile, plock) =
            (view.clone(), log.clone(), lockfile.clone(), plock.clone());
        move |ctx| {
            let mut v = view.borrow_mut();
            v.lines_before = host_lines(&log);
            v.locks_before = hostlocks::locks_on_file(&lockfile);
            v.source_pids = migrate::group_pids(ctx.source_daemon);
            v.record_before = RecordLockView::take(&plock, ctx.source_daemon);
            if busy.unlinked {
                v.unlinked = migrate::group_file_named(ctx.source_daemon, "unlinked (deleted)");
            }
        }
    });
    let look_after = {
        let (view, plock) = (view.clone(), plock.clone());
        move |serving: u32| {
            let mut v = view.borrow_mut();
            v.lines_after = host_lines(&log);
            let open = std::fs::metadata(open).expect("open.txt");
            v.holds_open_after = migrate::group_holds(serving, &open);
            v.locks_after = hostlocks::locks_on_file(&lockfile);
            v.serving_pids = migrate::group_pids(serving);
            v.record_after = RecordLockView::take(&plock, serving);
            v.holds_unlinked_after = v
                .unlinked
                .as_ref()
                .is_some_and(|m| migrate::group_holds(serving, m));
        }
    };
    let (plan, serving) = match ends {
        Ends::Completed => (
            plan.after_switch(move |ctx| look_after(ctx.dest_daemon)),
            "destination",
        ),
        Ends::Refused(_) => (
            plan.after_failure(move |ctx| look_after(ctx.source_daemon)),
            "source",
        ),
    };
    let g = Guest {
        extra_initrd: vec![guest::tools_initrd()],
        ..guest()
    };
    let run = migrate::run_migration(&source(&root), &dest(&root), &g, &scenario, plan);
    report("busy guest", &run);
    let v = view.borrow();
    eprintln!(
        "busy guest: the host saw {} lines when migrating, {} after; host flocks before {:?} \
         (source {:?}), after {:?} ({serving} {:?}); record lock before {:?}, after {:?}; \
         reader rounds at migrate, at the signal, at the end: {:?}",
        v.lines_before,
        v.lines_after,
        v.locks_before,
        v.source_pids,
        v.locks_after,
        v.serving_pids,
        v.record_before,
        v.record_after,
        run.section("reads"),
    );
    let t = run.transcript();
    match ends {
        Ends::Completed => {
            run.assert_completed();
            assert_eq!(run.exit_on, Some(Side::Dest), "{t}");
            assert!(run.source_qemu_exit.is_some(), "source QEMU still ran: {t}");
        }
        Ends::Refused(line) => {
            assert_resumed_on_the_source(&run);
            assert!(
                run.dest_daemon_log.contains(line),
                "the destination backend's log does not say '{line}': {t}"
            );
        }
    }
    run.assert_success();
    assert!(
        run.source_daemon_exit.is_some_and(|s| s.success()),
        "the source backend did not exit cleanly once its QEMU was gone: {t}"
    );
    assert!(
        v.holds_open_after,
        "the {serving} backend does not hold open.txt: {t}"
    );
    assert!(
        v.lines_before > 0 && v.lines_after > v.lines_before,
        "no line written during the migration (host saw {} then {}): {t}",
        v.lines_before,
        v.lines_after
    );
    assert_host_flock(busy.locks, &v.locks_before, &v.source_pids, "source", &t);
    assert_host_flock(busy.locks, &v.locks_after, &v.serving_pids, serving, &t);
    assert_host_record_lock(busy.locks, &v.record_before, "source", &t);
    assert_host_record_lock(busy.locks, &v.record_after, serving, &t);
    if busy.unlinked {
        use std::os::unix::fs::MetadataExt;
        let m = v.unlinked.as_ref().unwrap_or_else(|| {
            panic!("the source backend held no file named 'unlinked (deleted)': {t}")
        });
        assert_eq!(m.nlink(), 0, "{t}");
        // The documented outcome (docs/src/migration.md, "Open files unlinked in the guest"): it moves by
        // file handle, so the destination holds the very inode; the scenario read and wrote it.
        assert!(
            v.holds_unlinked_after,
            "the {serving} backend does not hold the unlinked file: {t}"
        );
    }

    // The reader read whole rounds before the migration, between the request and the signal
    // (while migrating and just after) and after it, every one right.
    let reads: Vec<u64> = run.section("reads").expect("reads section")[0]
        .split_whitespace()
        .map(|r| r.parse().expect("a round count"))
        .collect();
    assert!(
        reads.len() == 3 && reads[0] > 0 && reads[1] > reads[0] && reads[2] >= reads[1] + 3,
        "reader rounds at migrate, at the signal, at the end: {reads:?}: {t}"
    );
    let n: usize = run.section("log").expect("log section")[0]
        .parse()
        .expect("line count");
    let expect: String = (1..=n).map(|i| format!("line {i}\n")).collect();
    assert_eq!(std::fs::read_to_string(root.join("log")).unwrap(), expect);
    assert_eq!(
        std::fs::read_to_string(root.join("open.txt")).unwrap(),
        "held\nafter\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("dir/rel.txt")).unwrap(),
        "rel\n"
    );
    assert!(root.join("dir/sub/deeper").is_dir(), "{t}");
    assert!(!root.join("unlinked").exists(), "{t}");
    assert_eq!(
        run.section("ls").as_deref(),
        Some(&["a.txt", "rel.txt", "sub"].map(str::to_owned)[..]),
        "{t}"
    );
    assert_eq!(
        run.section("ls-sub").as_deref(),
        Some(&["deeper".to_owned()][..]),
        "{t}"
    );
    // No lock outlives the guest's letting go.
    for f in [root.join("lockfile"), plock] {
        assert_eq!(hostlocks::locks_on_file(&f), Vec::<String>::new(), "{t}");
    }
}

/// What the host saw from the hooks of the removed-file migration.
#[derive(Default)]
struct LostView {
    /// Whether the source backend still had the removed file open after a failed migration.
    source_holds_removed: bool,
    /// /proc/locks on the lock file once the outcome is known, and the processes of the
    /// backend that then serves the guest.
    locks_after: Vec<String>,
    serving_pids: Vec<u32>,
}

/// The guest holds `victim` open (read-write) and an exclusive flock on `lockfile`, and the
/// host removes `victim` just before the migration: its path is gone, so a backend that
/// migrates open files by path cannot reopen it on the destination. The scenario checks what
/// the guest sees for either outcome: after a failed migration it still runs on the source
/// and the descriptor still reads and writes the removed file; after a completed one (the
/// destination gave up only that file) the descriptor fails with EIO. Either way the flock
/// is still held, then let go, and everything else works.
fn open_file_removed_on_the_host(
    source: BuildBackend,
    dest: BuildBackend,
    return_path: bool,
    flocks: Locks,
) -> MigrationRun {
    let share = Tmpfs::new("16M");
    let root = share.path().to_owned();
    let scenario = r#"
export PATH=/opt/tools/bin:$PATH
echo hello > victim
echo other > other.txt
exec 3<>/mnt/victim
echo lock > lockfile
exec 4<>/mnt/lockfile
flock -x -n 4 || fail "flock on a fresh file"
migrate_now
outcome=$(wait_migrated)
section outcome echo "$outcome"
[ ! -e /mnt/victim ] || fail "victim still has a path"
case "$outcome" in
failed)
  expect_eq "$(cat <&3)" hello "read through the descriptor of the removed file"
  echo more >&3 ;;
done)
  if out=$(cat <&3 2>&1); then fail "read through the lost descriptor worked: $out"; fi
  case "$out" in *"Input/output error"*) ;; *) fail "read: expected EIO, got: $out" ;; esac
  if (echo more >&3) 2>/tmp/err; then fail "write through the lost descriptor worked"; fi
  grep -q "Input/output error" /tmp/err || fail "write: expected EIO, got: $(cat /tmp/err)" ;;
*) fail "unexpected outcome $outcome" ;;
esac
echo "$outcome: lost descriptor checked"
exec 3>&-
if flock -x -n /mnt/lockfile true; then fail "the flock held across the migration was lost"; fi
flock -u 4
flock -x -n /mnt/lockfile true || fail "the flock let go is still held"
exec 4>&-
expect_eq "$(cat other.txt)" other "another file"
echo new > new.txt
"#;
    let view = Rc::new(RefCell::new(LostView::default()));
    let removed = Rc::new(RefCell::new(None));
    let (victim, lockfile) = (root.join("victim"), root.join("lockfile"));
    let plan = Plan::new(root.join(".migrated"))
        .return_path(return_path)
        .before_migrate({
            let (victim, removed) = (victim.clone(), removed.clone());
            move |_| {
                *removed.borrow_mut() = Some(std::fs::metadata(&victim).expect("victim"));
                std::fs::remove_file(&victim).expect("remove victim");
            }
        })
        .after_failure({
            let (view, lockfile) = (view.clone(), lockfile.clone());
            move |ctx| {
                let removed = removed.borrow();
                let removed = removed.as_ref().expect("removed before the migration");
                let mut v = view.borrow_mut();
                v.source_holds_removed = migrate::group_holds(ctx.source_daemon, removed);
                v.locks_after = hostlocks::locks_on_file(&lockfile);
                v.serving_pids = migrate::group_pids(ctx.source_daemon);
            }
        })
        .after_switch({
            let view = view.clone();
            move |ctx| {
                let mut v = view.borrow_mut();
                v.locks_after = hostlocks::locks_on_file(&lockfile);
                v.serving_pids = migrate::group_pids(ctx.dest_daemon);
            }
        });
    let g = Guest {
        extra_initrd: vec![guest::tools_initrd()],
        ..guest()
    };
    let run = migrate::run_migration(&source(&root), &dest(&root), &g, scenario, plan);
    let t = run.transcript();
    run.assert_success();
    let v = view.borrow();
    let who = match run.outcome {
        Outcome::Completed => "destination",
        _ => "source",
    };
    assert_host_flock(flocks, &v.locks_after, &v.serving_pids, who, &t);
    if let Outcome::Failed(_) = run.outcome {
        assert!(
            v.source_holds_removed,
            "the source backend no longer held the removed file after the failure: {t}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(root.join("new.txt")).unwrap(),
        "new\n",
        "{t}"
    );
    assert!(!victim.exists(), "{t}");
    assert_eq!(
        hostlocks::locks_on_file(&root.join("lockfile")),
        Vec::<String>::new()
    );
    run
}

/// Checks of a migration the destination refused: it failed, the guest went on running on
/// the source to its end, and the destination QEMU gave up the load.
fn assert_resumed_on_the_source(run: &MigrationRun) {
    let t = run.transcript();
    assert!(
        matches!(run.outcome, Outcome::Failed(_)),
        "expected a failed migration: {t}"
    );
    assert_eq!(run.exit_on, Some(Side::Source), "{t}");
    assert!(
        run.dest_qemu_exit.is_some_and(|s| !s.success()),
        "the destination QEMU should have exited with an error: {t}"
    );
    assert!(run.dest_console.contains("load of migration failed"), "{t}");
}

/// Common checks of a migration that failed because of the removed file: the guest went on
/// running on the source with its descriptor intact, and the destination QEMU gave up.
fn assert_failed_and_resumed(run: &MigrationRun) {
    assert_resumed_on_the_source(run);
    let t = run.transcript();
    assert_eq!(
        run.section("outcome").as_deref(),
        Some(&["failed".to_owned()][..]),
        "{t}"
    );
    assert!(
        run.console().contains("failed: lost descriptor checked"),
        "{t}"
    );
}

/// Checks of a migration that completed although one open file was lost: the guest runs on
/// the destination, which fails only that file.
fn assert_completed_without_the_lost_file(run: &MigrationRun) {
    let t = run.transcript();
    run.assert_completed();
    assert_eq!(run.exit_on, Some(Side::Dest), "{t}");
    assert_eq!(
        run.section("outcome").as_deref(),
        Some(&["done".to_owned()][..]),
        "{t}"
    );
    assert!(
        run.console().contains("done: lost descriptor checked"),
        "{t}"
    );
}

/// union-virtiofsd over the directory as its one RW branch.
fn union(dir: &Path) -> Backend {
    Backend::union(&[(dir, guest::Mode::Rw)], &["-o", "minfreespace=1M"])
}

/// [`union`] with `--cache never` (virtiofsd's meaning: no guest page cache, attribute and
/// entry timeouts 0): every READ the guest makes goes to the backend.
fn union_cache_never(dir: &Path) -> Backend {
    let mut b = union(dir);
    b.args.extend(["--cache", "never"].map(str::to_owned));
    b
}

/// [`union_cache_never`] run by the previous release's daemon (which knows every option it
/// passes).
fn previous_cache_never(dir: &Path) -> Backend {
    union_cache_never(dir).built_by(Build::Previous)
}

/// [`union`] that, as a destination, finishes a migration despite inodes it cannot open.
fn union_guest_error(dir: &Path) -> Backend {
    let mut b = union(dir);
    b.args
        .extend(["--migration-on-error", "guest-error"].map(str::to_owned));
    b
}

/// What union-virtiofsd carries across.
const UNION_BUSY: Busy = Busy {
    locks: Locks::OnHost,
    unlinked: true,
};

#[test]
fn migrates_a_busy_guest_with_open_files_cwd_and_locks() {
    busy_guest_migrates(
        union_cache_never,
        union_cache_never,
        UNION_BUSY,
        Ends::Completed,
    );
}

/// The previous release's source writes device state version 1, which this build loads:
/// the same guest and checks as between two of this build's daemons.
#[test]
fn from_the_previous_release_migrates_a_busy_guest() {
    busy_guest_migrates(
        previous_cache_never,
        union_cache_never,
        UNION_BUSY,
        Ends::Completed,
    );
}

/// This build's source writes version 2 (QEMU's destination cannot say what it reads); the
/// previous release refuses it before loading anything, and the guest goes on on the source,
/// its open files and locks served there again.
#[test]
fn to_the_previous_release_is_refused_and_the_source_goes_on() {
    busy_guest_migrates(
        union_cache_never,
        previous_cache_never,
        UNION_BUSY,
        Ends::Refused(REFUSED_BY_THE_PREVIOUS_RELEASE),
    );
}

/// What the host saw from the hooks of the copy-on-write migration.
#[derive(Default)]
struct CowView {
    /// The upper branch's copy of base.txt just before `migrate` (`None`: not copied up).
    upper_before: Option<String>,
    /// Whether the source backend then held that copy.
    source_holds_upper: bool,
    /// Whether the destination backend holds it once it runs the guest.
    dest_holds_upper: bool,
}

/// Copy-on-write layers (`-o cow=true`: an RW upper branch over an RO lower one) across a
/// migration. Before it the guest opens base.txt, a lower-branch file, for appending (which
/// copies it up) and writes through the descriptor, holds late.txt (lower only) open for
/// reading, and has its working directory in ldir (lower only). After the switch-over it
/// writes through the held descriptor again, reads the held one, and changes late.txt and
/// ldir, which the destination copies up. The host's upper branch has every write, the
/// source and then the destination backend hold the upper copy, and the lower branch is
/// exactly as it was.
#[test]
fn migrates_a_copied_up_file_with_cow() {
    let share = Tmpfs::new("16M");
    let (upper, lower) = (share.path().join("upper"), share.path().join("lower"));
    std::fs::create_dir(&upper).unwrap();
    std::fs::create_dir_all(lower.join("ldir")).unwrap();
    std::fs::write(lower.join("base.txt"), "base\n").unwrap();
    std::fs::write(lower.join("late.txt"), "late\n").unwrap();
    std::fs::write(lower.join("ldir/l.txt"), "l\n").unwrap();
    let lower_tree = tree::snapshot(&lower);
    let backend = Backend::union(
        &[(&upper, guest::Mode::Rw), (&lower, guest::Mode::Ro)],
        &["-o", "cow=true,minfreespace=1M"],
    );
    let scenario = r#"
expect_eq "$(cat /mnt/base.txt)" base "base.txt from the lower branch"
# Opening for writing copies base.txt up; the descriptor writes the upper copy.
exec 3>>/mnt/base.txt
echo before >&3
exec 4</mnt/late.txt
cd /mnt/ldir
migrate_now
outcome=$(wait_migrated)
expect_eq "$outcome" done "migration outcome"
echo after >&3
exec 3>&-
expect_eq "$(cat /mnt/base.txt)" "base
before
after" "base.txt after writing through the descriptor held across the migration"
expect_eq "$(cat <&4)" late "late.txt read through the descriptor held across the migration"
exec 4<&-
# Copied up by the destination: a lower file, and the working directory's.
echo more >> /mnt/late.txt
expect_eq "$(cat /mnt/late.txt)" "late
more" "late.txt copied up after the migration"
expect_eq "$(pwd)" /mnt/ldir "working directory"
expect_eq "$(cat l.txt)" l "a lower file relative to the working directory"
echo rel > rel.txt
section ls ls -1 .
"#;
    let view = Rc::new(RefCell::new(CowView::default()));
    let copy = upper.join("base.txt");
    let plan = Plan::new(upper.join(".migrated"))
        .before_migrate({
            let (view, copy) = (view.clone(), copy.clone());
            move |ctx| {
                let mut v = view.borrow_mut();
                v.upper_before = std::fs::read_to_string(&copy).ok();
                v.source_holds_upper = std::fs::metadata(&copy)
                    .is_ok_and(|m| migrate::group_holds(ctx.source_daemon, &m));
            }
        })
        .after_switch({
            let (view, copy) = (view.clone(), copy.clone());
            move |ctx| {
                view.borrow_mut().dest_holds_upper = std::fs::metadata(&copy)
                    .is_ok_and(|m| migrate::group_holds(ctx.dest_daemon, &m));
            }
        });
    let run = migrate::run_migration(&backend, &backend, &guest(), scenario, plan);
    report("copy-on-write", &run);
    run.assert_completed();
    run.assert_success();
    let t = run.transcript();
    let v = view.borrow();
    assert_eq!(run.exit_on, Some(Side::Dest), "{t}");
    assert_eq!(
        v.upper_before.as_deref(),
        Some("base\nbefore\n"),
        "base.txt was not copied up before the migration: {t}"
    );
    assert!(
        v.source_holds_upper,
        "the source backend does not hold the upper copy of base.txt: {t}"
    );
    assert!(
        v.dest_holds_upper,
        "the destination backend does not hold the upper copy of base.txt: {t}"
    );
    assert_eq!(
        std::fs::read_to_string(&copy).unwrap(),
        "base\nbefore\nafter\n",
        "{t}"
    );
    assert_eq!(
        std::fs::read_to_string(upper.join("late.txt")).unwrap(),
        "late\nmore\n",
        "{t}"
    );
    assert_eq!(
        std::fs::read_to_string(upper.join("ldir/rel.txt")).unwrap(),
        "rel\n",
        "{t}"
    );
    assert_eq!(
        run.section("ls").as_deref(),
        Some(&["l.txt", "rel.txt"].map(str::to_owned)[..]),
        "{t}"
    );
    assert_eq!(
        tree::snapshot(&lower),
        lower_tree,
        "the lower branch changed: {t}"
    );
}

#[test]
fn an_open_file_removed_on_the_host_fails_the_migration_and_the_source_goes_on() {
    let run = open_file_removed_on_the_host(union, union, true, Locks::OnHost);
    report("removed open file, abort", &run);
    assert_failed_and_resumed(&run);
}

/// Without QEMU's return path the source has handed everything over (locks included) when
/// the destination fails: resumed with `cont`, it must take its state back.
#[test]
fn without_return_path_the_source_resumed_by_cont_has_its_state_back() {
    let run = open_file_removed_on_the_host(union, union, false, Locks::OnHost);
    report("removed open file, abort, no return path", &run);
    assert_failed_and_resumed(&run);
    assert!(
        run.qmp_log.contains(r#"{"execute": "cont"}"#),
        "{}",
        run.transcript()
    );
}

#[test]
fn guest_error_mode_fails_only_the_lost_file() {
    let run = open_file_removed_on_the_host(union, union_guest_error, true, Locks::OnHost);
    report("removed open file, guest-error", &run);
    assert_completed_without_the_lost_file(&run);
}

#[test]
fn virtiofsd_migrates_a_busy_guest_with_open_files_and_cwd() {
    busy_guest_migrates(
        virtiofsd,
        virtiofsd,
        Busy {
            locks: Locks::GuestLocal,
            // find-paths finds no path for it ("Inode deleted") and the destination, with
            // `--migration-on-error abort`, fails the migration ("Migration source has lost
            // inode"): virtiofsd 1.14 does not migrate files unlinked in the guest.
            unlinked: false,
        },
        Ends::Completed,
    );
}

/// virtiofsd (find-paths, `--migration-on-error abort` on the destination): the source finds
/// no path for the removed file and sends it as lost, the destination refuses the state, and
/// with QEMU's return path the source learns it ("Sibling indicated error 1"), fails the
/// migration and resumes the guest by itself.
#[test]
fn virtiofsd_aborts_when_an_open_file_was_removed_on_the_host() {
    let run = open_file_removed_on_the_host(virtiofsd, virtiofsd, true, Locks::GuestLocal);
    report("virtiofsd: removed open file, abort", &run);
    assert_failed_and_resumed(&run);
    let t = run.transcript();
    assert_eq!(
        run.outcome,
        Outcome::Failed("Sibling indicated error 1".to_owned()),
        "{t}"
    );
    assert!(
        run.dest_console
            .contains("Back-end failed to process its internal state"),
        "{t}"
    );
    assert!(run.source_daemon_log.contains("Inode deleted"), "{t}");
    assert!(
        run.dest_daemon_log
            .contains("Migration source has lost inode"),
        "{t}"
    );
}

/// The same without QEMU's return path: the source calls the migration completed once it has
/// sent everything and waits paused; the destination fails to load and exits; the harness
/// (as a management layer would) sees the destination is not running and resumes the source
/// with `cont`, where the guest carries on with its descriptor intact.
#[test]
fn virtiofsd_abort_without_return_path_is_resumed_on_the_source() {
    let run = open_file_removed_on_the_host(virtiofsd, virtiofsd, false, Locks::GuestLocal);
    report("virtiofsd: removed open file, abort, no return path", &run);
    assert_failed_and_resumed(&run);
    let t = run.transcript();
    assert_eq!(
        run.query_migrate
            .as_ref()
            .and_then(|q| q.get("status"))
            .and_then(testkit::qmp::Json::as_str),
        Some("completed"),
        "the source alone should have called it completed: {t}"
    );
    assert!(run.qmp_log.contains(r#"{"execute": "cont"}"#), "{t}");
}

/// virtiofsd with `--migration-on-error guest-error` on the destination: the migration
/// completes, and only the removed file fails (EIO) for the guest.
#[test]
fn virtiofsd_guest_error_mode_fails_only_the_lost_file() {
    let run =
        open_file_removed_on_the_host(virtiofsd, virtiofsd_guest_error, true, Locks::GuestLocal);
    report("virtiofsd: removed open file, guest-error", &run);
    assert_completed_without_the_lost_file(&run);
    assert!(
        run.dest_daemon_log.contains("Invalid handle"),
        "{}",
        run.transcript()
    );
}
