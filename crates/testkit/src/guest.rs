//! Real-guest end-to-end harness: starts a vhost-user-fs backend on a temporary socket, boots the
//! test guest (qemu/run-guest.sh, TCG) with a scenario shell script, and returns the serial console
//! and the backend's log. It never skips: a missing kernel, initramfs or QEMU is a test failure.
//!
//! Console protocol (printed by qemu/init): `=== UVFS BOOTED <uptime> ===`,
//! `=== UVFS MOUNTED <tag> ===` or `=== UVFS MOUNT FAILED <tag> ===`, `=== SCENARIO START ===`,
//! `=== SCENARIO EXIT <status> ===`, `=== UVFS POWEROFF ===`. Scenarios may print
//! `=== BEGIN <name> ===` ... `=== END <name> ===` sections, see [`GuestRun::section`].

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Condvar, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use std::os::unix::process::CommandExt;

/// Shell helpers prepended to every scenario. `set -eu`: the first failing command ends the
/// scenario with a non-zero `SCENARIO EXIT`.
pub const PRELUDE: &str = r#"set -eu
# fail MSG: end the scenario with status 1.
fail() { echo "FAIL: $*"; exit 1; }
# expect_eq ACTUAL EXPECTED WHAT
expect_eq() { [ "$1" = "$2" ] || fail "$3: expected '$2', got '$1'"; }
# expect_err TEXT SHELL-COMMAND: the command must fail and print TEXT (e.g. an strerror) on stderr.
expect_err() {
    if out=$(sh -c "$2" 2>&1); then fail "expected failure with '$1': $2"; fi
    case "$out" in *"$1"*) echo "ok (failed as expected): $2: $out" ;;
    *) fail "$2: expected error '$1', got: $out" ;; esac
}
# section NAME COMMAND...: print the command's output between markers for the host to parse.
section() { n=$1; shift; echo "=== BEGIN $n ==="; "$@"; echo "=== END $n ==="; }
"#;

/// How long the daemon may take to create its socket.
const SOCKET_DEADLINE: Duration = Duration::from_secs(20);
/// How long the backend may take to exit after SIGTERM once the guest is gone.
const BACKEND_EXIT_GRACE: Duration = Duration::from_secs(5);

/// A vhost-user-fs backend command line. `{socket}` in any argument is replaced by the socket path.
#[derive(Clone, Debug)]
pub struct Backend {
    /// Program to run.
    pub program: PathBuf,
    /// Arguments, with `{socket}` placeholders.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Working directory (default: the test's).
    pub cwd: Option<PathBuf>,
}

/// Branch modes as written on the daemon's command line.
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    /// Read-write.
    Rw,
    /// Read-only: never modified.
    Ro,
    /// No-create: existing files are writable, nothing new is created there.
    Nc,
}

impl Backend {
    /// Our daemon (`union-virtiofsd`) over `branches`, with debug logging and `extra` arguments.
    pub fn union(branches: &[(&Path, Mode)], extra: &[&str]) -> Self {
        let mut args = vec!["--socket-path".to_owned(), "{socket}".to_owned()];
        for (path, mode) in branches {
            let mode = match mode {
                Mode::Rw => "RW",
                Mode::Ro => "RO",
                Mode::Nc => "NC",
            };
            args.push("--branch".to_owned());
            args.push(format!("{}={mode}", path.display()));
        }
        args.extend(["--log-level", "debug"].map(str::to_owned));
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        Self {
            program: daemon_path(),
            args,
            env: Vec::new(),
            cwd: None,
        }
    }

    /// The same daemon logging at info level: one debug line per request would slow a long
    /// run and flood its log.
    pub fn at_info(mut self) -> Self {
        for a in self.args.iter_mut().filter(|a| *a == "debug") {
            *a = "info".to_owned();
        }
        self
    }

    /// The same command line run by `build`'s binary (only with options that build knows:
    /// the previous release's `--help` lists fewer).
    pub fn built_by(mut self, build: crate::builds::Build) -> Self {
        self.program = build.path();
        self
    }

