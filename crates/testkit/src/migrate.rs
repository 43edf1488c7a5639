//! Live migration of a real test guest between two QEMUs on this host, each with a backend of
//! its own over the same host directories: the source boots the scenario, the destination
//! waits with `-incoming`, QMP moves the guest over when the scenario asks for it, and the
//! scenario learns the outcome from a file the host makes in the share. Never skips; starts
//! nothing but the two backends and two QEMUs, and kills them all if a panic unwinds.
//!
//! Console protocol on top of guest.rs's: the scenario prints [`MIGRATE_NOW`] when the host
//! should migrate, then waits (bounded) for [`Plan::signal`], which the host creates with
//! `done` (the guest now runs on the destination) or `failed` (it still runs on the source)
//! once the migration has ended. `=== SCENARIO EXIT N ===` then appears on whichever QEMU runs
//! the guest. [`SCENARIO_HELPERS`] has the shell side.

use std::fs;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::thread;
use std::time::{Duration, Instant};

use crate::guest::{self, Backend, Guest, Reaper, PRELUDE};
use crate::qmp::{Json, Qmp};

/// The console line that asks the host to migrate now.
pub const MIGRATE_NOW: &str = "=== MIGRATE NOW ===";

/// Shell helpers for migration scenarios (use after [`PRELUDE`], which [`run_migration`]
/// prepends): `migrate_now` prints [`MIGRATE_NOW`]; `wait_migrated [FILE]` waits up to 180 s
/// for the host's signal (default `/mnt/.migrated`) and prints its contents, `done` or
/// `failed` (`outcome=$(wait_migrated)`: under `set -e` a timeout ends the scenario, its
/// message on stderr so that the substitution does not swallow it).
pub const SCENARIO_HELPERS: &str = r#"
migrate_now() { echo "=== MIGRATE NOW ==="; }
wait_migrated() {
    f=${1:-/mnt/.migrated}; i=0
    while [ ! -e "$f" ]; do
        i=$((i+1)); [ $i -lt 900 ] || { echo "FAIL: no $f after 180 s" >&2; exit 1; }; sleep 0.2
    done
    cat "$f"
}
"#;

/// How long a QEMU may take to open its QMP socket.
const QMP_DEADLINE: Duration = Duration::from_secs(30);
/// How long a backend may take to exit by itself once its QEMU is gone.
const DAEMON_EXIT_GRACE: Duration = Duration::from_secs(5);
/// How long a QEMU may take to exit after `quit`.
const QUIT_GRACE: Duration = Duration::from_secs(10);
/// Interval of every bounded poll.
const POLL: Duration = Duration::from_millis(50);

/// Indices into the [`Reaper`]: stopped in reverse, QEMUs before their backends.
const SRC_DAEMON: usize = 0;
const DST_DAEMON: usize = 1;
const SRC_QEMU: usize = 2;
const DST_QEMU: usize = 3;

/// What the host can see while a hook runs.
pub struct Ctx<'a> {
    /// Process id of the source backend (leader of its process group).
    pub source_daemon: u32,
    /// Process id of the destination backend (leader of its process group).
    pub dest_daemon: u32,
    /// Process id of the source QEMU.
    pub source_qemu: u32,
    /// Process id of the destination QEMU.
    pub dest_qemu: u32,
    /// The run's scratch directory (sockets, logs).
    pub work: &'a Path,
}

