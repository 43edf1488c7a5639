//! Upgrade in place with a real guest (QEMU 10, TCG): while the guest runs fio with
//! verification, holds a flock, an fcntl record lock, an open file and a working directory
//! in the share, a new daemon started with `--upgrade <socket>.pid` takes the session over
//! from the running one (twice: the second upgrade is of a daemon that was itself upgraded).
//! QEMU takes no part. Each old daemon exits by itself, with status 0, only after the new
//! one answered a request; the guest's I/O goes on with no error, its locks are held by the
//! new daemon as the host sees them, and the pid file names the new daemon. A new daemon
//! that cannot take the session (another branch, where the guest's files are not) gives
//! up, and the old one goes on serving. And the refusals without a guest: no front-end yet,
//! `--upgrade` with `--fd`, no daemon at all.
//!
//! Across releases, the same guest and checks with the previous release's daemon
//! (`testkit::builds::Build::Previous`, the last build that wrote device state version 1) on
//! one side: this build takes its session over, and hands a session back to it (the session
//! fits version 1: no ACLs, security contexts, idmap or branch edit). Both sides run only
//! options the previous release knows (`--socket-path`, `--branch`, `--log-level`,
//! `--upgrade`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use testkit::builds::Build;
use testkit::guest::{Backend, Guest, Mode, Reaper};
use testkit::{guest, hostlocks, live, migrate};

/// The guest: locks, an open file and a working directory in the share, then rounds of fio
/// (4 MiB of random 4 KiB writes, each block verified by CRC) until the host makes
/// /mnt/.stop; /mnt/rounds counts the rounds done. Then everything is checked again.
const SCENARIO: &str = r#"
T=/opt/tools/bin
mkdir -p /mnt/work
cd /mnt/work
exec 7>/mnt/flocked
$T/flock -x 7
echo record > /mnt/plock
$T/guest_lock /mnt/plock hold /mnt/plock.held &
holder=$!
i=0
while [ ! -e /mnt/plock.held ]; do
    i=$((i+1)); [ $i -lt 600 ] || fail "no record lock after 60 s"; sleep 0.1
done
echo "open before" > /mnt/open.txt
exec 6</mnt/open.txt
rounds=0
while [ ! -e /mnt/.stop ]; do
    $T/fio --name=v --filename=/mnt/work/fio.dat --rw=randwrite --bs=4k --size=4m \
        --verify=crc32c --do_verify=1 --ioengine=psync --minimal > /tmp/fio.out 2>&1 ||
        fail "fio round $rounds: $(cat /tmp/fio.out)"
    rounds=$((rounds+1))
    echo $rounds > /mnt/rounds.tmp
    mv /mnt/rounds.tmp /mnt/rounds
done
expect_eq "$(pwd)" /mnt/work "working directory"
expect_eq "$(cat <&6)" "open before" "the open file"
if $T/flock -n /mnt/flocked true; then fail "the flock was lost"; fi
if $T/guest_lock /mnt/plock try; then fail "the record lock was lost"; fi
touch /mnt/plock.held.done
wait $holder
echo "rounds: $rounds"
"#;

/// How long a round of fio may take to show up (TCG).
const ROUND_LIMIT: Duration = Duration::from_secs(120);
/// How long an old daemon may take to exit once a new one serves.
const EXIT_LIMIT: Duration = Duration::from_secs(60);