    /// Any backend, e.g. the reference virtiofsd:
    /// `Backend::command("virtiofsd", &["--socket-path", "{socket}", "--shared-dir", dir, "--cache", "never"])`.
    pub fn command(program: impl Into<PathBuf>, args: &[&str]) -> Self {
        Self {
            program: program.into(),
            args: args.iter().map(|s| (*s).to_owned()).collect(),
            env: Vec::new(),
            cwd: None,
        }
    }
}

/// virtiofsd 1.14, the reference daemon: `$UVFS_VIRTIOFSD` (scripts/test.sh sets it), else
/// what scripts/lib.sh's `install_virtiofsd` prints (installing it into the cache once); panics
/// with the reason if neither gives one.
pub fn virtiofsd_binary() -> PathBuf {
    static PATH: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found = PATH.get_or_init(|| match std::env::var_os("UVFS_VIRTIOFSD") {
        Some(p) => Ok(PathBuf::from(p)),
        None => run_shell_path(". scripts/lib.sh && install_virtiofsd"),
    });
    let path = found
        .clone()
        .unwrap_or_else(|e| panic!("virtiofsd 1.14: {e} (or set UVFS_VIRTIOFSD)"));
    assert!(
        path.is_file(),
        "virtiofsd not found at {} (set UVFS_VIRTIOFSD)",
        path.display()
    );
    path
}

/// The daemon binary: `$UVFS_DAEMON` when set (examples, benchmarks, and scripts/test.sh's run
/// of guest tests against the release build), else cargo's (see [`crate::bin::daemon_path`]).
pub fn daemon_path() -> PathBuf {
    match std::env::var_os("UVFS_DAEMON") {
        Some(path) => PathBuf::from(path),
        None => crate::bin::daemon_path(),
    }
}

/// Guest (QEMU) settings.
#[derive(Clone, Debug)]
pub struct Guest {
    /// virtio-fs tag the guest mounts on /mnt.
    pub tag: String,
    /// Request queue size of the vhost-user-fs-pci device.
    pub queue_size: u32,
    /// Guest RAM, QEMU syntax.
    pub mem: String,
    /// Wall-clock limit for the whole guest run; QEMU and the backend are killed after it.
    pub timeout: Duration,
    /// Extra kernel command-line arguments.
    pub append: String,
    /// Debian suite to take the guest kernel from (`None`: the default, bookworm-backports).
    pub kernel_suite: Option<&'static str>,
    /// Virtual CPUs.
    pub smp: u32,
    /// Uncompressed cpio archives appended to the initramfs (extra programs for the guest).
    pub extra_initrd: Vec<PathBuf>,
    /// Boot without an initramfs, from the share itself (`append` says `root=… init=…`); the
    /// scenario is then not used.
    pub no_initrd: bool,
    /// A guest reboot boots the machine again against the same backend (only a poweroff ends
    /// the run); the scenario runs at every boot.
    pub reboot: bool,
}

impl Default for Guest {
    fn default() -> Self {
        Self {
            tag: "share".to_owned(),
            queue_size: 1024,
            mem: "512M".to_owned(),
            timeout: Duration::from_secs(120),
            append: String::new(),
            kernel_suite: None,
            smp: 1,
            extra_initrd: Vec::new(),
            no_initrd: false,
            reboot: false,
        }
    }
}

/// What one guest run produced.
#[derive(Debug)]
pub struct GuestRun {
    /// Everything QEMU printed: serial console (kernel + scenario output) and QEMU's own messages.
    pub console: String,
    /// The backend's stdout and stderr.
    pub daemon_log: String,
    /// Status from `=== SCENARIO EXIT N ===`; `None` if the guest never got that far.
    pub exit_code: Option<i32>,
    /// Whether the guest mounted the share.
    pub mounted: bool,
    /// Whether the run hit [`Guest::timeout`].
    pub timed_out: bool,
    /// Wall-clock time of the QEMU run (boot + scenario + poweroff).
    pub elapsed: Duration,
}