/// A host-side hook.
pub type Hook = Box<dyn FnOnce(&Ctx<'_>)>;

/// How to run one migration.
pub struct Plan {
    /// Host path the harness creates, containing `done` or `failed`, once the migration has
    /// ended (e.g. `<branch>/.migrated`, seen by the guest as `/mnt/.migrated`).
    pub signal: PathBuf,
    /// Console line that starts the migration (default [`MIGRATE_NOW`]).
    pub marker: String,
    /// Enable QEMU's `return-path` capability on both sides (default): the destination then
    /// reports a failure to load the state back to the source, which fails the migration and
    /// resumes the guest by itself. Without it the source calls the migration `completed` as
    /// soon as it has sent everything; the harness then does what a management layer does:
    /// it waits for the destination to run, and if the destination fails instead, resumes
    /// the source with `cont`.
    pub return_path: bool,
    /// Limit from `migrate` until the migration has ended; after it the harness cancels it.
    pub migrate_timeout: Duration,
    /// Runs after the marker, before `migrate` (e.g. to remove a file the guest holds open).
    pub before_migrate: Option<Hook>,
    /// Runs once the destination runs the guest and the source QEMU is gone, before the
    /// guest is signalled.
    pub after_switch: Option<Hook>,
    /// Runs after a failed migration, once the source runs the guest again, before the guest
    /// is signalled.
    pub after_failure: Option<Hook>,
}

impl Plan {
    /// A plan that signals through `signal`, with the defaults.
    pub fn new(signal: impl Into<PathBuf>) -> Plan {
        Plan {
            signal: signal.into(),
            marker: MIGRATE_NOW.to_owned(),
            return_path: true,
            migrate_timeout: Duration::from_secs(60),
            before_migrate: None,
            after_switch: None,
            after_failure: None,
        }
    }

    /// Sets [`Plan::before_migrate`].
    pub fn before_migrate(mut self, f: impl FnOnce(&Ctx<'_>) + 'static) -> Plan {
        self.before_migrate = Some(Box::new(f));
        self
    }

    /// Sets [`Plan::after_switch`].
    pub fn after_switch(mut self, f: impl FnOnce(&Ctx<'_>) + 'static) -> Plan {
        self.after_switch = Some(Box::new(f));
        self
    }

    /// Sets [`Plan::after_failure`].
    pub fn after_failure(mut self, f: impl FnOnce(&Ctx<'_>) + 'static) -> Plan {
        self.after_failure = Some(Box::new(f));
        self
    }

    /// Sets [`Plan::return_path`].
    pub fn return_path(mut self, on: bool) -> Plan {
        self.return_path = on;
        self
    }
}

/// How the migration ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The destination runs the guest; the source QEMU was quit.
    Completed,
    /// The guest went on running on the source. The error: query-migrate's `error-desc`, a
    /// QMP command's error, or the destination QEMU's own messages if only it noticed.
    Failed(String),
    /// Never attempted: the guest did not print the marker (see the source console).
    NotStarted,
}

/// Which QEMU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The QEMU that booted the guest.
    Source,
    /// The QEMU started with `-incoming`.
    Dest,
}

/// Everything one migration run produced.
#[derive(Debug)]
pub struct MigrationRun {
    /// The source QEMU's output: serial console up to the switch-over, then QEMU's messages.
    pub source_console: String,
    /// The destination QEMU's output: its messages, and the console after the switch-over.
    pub dest_console: String,
    /// The source backend's stdout and stderr.
    pub source_daemon_log: String,
    /// The destination backend's stdout and stderr.
    pub dest_daemon_log: String,
    /// How the migration ended.
    pub outcome: Outcome,
    /// Status from `=== SCENARIO EXIT N ===` (on either console); `None` if never printed.
    pub exit_code: Option<i32>,
    /// The console that printed the exit marker.
    pub exit_on: Option<Side>,
    /// The source's last query-migrate reply (`status`, `total-time`, `downtime`, `ram`, ...).
    pub query_migrate: Option<Json>,
    /// query-migrate's `total-time`: from `migrate` to the end, as QEMU measured it.
    pub total_time: Option<Duration>,
    /// query-migrate's `downtime`: how long the guest was stopped for the switch-over.
    pub downtime: Option<Duration>,
    /// Host-measured time from `migrate` until the outcome was known (destination running, or
    /// source running again after a failure).
    pub migrate_wall: Option<Duration>,
    /// How the source backend ended by itself once its QEMU was gone; `None` if it was still
    /// running 5 s later (`DAEMON_EXIT_GRACE`) and the harness stopped it.
    pub source_daemon_exit: Option<ExitStatus>,
    /// The same for the destination backend.
    pub dest_daemon_exit: Option<ExitStatus>,
    /// How the source QEMU ended (`None`: killed at the time limit).
    pub source_qemu_exit: Option<ExitStatus>,
    /// How the destination QEMU ended (`None`: killed at the time limit).
    pub dest_qemu_exit: Option<ExitStatus>,
    /// QMP commands and replies on both sides (polled queries only when their status changed).
    pub qmp_log: String,
    /// Whether the run hit [`Guest::timeout`].
    pub timed_out: bool,
    /// Wall-clock time of the whole run.
    pub elapsed: Duration,
}

impl MigrationRun {
    /// The guest's output in order: the source console, then the destination's.
    pub fn console(&self) -> String {
        format!("{}\n{}", self.source_console, self.dest_console)
    }

    /// Lines between `=== BEGIN name ===` and `=== END name ===` (first such section, which
    /// may start on the source and end on the destination).
    pub fn section(&self, name: &str) -> Option<Vec<String>> {
        guest::section_of(&self.console(), name)
    }

    /// Panics, with the transcript, unless the scenario exited 0.
    pub fn assert_success(&self) {
        assert!(
            self.exit_code == Some(0),
            "guest scenario failed: exit_code={:?} outcome={:?} timed_out={}\n{}",
            self.exit_code,
            self.outcome,
            self.timed_out,
            self.transcript()
        );
    }

    /// Panics, with the transcript, unless the migration completed.
    pub fn assert_completed(&self) {
        assert!(
            self.outcome == Outcome::Completed,
            "migration did not complete: {:?}\n{}",
            self.outcome,
            self.transcript()
        );
    }

    /// Both consoles, both backend logs and the QMP exchange, for failure messages.
    pub fn transcript(&self) -> String {
        format!(
            "outcome={:?} exit_code={:?} on {:?}, total_time={:?} downtime={:?} \
             source daemon exit={:?} dest daemon exit={:?} source qemu exit={:?} dest qemu \
             exit={:?}\n----- source console -----\n{}\n----- destination console -----\n{}\n\
             ----- source backend log (last 100 lines) -----\n{}\n\
             ----- destination backend log (last 100 lines) -----\n{}\n----- QMP -----\n{}-----",
            self.outcome,
            self.exit_code,
            self.exit_on,
            self.total_time,
            self.downtime,
            self.source_daemon_exit,
            self.dest_daemon_exit,
            self.source_qemu_exit,
            self.dest_qemu_exit,
            self.source_console,
            self.dest_console,
            tail(&self.source_daemon_log, 100),
            tail(&self.dest_daemon_log, 100),
            self.qmp_log
        )
    }
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The process ids in process group `pgid` (a backend and anything it forked).
pub fn group_pids(pgid: u32) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        // /proc/PID/stat: "pid (comm) state ppid pgrp ..."; comm may hold spaces and parens.
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let pgrp = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(2))
            .and_then(|p| p.parse::<u32>().ok());
        if pgrp == Some(pgid) {
            pids.push(pid);
        }
    }
    pids.sort_unstable();
    pids
}