struct Setup {
    _dir: tempfile::TempDir,
    share: PathBuf,
    other: PathBuf,
    socket: PathBuf,
    pid_file: PathBuf,
    tmp: PathBuf,
    logs: PathBuf,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let share = dir.path().join("share");
        let other = dir.path().join("other");
        let tmp = dir.path().join("tmp");
        for d in [&share, &other, &tmp] {
            fs::create_dir(d).unwrap();
        }
        let socket = dir.path().join("vfs.sock");
        let pid_file = dir.path().join("vfs.sock.pid");
        Setup {
            share,
            other,
            socket,
            pid_file,
            tmp,
            logs: dir.path().to_owned(),
            _dir: dir,
        }
    }

    fn backend(&self, branch: &Path, build: Build) -> Backend {
        Backend::union(&[(branch, Mode::Rw)], &[])
            .at_info()
            .built_by(build)
    }

    /// `build`'s daemon started with `--upgrade` over `branch`, logging into `name`.log.
    fn upgrade(&self, branch: &Path, name: &str, build: Build) -> Child {
        let b = self.backend(branch, build);
        let sock = self.socket.to_str().unwrap();
        let mut cmd = Command::new(&b.program);
        cmd.args(b.args.iter().map(|a| a.replace("{socket}", sock)))
            .arg("--upgrade")
            .arg(&self.pid_file);
        guest::spawn_logged(&mut cmd, &self.log(name))
    }

    /// The first daemon, `build`'s (log `d0`), and the guest running [`SCENARIO`] on it
    /// (console in `console.log`): the reaper holds them in that order.
    fn boot(&self, build: Build) -> (Guest, Reaper, PathBuf) {
        let guest = Guest {
            mem: "1G".into(),
            timeout: Duration::from_secs(600),
            extra_initrd: vec![guest::tools_initrd(), guest::fio_initrd()],
            ..Guest::default()
        };
        let script = self.tmp.join("scenario.sh");
        guest::write_scenario(&script, SCENARIO);
        let first = guest::spawn_backend(
            &self.backend(&self.share, build),
            &self.socket,
            &self.log("d0"),
        );
        let mut reaper = Reaper(vec![first]);
        let console = self.logs.join("console.log");
        reaper.0.push(guest::spawn_guest(
            &guest,
            &self.socket,
            &script,
            &self.tmp,
            &console,
        ));
        (guest, reaper, console)
    }

    fn log(&self, name: &str) -> PathBuf {
        self.logs.join(format!("{name}.log"))
    }

    fn rounds(&self) -> u64 {
        fs::read_to_string(self.share.join("rounds"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Waits until the guest finished more than `after` rounds of fio.
    fn wait_rounds(&self, after: u64, what: &str, transcript: &dyn Fn() -> String) -> u64 {
        let deadline = Instant::now() + ROUND_LIMIT;
        loop {
            let n = self.rounds();
            if n > after {
                return n;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: no fio round after {after} within {ROUND_LIMIT:?}\n{}",
                transcript()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn exited(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    guest::wait_until(child, Instant::now() + limit)
}

/// The host's view of the guest's two locks: held, through descriptors of the processes of
/// `pgid` (the serving daemon), and a host process's fcntl lock on the record-locked file fails.
fn assert_locks_held_by(s: &Setup, pgid: u32, who: &str) {
    let pids = migrate::group_pids(pgid);
    let flock = hostlocks::owned_through(&pids, &s.share.join("flocked"));
    assert!(
        flock.iter().any(|l| l.contains("FLOCK")),
        "{who} holds no flock on flocked: {flock:?}; /proc/locks: {:?}",
        hostlocks::locks_on_file(&s.share.join("flocked"))
    );
    let plock = s.share.join("plock");
    let record = hostlocks::owned_through(&pids, &plock);
    assert!(
        !record.is_empty(),
        "{who} holds no record lock on plock; /proc/locks: {:?}",
        hostlocks::locks_on_file(&plock)
    );
    let attempt = hostlocks::try_posix_lock(&plock, libc::F_WRLCK, 0, 0);
    assert!(
        matches!(attempt, Err(libc::EAGAIN | libc::EACCES)),
        "a host process got the guest's record lock while {who} serves: {attempt:?}"
    );
}

/// While the guest runs fio, `builds[0]`'s daemon serves it, and each next build's takes the
/// session over from the one before: each old daemon exits 0 once the new one has answered,
/// the new one serves the session (in device state version 2 between two of this build's
/// daemons, else 1: the previous release reads and writes no other), the pid file names it,
/// the guest's I/O goes on and the new daemon holds its locks; at the end the guest's checks
/// pass and the last daemon leaves no socket file behind.
fn upgrades_while_the_guest_runs_fio(builds: &[Build]) {
    guest::require_qemu();
    // Built (the previous release, once) before the guests are held.
    for b in builds {
        b.path();
    }
    let _slot = guest::one_guest();
    let s = Setup::new();
    let (guest, mut reaper, console) = s.boot(builds[0]);
    let transcript = || {
        let mut t = format!("----- console -----\n{}", guest::read_lossy(&console));
        for (d, build) in builds.iter().enumerate() {
            let log = guest::read_lossy(&s.log(&format!("d{d}")));
            t += &format!("\n----- d{d} ({build:?}) -----\n{log}");
        }
        t
    };
    let mut rounds = s.wait_rounds(0, "before the upgrades", &transcript);
    // The daemons, oldest first; the QEMU stays at index 1 of the reaper.
    let mut serving = 0;
    for generation in 1..builds.len() {
        let name = format!("d{generation}");
        let old_name = format!("d{}", generation - 1);
        let (old_build, new_build) = (builds[generation - 1], builds[generation]);
        let new = s.upgrade(&s.share, &name, new_build);
        let new_pid = new.id();
        reaper.0.insert(0, new);
        // The old daemon sits right after the new one now.
        let old = &mut reaper.0[1 + serving];
        let status = exited(old, EXIT_LIMIT);
        let old_log = guest::read_lossy(&s.log(&old_name));
        assert!(
            status.is_some_and(|s| s.success()),
            "the old daemon did not exit 0 after the upgrade ({status:?})\n{}",
            transcript()
        );
        assert!(
            old_log.contains("answered its first request; exiting"),
            "the old daemon exited before the new one answered a request:\n{old_log}"
        );
        let new_log = guest::read_lossy(&s.log(&name));
        assert!(
            new_log.contains("upgrade: serving the session of pid"),
            "{}",
            transcript()
        );
        // What this build says of the version the session moved in (the previous release's
        // log does not say).
        let version = if (old_build, new_build) == (Build::This, Build::This) {
            2
        } else {
            1
        };
        if old_build == Build::This {
            assert!(
                old_log.contains(&format!("device state version {version}), ")),
                "the old daemon did not save version {version}\n{}",
                transcript()
            );
        }
        if new_build == Build::This {
            assert!(
                new_log.contains(&format!("(device state version {version}) after")),
                "the new daemon did not load version {version}\n{}",
                transcript()
            );
        }
        assert_eq!(
            fs::read_to_string(&s.pid_file).unwrap().trim(),
            new_pid.to_string(),
            "the pid file names the new daemon"
        );
        // The guest's I/O goes on, served by the new daemon, which holds its locks.
        rounds = s.wait_rounds(rounds, &format!("after upgrade {generation}"), &transcript);
        assert_locks_held_by(&s, new_pid, &name);
        serving = 0;
    }
    fs::write(s.share.join(".stop"), b"").unwrap();
    let qemu_at = reaper.0.len() - 1;
    let status = exited(&mut reaper.0[qemu_at], guest.timeout);
    live::assert_passed(&console, status, "the guest failed", transcript);
    // The last daemon ends with its front-end and takes the socket files with it.
    let last = exited(&mut reaper.0[0], EXIT_LIMIT);
    assert!(last.is_some_and(|s| s.success()), "{}", transcript());
    for f in [&s.socket, &s.pid_file] {
        assert!(!f.exists(), "{} left behind", f.display());
    }
    assert!(!s.logs.join("vfs.sock.upgrade").exists());
    println!(
        "{} rounds of fio; {}",
        s.rounds(),
        guest::read_lossy(&s.log("d0"))
            .lines()
            .find(|l| l.contains("took the session over after"))
            .unwrap_or("")
    );
}

#[test]
fn upgrades_twice_while_the_guest_runs_fio() {
    upgrades_while_the_guest_runs_fio(&[Build::This, Build::This, Build::This]);
}

/// From the previous release's daemon to this build's: the session in version 1.
#[test]
fn from_the_previous_release_while_the_guest_runs_fio() {
    upgrades_while_the_guest_runs_fio(&[Build::Previous, Build::This]);
}

/// From this build's daemon back to the previous release's: its hello says no versions,
/// which this build takes for version 1 only, and the session (which fits it) goes in 1.
#[test]
fn to_the_previous_release_while_the_guest_runs_fio() {
    upgrades_while_the_guest_runs_fio(&[Build::This, Build::Previous]);
}

/// The control protocol across releases: the previous release (1e60aa4) has no control
/// socket, so this release's `ctl` against it answers one line naming the socket it looked
/// for, exit 2, and the daemon serves on untouched (the `protocol` request and the answer of a
/// daemon from before it are unit-tested in src/ctl/client.rs).
#[test]
fn ctl_against_the_previous_release_says_why_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let branch = dir.path().join("b");
    fs::create_dir(&branch).unwrap();
    let sock = dir.path().join("s");
    let mut old = testkit::proc::start(
        Command::new(Build::Previous.path())
            .arg("--socket-path")
            .arg(&sock)
            .arg("--branch")
            .arg(&branch)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
        &sock,
    );
    for args in [
        &["keys"][..],
        &["get", "pid"][..],
        &["set", "minfreespace", "1G"][..],
    ] {
        let line = testkit::ctl::fails(&sock, args);
        assert!(
            line.contains(&format!("{}.ctl", sock.display())),
            "{args:?}: {line}"
        );
    }
    assert!(
        old.try_wait().unwrap().is_none(),
        "the previous release's daemon exited"
    );
    old.kill().unwrap();
    old.wait().unwrap();
}

#[test]
fn a_new_daemon_that_cannot_take_the_session_leaves_the_old_one_serving() {
    guest::require_qemu();
    let _slot = guest::one_guest();
    let s = Setup::new();
    let (guest, mut reaper, console) = s.boot(Build::This);
    let first_pid = reaper.0[0].id();
    let transcript = || {
        format!(
            "----- console -----\n{}\n----- d0 -----\n{}\n----- d1 -----\n{}",
            guest::read_lossy(&console),
            guest::read_lossy(&s.log("d0")),
            guest::read_lossy(&s.log("d1"))
        )
    };
    let rounds = s.wait_rounds(0, "before the upgrade", &transcript);
    // Over another (empty) directory: the guest's working directory, open file and locked
    // files are not there, and --migration-on-error is abort.
    let mut new = s.upgrade(&s.other, "d1", Build::This);
    let status = exited(&mut new, EXIT_LIMIT);
    assert!(
        status.is_some_and(|s| !s.success()),
        "the new daemon should have given up: {status:?}\n{}",
        transcript()
    );
    let old_log = guest::read_lossy(&s.log("d0"));
    assert!(
        old_log.contains("the new daemon gave up"),
        "{}",
        transcript()
    );
    assert!(
        reaper.0[0].try_wait().unwrap().is_none(),
        "the old daemon exited"
    );
    assert_eq!(
        fs::read_to_string(&s.pid_file).unwrap().trim(),
        first_pid.to_string()
    );
    assert!(
        s.socket.exists() && s.logs.join("vfs.sock.upgrade").exists(),
        "the failed daemon removed the old one's socket files"
    );
    // The old daemon serves on: more rounds, its locks held again.
    s.wait_rounds(rounds, "after the failed upgrade", &transcript);
    assert_locks_held_by(&s, first_pid, "the old daemon");
    fs::write(s.share.join(".stop"), b"").unwrap();
    let status = exited(&mut reaper.0[1], guest.timeout);
    live::assert_passed(&console, status, "the guest failed", transcript);
}

/// A daemon (no guest) on `s`'s socket, and the outcome of `union-virtiofsd ... --upgrade`.
fn refused(s: &Setup, extra: &[&str]) -> (i32, String) {
    let b = s.backend(&s.share, Build::This);
    let sock = s.socket.to_str().unwrap();
    let out = Command::new(&b.program)
        .args(b.args.iter().map(|a| a.replace("{socket}", sock)))
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn upgrades_that_cannot_happen_say_why() {
    let s = Setup::new();
    let pid = s.pid_file.to_str().unwrap().to_owned();
    // No daemon runs.
    let (code, err) = refused(&s, &["--upgrade", &pid]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("cannot reach the running daemon"), "{err}");
    // Not a pid file.
    let (code, err) = refused(&s, &["--upgrade", "/tmp/whatever"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("expected the running daemon's <socket>.pid"),
        "{err}"
    );
    // --fd: config refuses it (one line, exit 2).
    let b = s.backend(&s.share, Build::This);
    let out = Command::new(&b.program)
        .args(["--fd", "0", "--shared-dir"])
        .arg(&s.share)
        .args(["--upgrade", &pid])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    // A running daemon with no front-end yet refuses, and goes on waiting for one.
    let mut running =
        guest::spawn_backend(&s.backend(&s.share, Build::This), &s.socket, &s.log("d0"));
    let (code, err) = refused(&s, &["--upgrade", &pid]);
    guest::stop(&mut running);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("refused the upgrade: no front-end is connected yet"),
        "{err}"
    );
}