impl GuestRun {
    /// Panics, showing the console and the backend log, unless the scenario exited 0.
    pub fn assert_success(&self) {
        if self.exit_code != Some(0) {
            panic!(
                "guest scenario failed: exit_code={:?} mounted={} timed_out={}\n{}",
                self.exit_code,
                self.mounted,
                self.timed_out,
                self.transcript()
            );
        }
    }

    /// Console and backend log, for failure messages.
    pub fn transcript(&self) -> String {
        format!(
            "----- guest console -----\n{}\n----- backend log (last 200 lines) -----\n{}\n-----",
            self.console,
            tail(&self.daemon_log, 200)
        )
    }

    /// Lines printed between `=== BEGIN name ===` and `=== END name ===` (first such section).
    pub fn section(&self, name: &str) -> Option<Vec<String>> {
        section_of(&self.console, name)
    }
}

/// Lines of `console` between `=== BEGIN name ===` and `=== END name ===` (first such section).
pub fn section_of(console: &str, name: &str) -> Option<Vec<String>> {
    let begin = format!("=== BEGIN {name} ===");
    let end = format!("=== END {name} ===");
    let mut lines = console.lines().map(|l| l.trim_end_matches('\r'));
    lines.by_ref().find(|l| *l == begin)?;
    let mut out = Vec::new();
    for line in lines {
        if line == end {
            return Some(out);
        }
        out.push(line.to_owned());
    }
    None
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Repository root (two levels above this crate's manifest directory, crates/testkit).
pub fn repo_root() -> PathBuf {
    let testkit = Path::new(env!("CARGO_MANIFEST_DIR"));
    testkit
        .parent()
        .and_then(Path::parent)
        .expect("crates/testkit lies two levels below the repository root")
        .to_owned()
}

/// Kernel and generic initramfs, prepared once per test process by the scripts.
pub struct Images {
    /// vmlinuz.
    pub kernel: PathBuf,
    /// Generic initramfs (without a scenario).
    pub initrd: PathBuf,
}

/// Runs `scripts/NAME` and returns the path it prints as its last stdout line.
pub(crate) fn run_path_script(name: &str) -> Result<PathBuf, String> {
    run_path_script_with(name, &[], &[])
}

/// [`run_path_script`] with extra environment variables.
fn run_path_script_env(name: &str, env: &[(&str, &str)]) -> Result<PathBuf, String> {
    run_path_script_with(name, &[], env)
}

/// [`run_path_script`] with arguments.
fn run_path_script_args(name: &str, args: &[&str]) -> Result<PathBuf, String> {
    run_path_script_with(name, args, &[])
}

/// Runs `bash -c COMMAND` in the repository and returns the path it prints as its last line.
fn run_shell_path(command: &str) -> Result<PathBuf, String> {
    let out = Command::new("bash")
        .args(["-c", command])
        .current_dir(repo_root())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run bash: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.lines().last().map(str::trim) {
        Some(p) if out.status.success() && Path::new(p).is_file() => Ok(PathBuf::from(p)),
        _ => Err(format!(
            "`{command}` failed ({}): {stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}

fn run_path_script_with(
    name: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<PathBuf, String> {
    let script = repo_root().join("scripts").join(name);
    let out = Command::new("bash")
        .arg(&script)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path = stdout.lines().last().unwrap_or("").trim();
    if !out.status.success() || path.is_empty() || !Path::new(path).is_file() {
        return Err(format!(
            "{} failed ({}): {}{}",
            script.display(),
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(PathBuf::from(path))
}

/// The guest kernel and initramfs; panics with the reason if they cannot be prepared.
/// `UVFS_GUEST_KERNEL` / `UVFS_GUEST_INITRD` override the scripts.
pub fn images() -> &'static Images {
    static IMAGES: OnceLock<Result<Images, String>> = OnceLock::new();
    let prepared = IMAGES.get_or_init(|| {
        let pick = |var: &str, script: &str| match std::env::var_os(var) {
            Some(p) => Ok(PathBuf::from(p)),
            None => run_path_script(script),
        };
        Ok(Images {
            kernel: pick("UVFS_GUEST_KERNEL", "fetch-kernel.sh")?,
            initrd: pick("UVFS_GUEST_INITRD", "build-initramfs.sh")?,
        })
    });
    match prepared {
        Ok(images) => images,
        Err(e) => panic!(
            "cannot prepare the test guest (run scripts/install-deps.sh, scripts/fetch-kernel.sh, \
             scripts/build-initramfs.sh): {e}"
        ),
    }
}

/// The pjdfstest archive for [`Guest::extra_initrd`] (scripts/build-pjdfstest-initrd.sh, which
/// installs the suite once): `/bin/pjdfstest`, its libraries, its dummy users and
/// `/etc/pjdfstest.toml`.
pub fn pjdfstest_initrd() -> PathBuf {
    static ARCHIVE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    ARCHIVE
        .get_or_init(|| run_path_script("build-pjdfstest-initrd.sh"))
        .clone()
        .unwrap_or_else(|e| panic!("cannot prepare pjdfstest for the guest: {e}"))
}

/// An archive of `scripts/build-tools-initrd.sh [WHICH]` ("" for the tools), packed once per
/// test process.
fn tools_archive(which: &'static str) -> PathBuf {
    static ARCHIVES: Mutex<Vec<(&str, Result<PathBuf, String>)>> = Mutex::new(Vec::new());
    let mut packed = ARCHIVES.lock().unwrap_or_else(|e| e.into_inner());
    let r = match packed.iter().find(|(w, _)| *w == which) {
        Some((_, r)) => r.clone(),
        None => {
            let args: &[&str] = if which.is_empty() { &[] } else { &[which] };
            let r = run_path_script_args("build-tools-initrd.sh", args);
            packed.push((which, r.clone()));
            r
        }
    };
    r.unwrap_or_else(|e| panic!("cannot pack the guest's {which} tools: {e}"))
}

/// Host programs busybox lacks, for [`Guest::extra_initrd`] (scripts/build-tools-initrd.sh):
/// flock, cp, sync, stat, xfs_io, chattr, lsattr, getfattr, setfattr, getfacl and setfacl
/// under `/opt/tools/bin`.
pub fn tools_initrd() -> PathBuf {
    tools_archive("")
}

/// stress-ng under `/opt/tools/bin`, for [`Guest::extra_initrd`]
/// (`scripts/build-tools-initrd.sh stress`).
pub fn stress_initrd() -> PathBuf {
    tools_archive("stress")
}

/// fio under `/opt/tools/bin`, for [`Guest::extra_initrd`] (`scripts/build-tools-initrd.sh fio`).
pub fn fio_initrd() -> PathBuf {
    tools_archive("fio")
}

/// fsx under `/opt/tools/bin`, its every-operation mix `/opt/tools/fsx-all.toml` and the
/// O_DIRECT shim `/opt/tools/lib/fsx-odirect.so` (qemu/fsx-odirect.c), for
/// [`Guest::extra_initrd`] (`scripts/build-tools-initrd.sh fsx`).
pub fn fsx_initrd() -> PathBuf {
    tools_archive("fsx")
}

/// The guest kernel from Debian suite `suite` (fetched once per test process and suite).
pub fn kernel_from(suite: &str) -> PathBuf {
    static KERNELS: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let mut k = KERNELS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = k.iter().find(|(s, _)| s == suite) {
        return p.clone();
    }
    let p = run_path_script_env("fetch-kernel.sh", &[("GUEST_KERNEL_SUITE", suite)])
        .unwrap_or_else(|e| panic!("cannot fetch the {suite} guest kernel: {e}"));
    k.push((suite.to_owned(), p.clone()));
    p
}

/// Panics unless `qemu-system-x86_64` runs.
pub fn require_qemu() {
    let found = Command::new("qemu-system-x86_64")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "qemu-system-x86_64 not found: run scripts/install-deps.sh (QEMU from bookworm-backports)"
    );
}

/// Sends `signal` to the process group led by `child` (spawned with `process_group(0)`).
fn signal_group(child: &Child, signal: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{signal}"), "--", &format!("-{}", child.id())])
        .stderr(Stdio::null())
        .status();
}

/// Polls `child` until it exits or `deadline` passes.
pub fn wait_until(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Stops a process group: SIGTERM, a bounded wait, then SIGKILL.
pub fn stop(child: &mut Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    signal_group(child, "TERM");
    if wait_until(child, Instant::now() + BACKEND_EXIT_GRACE).is_none() {
        signal_group(child, "KILL");
        let _ = child.wait();
    }
}

/// Kills the backend and QEMU if a panic unwinds past them: each child (spawned as a process
/// group leader, see [`spawn_logged`]) is stopped, the last pushed first.
pub struct Reaper(pub Vec<Child>);

impl Drop for Reaper {
    fn drop(&mut self) {
        // QEMU (pushed last) first: the backend should see the frontend go away.
        for child in self.0.iter_mut().rev() {
            stop(child);
        }
    }
}

/// Guests (QEMU processes) that may run at once: `UVFS_GUESTS`, else one per core. A TCG guest
/// with one vCPU keeps one core busy, so two cores run two guests side by side at about the
/// speed of one; harnesses whose checks time the guest or the daemon take every slot
/// ([`serialize_guests`]).
fn guest_slots() -> usize {
    static SLOTS: OnceLock<usize> = OnceLock::new();
    *SLOTS.get_or_init(|| {
        std::env::var("UVFS_GUESTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| thread::available_parallelism().map_or(1, usize::from))
            .max(1)
    })
}

/// Slots in use (see [`guest_slots`]), and the condition a test waits on for free ones.
static SLOTS_USED: Mutex<usize> = Mutex::new(0);
static SLOT_FREED: Condvar = Condvar::new();

/// Slots held for running guests, given back when dropped.
#[must_use = "the slots are given back when this is dropped"]
pub struct GuestSlots(usize);

impl GuestSlots {
    /// Waits until `n` slots (at most all of them) are free and takes them.
    fn take(n: usize) -> Self {
        let n = n.clamp(1, guest_slots());
        let mut used = SLOTS_USED.lock().unwrap_or_else(|e| e.into_inner());
        while *used + n > guest_slots() {
            used = SLOT_FREED.wait(used).unwrap_or_else(|e| e.into_inner());
        }
        *used += n;
        GuestSlots(n)
    }
}

impl Drop for GuestSlots {
    fn drop(&mut self) {
        let mut used = SLOTS_USED.lock().unwrap_or_else(|e| e.into_inner());
        *used -= self.0;
        SLOT_FREED.notify_all();
    }
}

/// Takes one guest slot, for a harness that starts one QEMU of its own (or has libvirt start
/// it); another guest may run beside it.
pub fn one_guest() -> GuestSlots {
    GuestSlots::take(1)
}

/// Takes every guest slot: no other guest runs until the result is dropped. For harnesses
/// that start several QEMUs (two for a migration) or whose checks read how much of the guest's
/// memory the daemon maps within a second, which a second guest beside them would slow.
pub fn serialize_guests() -> GuestSlots {
    GuestSlots::take(usize::MAX)
}

/// Spawns `cmd` as the leader of a new process group, stdin from /dev/null, stdout and stderr
/// into `log`.
pub fn spawn_logged(cmd: &mut Command, log: &Path) -> Child {
    let file = File::create(log).expect("create log file");
    let err = file.try_clone().expect("dup log file");
    cmd.stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", cmd.get_program()))
}

/// Starts `backend`, boots the guest with `scenario` (a busybox `sh` script run in /mnt after
/// [`PRELUDE`]), and returns what happened. Panics only on harness problems (missing QEMU or
/// kernel, backend that never creates its socket); a failing scenario is reported in the result.
pub fn run_scenario(backend: &Backend, guest: &Guest, scenario: &str) -> GuestRun {
    require_qemu();
    let _slot = GuestSlots::take(1);
    run_unserialized(backend, guest, scenario)
}

/// Runs several guests at once, each with its own backend (e.g. two VMs sharing branches
/// through two daemons), and returns their results in order. Scenarios that wait for each
/// other must do so through the share, with a deadline.
pub fn run_together(runs: &[(&Backend, &Guest, &str)]) -> Vec<GuestRun> {
    require_qemu();
    let _slots = GuestSlots::take(runs.len());
    thread::scope(|s| {
        let handles: Vec<_> = runs
            .iter()
            .map(|(b, g, sc)| s.spawn(move || run_unserialized(b, g, sc)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("guest runner panicked"))
            .collect()
    })
}

fn run_unserialized(backend: &Backend, guest: &Guest, scenario: &str) -> GuestRun {
    // Prepared (or the run fails) before anything starts.
    images();

    let work = tempfile::Builder::new()
        .prefix("uvfs-e2e-")
        .tempdir()
        .expect("temp dir");
    let socket = work.path().join("vhost-fs.sock");
    let daemon_log = work.path().join("backend.log");
    let console_log = work.path().join("console.log");
    let script = work.path().join("scenario.sh");
    write_scenario(&script, scenario);

    let mut reaper = Reaper(Vec::new());
    reaper.0.push(spawn_backend(backend, &socket, &daemon_log));

    let start = Instant::now();
    let mut qemu = qemu_command(guest, &socket, &script, work.path());
    reaper.0.push(spawn_logged(&mut qemu, &console_log));
    let timed_out = wait_until(&mut reaper.0[1], start + guest.timeout).is_none();
    let elapsed = start.elapsed();
    drop(reaper); // stops QEMU (if timed out) and the backend

    let console = read_lossy(&console_log);
    let daemon_log = read_lossy(&daemon_log);
    let exit_code = scenario_exit(&console);
    let mounted = console
        .lines()
        .any(|l| l.trim_end_matches('\r').starts_with("=== UVFS MOUNTED "));
    GuestRun {
        console,
        daemon_log,
        exit_code,
        mounted,
        timed_out,
        elapsed,
    }
}

/// Writes the scenario file the guest runs: [`PRELUDE`], then `scenario`.
pub fn write_scenario(path: &Path, scenario: &str) {
    fs::write(path, format!("{PRELUDE}\n{scenario}\n")).expect("write scenario");
}

/// Starts `backend` with `{socket}` standing for `socket`, output into `log`, and waits (bounded)
/// until it listens; panics, showing its log, if it exits first or never creates the socket.
pub fn spawn_backend(backend: &Backend, socket: &Path, log: &Path) -> Child {
    let socket_str = socket.to_str().expect("utf-8 socket path");
    let args: Vec<String> = backend
        .args
        .iter()
        .map(|a| a.replace("{socket}", socket_str))
        .collect();
    let mut cmd = Command::new(&backend.program);
    cmd.args(&args)
        .envs(backend.env.iter().map(|(k, v)| (k, v)));
    if let Some(dir) = &backend.cwd {
        cmd.current_dir(dir);
    }
    let mut child = spawn_logged(&mut cmd, log);

    // Bounded poll for the listening socket; stop early if the backend died.
    let deadline = Instant::now() + SOCKET_DEADLINE;
    while !socket.exists() {
        let exited = child.try_wait().ok().flatten();
        if exited.is_some() || Instant::now() >= deadline {
            stop(&mut child);
            panic!(
                "backend {} {:?} did not create {} ({}):\n{}",
                backend.program.display(),
                args,
                socket.display(),
                match exited {
                    Some(s) => format!("exited with {s}"),
                    None => format!("not within {SOCKET_DEADLINE:?}"),
                },
                read_lossy(log)
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Boots `guest` against the backend on `socket` with the scenario file `script` (temporary
/// files in `tmp`), its console going to `console`: for tests that act on the host while the
/// guest runs.
pub fn spawn_guest(
    guest: &Guest,
    socket: &Path,
    script: &Path,
    tmp: &Path,
    console: &Path,
) -> Child {
    spawn_logged(&mut qemu_command(guest, socket, script, tmp), console)
}

/// The qemu/run-guest.sh command line that boots `guest` against the backend on `socket` with
/// the scenario file `script`; temporary files go to `tmp`. Callers may append more
/// run-guest.sh options (e.g. `--qmp`, `--incoming`).
pub fn qemu_command(guest: &Guest, socket: &Path, script: &Path, tmp: &Path) -> Command {
    let images = images();
    let mut qemu = Command::new("bash");
    qemu.arg(repo_root().join("qemu/run-guest.sh"))
        .arg("--socket")
        .arg(socket)
        .args(["--tag", &guest.tag])
        .args(["--queue-size", &guest.queue_size.to_string()])
        .args(["--mem", &guest.mem])
        .args(["--smp", &guest.smp.to_string()])
        .args(
            guest
                .extra_initrd
                .iter()
                .flat_map(|p| [std::ffi::OsStr::new("--extra-initrd"), p.as_os_str()]),
        )
        .arg("--kernel")
        .arg(
            guest
                .kernel_suite
                .map_or_else(|| images.kernel.clone(), kernel_from),
        )
        .args(if guest.no_initrd {
            vec![std::ffi::OsString::from("--no-initrd")]
        } else {
            vec![
                "--initrd".into(),
                images.initrd.clone().into_os_string(),
                "--script".into(),
                script.as_os_str().to_owned(),
            ]
        })
        .args(["--append", &guest.append])
        .args(guest.reboot.then_some("--allow-reboot"))
        // Any temporary file run-guest.sh makes lands in `tmp`, removed with it.
        .env("TMPDIR", tmp);
    qemu
}

/// A run still going (or stopped by hand), as [`GuestRun::transcript`] shows a finished one: the
/// console so far and the end of the daemon's log.
pub fn live_transcript(console: &Path, daemon_log: &Path) -> String {
    format!(
        "----- console -----\n{}\n----- daemon log (last 200 lines) -----\n{}\n-----",
        read_lossy(console),
        tail(&read_lossy(daemon_log), 200)
    )
}

/// A log file's contents, invalid UTF-8 replaced; empty if it cannot be read.
pub fn read_lossy(path: &Path) -> String {
    String::from_utf8_lossy(&fs::read(path).unwrap_or_default()).into_owned()
}

/// Status from the first `=== SCENARIO EXIT N ===` line of `console`.
pub fn scenario_exit(console: &str) -> Option<i32> {
    console.lines().find_map(|l| {
        l.trim_end_matches('\r')
            .strip_prefix("=== SCENARIO EXIT ")?
            .strip_suffix(" ===")?
            .parse()
            .ok()
    })
}

/// How many requests with FUSE opcode `opcode` this daemon's debug log (`log`) shows: the
/// router logs each as `unique=N opcode=N nodeid=N ...`.
pub fn logged_requests(log: &str, opcode: u32) -> usize {
    let needle = format!(" opcode={opcode} ");
    log.lines().filter(|l| l.contains(&needle)).count()
}

/// The value N of the last `max_pages=N` in `log` (the daemon logs its FUSE_INIT reply so).
pub fn logged_max_pages(log: &str) -> Option<u32> {
    log.rmatch_indices("max_pages=").find_map(|(i, key)| {
        let digits: String = log[i + key.len()..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    })
}

/// The flags the daemon's last FUSE_INIT reply enabled, `flags | flags2 << 32`, from its debug
/// line `FUSE INIT … enabled 0xFLAGS/0xFLAGS2`.
pub fn logged_init_flags(log: &str) -> Option<u64> {
    let line = log.lines().rfind(|l| l.contains("FUSE INIT "))?;
    let (_, enabled) = line.rsplit_once(" enabled 0x")?;
    let (lo, hi) = enabled.split_once("/0x")?;
    let hex = |s: &str| -> Option<u64> {
        let digits: String = s.chars().take_while(char::is_ascii_hexdigit).collect();
        u64::from_str_radix(&digits, 16).ok()
    };
    Some(hex(lo)? | hex(hi)? << 32)
}