/// What the descriptors of process `pid` point to, as its /proc/PID/fd links name them (paths
/// as seen from its root and mount namespace; a removed file ends in ` (deleted)`).
pub fn open_paths(pid: u32) -> Vec<PathBuf> {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| fs::read_link(e.path()).ok())
        .collect()
}

/// Whether a process of group `pgid` has a descriptor (O_PATH ones included) on the file
/// `file` describes (same device and inode; works across a sandbox's mount namespace and for
/// removed files, unlike [`open_paths`]).
pub fn group_holds(pgid: u32, file: &fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    group_pids(pgid).into_iter().any(|pid| {
        fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten()
            // Opening the magic link reaches the file itself, wherever it lives.
            .filter_map(|e| fs::metadata(e.path()).ok())
            .any(|m| m.dev() == file.dev() && m.ino() == file.ino())
    })
}

/// The file a process of group `pgid` has a descriptor on whose /proc/PID/fd link ends in the
/// file name `name` (e.g. `f (deleted)` for a removed `f`), read through that descriptor: the
/// way to find a file that has no path any more.
pub fn group_file_named(pgid: u32, name: &str) -> Option<fs::Metadata> {
    group_pids(pgid).into_iter().find_map(|pid| {
        fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten()
            .find_map(|e| {
                let link = fs::read_link(e.path()).ok()?;
                (link.file_name()? == name)
                    .then(|| fs::metadata(e.path()).ok())
                    .flatten()
            })
    })
}

/// Boots `guest` with `scenario` on a source QEMU against `source`, starts a destination QEMU
/// (`-incoming`) against `dest`, migrates when the console shows [`Plan::marker`], signals the
/// outcome through [`Plan::signal`], and waits for the guest to power off on whichever QEMU
/// runs it. Guests are serialized with guest.rs's. Panics on harness problems (and if a hook
/// panics, with the transcript); a failed migration or scenario is in the result.
pub fn run_migration(
    source: &Backend,
    dest: &Backend,
    guest: &Guest,
    scenario: &str,
    mut plan: Plan,
) -> MigrationRun {
    guest::require_qemu();
    let _serial = guest::serialize_guests();
    // Prepared (or the run fails) before anything starts.
    guest::images();

    let work = tempfile::Builder::new()
        .prefix("uvfs-migrate-")
        .tempdir()
        .expect("temp dir");
    let w = work.path();
    let script = w.join("scenario.sh");
    fs::write(
        &script,
        format!("{PRELUDE}\n{SCENARIO_HELPERS}\n{scenario}\n"),
    )
    .expect("write scenario");
    let (src_sock, dst_sock) = (w.join("source.sock"), w.join("dest.sock"));
    let (src_qmp_sock, dst_qmp_sock) = (w.join("source-qmp.sock"), w.join("dest-qmp.sock"));
    let incoming = format!("unix:{}", w.join("migration.sock").display());
    let logs = Logs {
        src_daemon: w.join("source-backend.log"),
        dst_daemon: w.join("dest-backend.log"),
        src_console: w.join("source-console.log"),
        dst_console: w.join("dest-console.log"),
    };

    let mut reaper = Reaper(Vec::new());
    reaper
        .0
        .push(guest::spawn_backend(source, &src_sock, &logs.src_daemon));
    reaper
        .0
        .push(guest::spawn_backend(dest, &dst_sock, &logs.dst_daemon));
    let start = Instant::now();
    let deadline = start + guest.timeout;
    let mut src_cmd = guest::qemu_command(guest, &src_sock, &script, w);
    src_cmd.arg("--qmp").arg(&src_qmp_sock);
    reaper
        .0
        .push(guest::spawn_logged(&mut src_cmd, &logs.src_console));
    // The same machine, devices, kernel and initrd: only the sockets differ.
    let mut dst_cmd = guest::qemu_command(guest, &dst_sock, &script, w);
    dst_cmd
        .arg("--qmp")
        .arg(&dst_qmp_sock)
        .args(["--incoming", &incoming]);
    reaper
        .0
        .push(guest::spawn_logged(&mut dst_cmd, &logs.dst_console));

    let mut run = Runner {
        reaper,
        logs,
        src_qmp: connect(&src_qmp_sock, "source"),
        dst_qmp: connect(&dst_qmp_sock, "destination"),
        work: w,
        incoming,
        deadline,
        exits: [None; 4],
    };
    let driven = panic::catch_unwind(AssertUnwindSafe(|| run.drive(&mut plan)));
    let (outcome, stats) = match driven {
        Ok(r) => r,
        Err(p) => {
            let msg = panic_message(&p);
            // Collect what there is without waiting for the guest.
            run.deadline = Instant::now();
            let partial = run.finish(Outcome::NotStarted, Stats::default(), start);
            panic!(
                "migration harness or hook panicked: {msg}\n{}",
                partial.transcript()
            );
        }
    };
    run.finish(outcome, stats, start)
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "(non-string panic)".to_owned())
}

fn connect(path: &Path, which: &str) -> Qmp {
    Qmp::connect(path, Instant::now() + QMP_DEADLINE)
        .unwrap_or_else(|e| panic!("cannot talk QMP to the {which} QEMU: {e}"))
}

struct Logs {
    src_daemon: PathBuf,
    dst_daemon: PathBuf,
    src_console: PathBuf,
    dst_console: PathBuf,
}

/// Numbers from the source's final query-migrate.
#[derive(Default)]
struct Stats {
    query: Option<Json>,
    wall: Option<Duration>,
}

/// The four processes of one run and the two QMP sessions.
struct Runner<'a> {
    reaper: Reaper,
    logs: Logs,
    src_qmp: Qmp,
    dst_qmp: Qmp,
    work: &'a Path,
    /// The destination's `-incoming` URI.
    incoming: String,
    /// When the guest's time is up.
    deadline: Instant,
    /// Exit statuses seen so far, by reaper index.
    exits: [Option<ExitStatus>; 4],
}

impl Runner<'_> {
    fn child(&mut self, i: usize) -> &mut Child {
        &mut self.reaper.0[i]
    }

    /// Whether process `i` has exited (recording its status).
    fn exited(&mut self, i: usize) -> bool {
        if self.exits[i].is_none() {
            self.exits[i] = self.child(i).try_wait().ok().flatten();
        }
        self.exits[i].is_some()
    }

    /// Waits for process `i` to exit until `until`.
    fn wait_exit(&mut self, i: usize, until: Instant) -> bool {
        while !self.exited(i) {
            if Instant::now() >= until {
                return false;
            }
            thread::sleep(POLL);
        }
        true
    }

    fn ctx(&self) -> Ctx<'_> {
        Ctx {
            source_daemon: self.reaper.0[SRC_DAEMON].id(),
            dest_daemon: self.reaper.0[DST_DAEMON].id(),
            source_qemu: self.reaper.0[SRC_QEMU].id(),
            dest_qemu: self.reaper.0[DST_QEMU].id(),
            work: self.work,
        }
    }

    fn run_hook(&self, hook: Option<Hook>) {
        if let Some(f) = hook {
            f(&self.ctx());
        }
    }

    /// Waits for the marker, migrates, runs the hooks and signals the guest; returns once the
    /// guest has been told (its end is awaited by [`Runner::finish`]).
    fn drive(&mut self, plan: &mut Plan) -> (Outcome, Stats) {
        if plan.return_path {
            for qmp in [&mut self.src_qmp, &mut self.dst_qmp] {
                qmp.set_capability("return-path", true)
                    .unwrap_or_else(|e| panic!("cannot enable return-path: {e}"));
            }
        }
        if !self.wait_for_marker(&plan.marker) {
            return (Outcome::NotStarted, Stats::default());
        }
        self.run_hook(plan.before_migrate.take());

        let t0 = Instant::now();
        let mut stats = Stats::default();
        let uri = self.incoming.clone();
        let mut outcome = match self.src_qmp.migrate(&uri) {
            Err(e) => Outcome::Failed(format!("migrate: {e}")),
            Ok(()) => self.poll_migration(t0 + plan.migrate_timeout, &mut stats),
        };
        // The source may call it completed although the destination failed to load the state
        // (always so without return-path): only a running destination is a completed migration.
        if outcome == Outcome::Completed {
            if let Err(e) = self.confirm_dest(t0 + plan.migrate_timeout) {
                outcome = Outcome::Failed(e);
            }
        }
        stats.wall = Some(t0.elapsed());

        match outcome {
            Outcome::Completed => {
                // As a management layer does: the source has handed over, quit it.
                let _ = self.src_qmp.quit();
                let until = Instant::now() + QUIT_GRACE;
                self.wait_exit(SRC_QEMU, until);
                let until = Instant::now() + DAEMON_EXIT_GRACE;
                self.wait_exit(SRC_DAEMON, until);
                self.run_hook(plan.after_switch.take());
                signal(&plan.signal, "done");
            }
            Outcome::Failed(_) => {
                self.resume_source();
                // The destination has nothing to run: it exits by itself after a failed load,
                // else (e.g. it never got a stream) it is quit.
                if !self.wait_exit(DST_QEMU, Instant::now() + QUIT_GRACE) {
                    let _ = self.dst_qmp.quit();
                    self.wait_exit(DST_QEMU, Instant::now() + QUIT_GRACE);
                }
                let until = Instant::now() + DAEMON_EXIT_GRACE;
                self.wait_exit(DST_DAEMON, until);
                self.run_hook(plan.after_failure.take());
                signal(&plan.signal, "failed");
            }
            Outcome::NotStarted => unreachable!("a migration was attempted"),
        }
        (outcome, stats)
    }

    /// Polls the source console for `marker` until the guest's time is up or the source
    /// QEMU exits.
    fn wait_for_marker(&mut self, marker: &str) -> bool {
        loop {
            let console = guest::read_lossy(&self.logs.src_console);
            if console.lines().any(|l| l.trim_end_matches('\r') == marker) {
                return true;
            }
            if self.exited(SRC_QEMU) || Instant::now() >= self.deadline {
                return false;
            }
            thread::sleep(POLL);
        }
    }

    /// Polls query-migrate on the source until it ends (cancelling it at `until`).
    fn poll_migration(&mut self, until: Instant, stats: &mut Stats) -> Outcome {
        let mut last_status = String::new();
        loop {
            let reply = match self.src_qmp.query_migrate(false) {
                Ok(r) => r,
                Err(e) => return Outcome::Failed(format!("query-migrate: {e}")),
            };
            let status = reply
                .get("status")
                .and_then(Json::as_str)
                .unwrap_or("")
                .to_owned();
            if status != last_status {
                self.src_qmp
                    .log
                    .push_str(&format!("<- (query-migrate) {reply}\n"));
                last_status.clone_from(&status);
            }
            stats.query = Some(reply.clone());
            match status.as_str() {
                "completed" => return Outcome::Completed,
                "failed" | "cancelled" => {
                    let desc = reply.get("error-desc").and_then(Json::as_str);
                    return Outcome::Failed(desc.unwrap_or(&status).to_owned());
                }
                _ if Instant::now() >= until => {
                    let _ = self.src_qmp.execute("migrate_cancel", &[]);
                    return Outcome::Failed(format!("timed out in state {status:?}"));
                }
                _ => thread::sleep(POLL),
            }
        }
    }

    /// Waits until the destination runs the guest; the error says why it does not.
    fn confirm_dest(&mut self, until: Instant) -> Result<(), String> {
        let state = loop {
            match self.dst_qmp.status() {
                Ok(s) if s == "running" => return Ok(()),
                Ok(_) if Instant::now() < until && !self.exited(DST_QEMU) => thread::sleep(POLL),
                Ok(s) => break format!("status {s}"),
                Err(e) => break e.to_string(),
            }
        };
        // Exited (EOF on QMP) or stuck: its own messages say why.
        self.wait_exit(DST_QEMU, Instant::now() + QUIT_GRACE);
        let own: Vec<String> = guest::read_lossy(&self.logs.dst_console)
            .lines()
            .filter(|l| l.starts_with("qemu-system"))
            .map(str::to_owned)
            .collect();
        Err(format!(
            "the destination does not run the guest ({state}): {}",
            own.join(" | ")
        ))
    }

    /// Makes sure the source runs the guest again after a failed migration (QEMU resumes it
    /// by itself unless it had already called the migration completed).
    fn resume_source(&mut self) {
        if self.exited(SRC_QEMU) {
            return;
        }
        match self.src_qmp.status() {
            Ok(s) if s == "running" => {}
            Ok(_) => {
                let _ = self.src_qmp.cont();
            }
            Err(e) => panic!("cannot query the source after a failed migration: {e}"),
        }
    }

    /// Waits for the guest to end, stops whatever is left, and collects the results.
    fn finish(mut self, outcome: Outcome, stats: Stats, start: Instant) -> MigrationRun {
        let running = match outcome {
            Outcome::Completed => DST_QEMU,
            _ => SRC_QEMU,
        };
        let timed_out = !self.wait_exit(running, self.deadline);
        let elapsed = start.elapsed();
        // The other QEMU has nothing to run: quit it (a destination still waiting for a
        // stream that never came, or a source that was never asked to migrate).
        let other = if running == SRC_QEMU {
            DST_QEMU
        } else {
            SRC_QEMU
        };
        if !self.exited(other) {
            let qmp = if other == SRC_QEMU {
                &mut self.src_qmp
            } else {
                &mut self.dst_qmp
            };
            let _ = qmp.quit();
            self.wait_exit(other, Instant::now() + QUIT_GRACE);
        }
        let until = Instant::now() + DAEMON_EXIT_GRACE;
        self.wait_exit(SRC_DAEMON, until);
        self.wait_exit(DST_DAEMON, until);
        let exits = self.exits;
        let qmp_log = format!(
            "source:\n{}destination:\n{}",
            self.src_qmp.log, self.dst_qmp.log
        );
        drop(self.reaper); // stops whatever is still running

        let source_console = guest::read_lossy(&self.logs.src_console);
        let dest_console = guest::read_lossy(&self.logs.dst_console);
        let (exit_code, exit_on) = match guest::scenario_exit(&dest_console) {
            Some(c) => (Some(c), Some(Side::Dest)),
            None => match guest::scenario_exit(&source_console) {
                Some(c) => (Some(c), Some(Side::Source)),
                None => (None, None),
            },
        };
        let ms = |key: &str| {
            let q = stats.query.as_ref()?;
            q.get(key).and_then(Json::as_u64).map(Duration::from_millis)
        };
        MigrationRun {
            source_daemon_log: guest::read_lossy(&self.logs.src_daemon),
            dest_daemon_log: guest::read_lossy(&self.logs.dst_daemon),
            source_console,
            dest_console,
            total_time: ms("total-time"),
            downtime: ms("downtime"),
            query_migrate: stats.query,
            migrate_wall: stats.wall,
            outcome,
            exit_code,
            exit_on,
            source_daemon_exit: exits[SRC_DAEMON],
            dest_daemon_exit: exits[DST_DAEMON],
            source_qemu_exit: exits[SRC_QEMU],
            dest_qemu_exit: exits[DST_QEMU],
            qmp_log,
            timed_out,
            elapsed,
        }
    }
}

/// Tells the guest how the migration ended (written whole, then renamed into place, so the
/// guest never reads a partial file).
fn signal(path: &Path, what: &str) {
    let tmp = path.with_extension("signal-tmp");
    fs::write(&tmp, format!("{what}\n")).expect("write the migration signal");
    fs::rename(&tmp, path).expect("publish the migration signal");
}
