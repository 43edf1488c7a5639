//! The real launcher: libvirt 11.3 (bookworm-backports) starts the daemon from a domain's
//! `<filesystem><binary path=…>` and boots the test guest with it (`type='qemu'`, memfd shared
//! memory). Both of libvirt's option styles are exercised: with `separate-options` in
//! `--print-capabilities` libvirt passes `--fd=N --shared-dir DIR --cache …`; a wrapper that
//! hides the feature makes it fall back to `--fd=N -o source=DIR,…` (libvirt 9's only style).
//! The guest reads a host file and writes one the host then reads. `virsh save` and
//! `virsh restore` carry a running guest across two daemons (the saved one's device state is
//! loaded by the one libvirt starts for the restore). libvirtd and virtlogd are started by hand
//! (no systemd) when not running.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use testkit::guest;

const URI: &str = "qemu:///system";

fn virsh(args: &[&str]) -> std::process::Output {
    Command::new("virsh")
        .args(["-c", URI])
        .args(args)
        .output()
        .expect("virsh (scripts/install-deps.sh installs libvirt)")
}

/// Runs virsh and fails the test with its message unless it succeeds.
fn virsh_ok(args: &[&str]) {
    let out = virsh(args);
    assert!(
        out.status.success(),
        "virsh {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The lines this test needs in /etc/libvirt/qemu.conf: QEMU runs as root, because where
/// /dev/kvm exists but only root may open it (nested KVM off, as here), libvirt's QEMU
/// capability cache is judged stale on every start and QEMU re-probed (about 70 s under TCG).
const QEMU_CONF: &str =
    "\n# union-virtiofsd tests (tests/guest/libvirt.rs)\nuser = \"root\"\ngroup = \"root\"\n";

/// Starts virtlogd and libvirtd (no systemd here), with [`QEMU_CONF`] in effect. Once per
/// test process: the tests run in parallel, and two `virtlogd -d` at once make one fail on
/// the pid file.
fn ensure_libvirtd() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(start_libvirtd);
}

fn start_libvirtd() {
    let conf = "/etc/libvirt/qemu.conf";
    let text = fs::read_to_string(conf).expect("libvirt installed (scripts/install-deps.sh)");
    let configured = text.contains(QEMU_CONF);
    if !configured {
        fs::write(conf, format!("{text}{QEMU_CONF}")).unwrap();
        // A libvirtd started before the change must read it again: stop it by the pid it
        // recorded (never by name: other libvirtd instances are not ours to stop).
        let pid = fs::read_to_string("/run/libvirtd.pid").unwrap_or_default();
        let pid = pid.trim();
        if !pid.is_empty() && Path::new(&format!("/proc/{pid}")).exists() {
            let _ = Command::new("kill").args(["-TERM", pid]).status();
            let deadline = Instant::now() + Duration::from_secs(30);
            while Path::new(&format!("/proc/{pid}")).exists() {
                assert!(Instant::now() < deadline, "libvirtd did not stop");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    if virsh(&["version"]).status.success() {
        return;
    }
    for d in ["virtlogd", "libvirtd"] {
        let running = Command::new("pgrep")
            .args(["-x", d])
            .status()
            .is_ok_and(|s| s.success());
        if !running {
            // Its standard streams on /dev/null: a daemon that kept the test's stdout would
            // hold the pipe of whatever reads the test's output (scripts/test.sh's) open.
            let ok = Command::new(d)
                .arg("-d")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            assert!(
                ok,
                "cannot start {d} (scripts/install-deps.sh installs libvirt)"
            );
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while !virsh(&["version"]).status.success() {
        assert!(Instant::now() < deadline, "libvirtd did not come up");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The test initramfs plus `scenario` as /scenario.sh (as qemu/run-guest.sh appends it).
fn initrd_with(dir: &Path, scenario: &str) -> PathBuf {
    let stage = dir.join("stage");
    fs::create_dir_all(&stage).unwrap();
    fs::write(
        stage.join("scenario.sh"),
        format!("{}\n{scenario}\n", guest::PRELUDE),
    )
    .unwrap();
    let out = dir.join("initrd");
    let mut bytes = fs::read(&guest::images().initrd).unwrap();
    bytes.resize(bytes.len().next_multiple_of(4), 0);
    let cpio = Command::new("sh")
        .arg("-c")
        .arg("echo scenario.sh | cpio -o -H newc --owner=0:0 --quiet")
        .current_dir(&stage)
        .output()
        .unwrap();
    assert!(cpio.status.success());
    bytes.extend_from_slice(&cpio.stdout);
    fs::write(&out, bytes).unwrap();
    out
}

fn domain_xml(name: &str, dir: &Path, binary: &Path, share: &Path) -> String {
    let kernel = guest::images().kernel.display().to_string();
    // append='on': a restored domain's QEMU adds to the console file instead of truncating it.
    format!(
        r#"<domain type='qemu'>
  <name>{name}</name>
  <memory unit='MiB'>512</memory>
  <memoryBacking><source type='memfd'/><access mode='shared'/></memoryBacking>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='q35'>hvm</type>
    <kernel>{kernel}</kernel>
    <initrd>{dir}/initrd</initrd>
    <cmdline>console=ttyS0 panic=-1 quiet loglevel=4 uvfs.tag=share uvfs.scenario=1</cmdline>
  </os>
  <cpu mode='maximum'/>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <filesystem type='mount' accessmode='passthrough'>
      <driver type='virtiofs' queue='1024'/>
      <binary path='{binary}' xattr='on'>
        <cache mode='always'/>
      </binary>
      <source dir='{share}'/>
      <target dir='share'/>
    </filesystem>
    <serial type='file'>
      <source path='{dir}/console.log' append='on'/>
      <target port='0'/>
    </serial>
  </devices>
</domain>
"#,
        dir = dir.display(),
        binary = binary.display(),
        share = share.display(),
    )
}

/// A wrapper libvirt runs as the daemon: records its arguments and its pid (which the daemon
/// keeps), optionally hides `separate-options` from `--print-capabilities`, and execs the real
/// daemon with `extra` arguments before libvirt's (as packaging/libvirt-pool-wrapper does).
fn wrapper(dir: &Path, separate_options: bool, extra: &str) -> PathBuf {
    let daemon = guest::daemon_path();
    let caps = if separate_options {
        format!("exec {} --print-capabilities", daemon.display())
    } else {
        "echo '{\"type\": \"fs\"}'; exit 0".to_owned()
    };
    let script = format!(
        "#!/bin/sh\nif [ \"$1\" = --print-capabilities ]; then {caps}; fi\n\
         echo \"$@\" >{dir}/args\necho $$ >>{dir}/pids\nexec {daemon} {extra} \"$@\"\n",
        dir = dir.display(),
        daemon = daemon.display()
    );
    let path = dir.join("daemon-wrapper");
    fs::write(&path, script).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Where libvirt logs the daemon of domain `name`'s first filesystem (appending across runs).
fn daemon_log_path(name: &str) -> PathBuf {
    PathBuf::from(format!("/var/log/libvirt/qemu/{name}-fs0-virtiofsd.log"))
}

/// A transient domain that boots the test guest with a scenario, its share served by our
/// daemon through [`wrapper`]; destroyed when dropped if it is still running.
struct Vm {
    name: String,
    work: tempfile::TempDir,
    /// Length of libvirt's log of this domain's daemon before this run (libvirt appends to it).
    log_start: u64,
}

impl Vm {
    /// Prepares domain `name` without starting it: a work directory QEMU can reach, an empty
    /// share, the initramfs with `scenario`, and the wrapper.
    fn new(name: &str, scenario: &str, separate_options: bool) -> Self {
        Self::with_args(name, scenario, separate_options, |_| String::new())
    }

    /// [`Vm::new`], the wrapper passing the daemon `extra(work directory)` arguments too.
    fn with_args(
        name: &str,
        scenario: &str,
        separate_options: bool,
        extra: impl FnOnce(&Path) -> String,
    ) -> Self {
        let _ = virsh(&["destroy", name]);
        let work = tempfile::tempdir().unwrap();
        let dir = work.path();
        fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
        fs::create_dir(dir.join("share")).unwrap();
        initrd_with(dir, scenario);
        wrapper(dir, separate_options, &extra(dir));
        Self {
            log_start: fs::metadata(daemon_log_path(name)).map_or(0, |m| m.len()),
            name: name.to_owned(),
            work,
        }
    }

    fn dir(&self) -> &Path {
        self.work.path()
    }

    /// The host directory the guest mounts on /mnt (the daemon's only branch).
    fn share(&self) -> PathBuf {
        self.dir().join("share")
    }

    /// Starts the domain (libvirt starts the daemon, then QEMU).
    fn create(&self) {
        let xml = self.dir().join("domain.xml");
        let binary = self.dir().join("daemon-wrapper");
        fs::write(
            &xml,
            domain_xml(&self.name, self.dir(), &binary, &self.share()),
        )
        .unwrap();
        virsh_ok(&["create", xml.to_str().unwrap()]);
    }

    fn running(&self) -> bool {
        virsh(&["domstate", &self.name]).status.success()
    }

    /// Waits until the guest has powered off (the transient domain is gone).
    fn wait_gone(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while self.running() {
            assert!(
                Instant::now() < deadline,
                "{} did not power off within {within:?}\n{}",
                self.name,
                self.report()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until the guest has printed `line` on its console.
    fn wait_console(&self, line: &str, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.console().lines().any(|l| l == line) {
            assert!(
                self.running() && Instant::now() < deadline,
                "{} never printed {line:?}\n{}",
                self.name,
                self.report()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The serial console so far.
    fn console(&self) -> String {
        String::from_utf8_lossy(&fs::read(self.dir().join("console.log")).unwrap_or_default())
            .replace('\r', "")
    }

    /// What this run's daemons logged (libvirt sends their stderr there).
    fn daemon_log(&self) -> String {
        let bytes = fs::read(daemon_log_path(&self.name)).unwrap_or_default();
        let start = usize::try_from(self.log_start).unwrap();
        // A log shorter than before was rotated or truncated: all of it is this run's.
        let ours = bytes.get(start..).unwrap_or(&bytes);
        String::from_utf8_lossy(ours).into_owned()
    }

    /// The pids libvirt started the daemon as, in start order.
    fn daemon_pids(&self) -> Vec<u32> {
        fs::read_to_string(self.dir().join("pids"))
            .unwrap_or_default()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect()
    }

    /// The console and the daemon log, for failure messages.
    fn report(&self) -> String {
        format!(
            "--- guest console:\n{}\n--- daemon log:\n{}",
            self.console(),
            self.daemon_log()
        )
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        if self.running() {
            let _ = virsh(&["destroy", &self.name]);
        }
    }
}

fn run_style(separate_options: bool) {
    let t0 = Instant::now();
    ensure_libvirtd();
    eprintln!("libvirtd ready after {:?}", t0.elapsed());
    let name = format!(
        "uvfs-libvirt-{}",
        if separate_options {
            "separate"
        } else {
            "legacy"
        }
    );
    let vm = Vm::new(
        &name,
        r#"
expect_eq "$(cat from-host.txt)" "hello from the host" "host file in the guest"
echo "hello from the guest" > from-guest.txt
"#,
        separate_options,
    );
    fs::write(vm.share().join("from-host.txt"), "hello from the host\n").unwrap();
    let t0 = Instant::now();
    vm.create();
    eprintln!("{name}: created after {:?}", t0.elapsed());
    vm.wait_gone(Duration::from_secs(180));
    eprintln!("{name}: gone after {:?}", t0.elapsed());
    assert!(
        vm.console().contains("=== SCENARIO EXIT 0 ==="),
        "{}",
        vm.report()
    );
    assert_eq!(
        fs::read_to_string(vm.share().join("from-guest.txt")).unwrap(),
        "hello from the guest\n"
    );
    let args = fs::read_to_string(vm.dir().join("args")).unwrap();
    assert!(args.contains("--fd="), "{args}");
    if separate_options {
        assert!(
            args.contains("--shared-dir") && args.contains("--cache always"),
            "{args}"
        );
    } else {
        assert!(
            args.contains("-o source=") && !args.contains("--shared-dir"),
            "{args}"
        );
    }
}

#[test]
fn libvirt_starts_the_daemon_in_both_option_styles() {
    // libvirt boots its own QEMU: one guest slot, as the harness's own guests take.
    let _slot = guest::one_guest();
    run_style(true);
    run_style(false);
}

/// Before the save the guest writes a file, holds one open and works in a directory of the
/// share; after the restore (which the host signals with /mnt/.restored) it writes through the
/// same descriptor and reads relative to the same working directory.
const SAVE_SCENARIO: &str = r#"
echo "before the save" > written.txt
mkdir dir
echo inside > dir/inside.txt
exec 3<>/mnt/held
echo before >&3
cd /mnt/dir
echo "=== SAVE NOW ==="
waited=0
while [ ! -e /mnt/.restored ]; do
    [ "$waited" -lt 120 ] || fail "/mnt/.restored did not appear within 120 s"
    sleep 1
    waited=$((waited + 1))
done
echo "restored after ${waited} s of guest time"
echo after >&3
exec 3>&-
expect_eq "$(cat /mnt/held)" "$(printf 'before\nafter')" "the held file"
section cwd ls
expect_eq "$(cat inside.txt)" "inside" "a file in the working directory"
echo "made after the restore" > after.txt
expect_eq "$(cat /mnt/written.txt)" "before the save" "the file written before the save"
"#;

/// `pid` and every process below it.
fn process_tree(pid: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let child: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = fs::read_to_string(format!("/proc/{child}/stat")).ok()?;
            // "pid (comm) state ppid …": comm may hold spaces and parentheses.
            let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?;
            Some((child, ppid.parse().ok()?))
        })
        .collect();
    let mut tree = vec![pid];
    let mut i = 0;
    while let Some(&p) = tree.get(i) {
        tree.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    tree
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn virsh_save_and_restore_carry_the_guest_across() {
    let _slot = guest::one_guest();
    let t0 = Instant::now();
    ensure_libvirtd();
    let vm = Vm::new("uvfs-libvirt-save", SAVE_SCENARIO, true);
    vm.create();
    vm.wait_console("=== SAVE NOW ===", Duration::from_secs(90));
    eprintln!("{}: ready to save after {:?}", vm.name, t0.elapsed());

    let first = vm.daemon_pids();
    assert_eq!(first.len(), 1, "daemon starts: {first:?}");
    let daemon = process_tree(first[0]);
    let image = vm.dir().join("saved");
    let t = Instant::now();
    virsh_ok(&["save", &vm.name, image.to_str().unwrap()]);
    eprintln!("{}: saved in {:?}", vm.name, t.elapsed());
    assert!(!vm.running(), "the domain still runs after virsh save");
    // libvirt stops the daemon as QEMU ends.
    let deadline = Instant::now() + Duration::from_secs(10);
    while daemon.iter().any(|&p| alive(p)) {
        assert!(
            Instant::now() < deadline,
            "daemon processes {daemon:?} outlived the saved domain"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("{}: daemon processes {daemon:?} gone", vm.name);
    let size = fs::metadata(&image).map_or(0, |m| m.len());
    assert!(size > 0, "no save image at {}", image.display());

    let t = Instant::now();
    virsh_ok(&["restore", image.to_str().unwrap()]);
    eprintln!(
        "{}: restored in {:?} from a {size}-byte image",
        vm.name,
        t.elapsed()
    );
    fs::write(vm.share().join(".restored"), "").unwrap();
    vm.wait_gone(Duration::from_secs(120));
    eprintln!("{}: gone after {:?}", vm.name, t0.elapsed());

    let console = vm.console();
    assert_eq!(guest::scenario_exit(&console), Some(0), "{}", vm.report());
    let share = vm.share();
    assert_eq!(
        fs::read_to_string(share.join("held")).unwrap(),
        "before\nafter\n"
    );
    assert_eq!(
        fs::read_to_string(share.join("written.txt")).unwrap(),
        "before the save\n"
    );
    assert_eq!(
        fs::read_to_string(share.join("dir/after.txt")).unwrap(),
        "made after the restore\n"
    );
    let cwd = console
        .split_once("=== BEGIN cwd ===\n")
        .and_then(|(_, rest)| rest.split_once("=== END cwd ==="))
        .map(|(listing, _)| listing)
        .unwrap_or_default();
    assert_eq!(
        cwd.split_whitespace().collect::<Vec<_>>(),
        ["inside.txt"],
        "{console}"
    );

    let second = vm.daemon_pids();
    assert_eq!(second.len(), 2, "daemon starts: {second:?}");
    let log = vm.daemon_log();
    assert!(log.contains("device state saved:"), "{log}");
    let loaded = log
        .lines()
        .find(|l| l.contains("device state loaded:"))
        .unwrap_or_else(|| panic!("the restored daemon loaded no device state:\n{log}"));
    assert!(loaded.ends_with(", 0 lost"), "{loaded}");
}

/// The guest waits for a file of a branch the host adds while it runs, then for it to go
/// when the host removes that branch. Each look drops the guest's caches first (the domain
/// asks for cache=always, which would keep a dentry for a day).
const POOL_SCENARIO: &str = r#"
look() { echo 3 > /proc/sys/vm/drop_caches; [ -e /mnt/added.txt ]; }
echo "=== ADD NOW ==="
waited=0
until look; do
    [ "$waited" -lt 120 ] || fail "added.txt did not appear within 120 s"
    sleep 1
    waited=$((waited + 1))
done
expect_eq "$(cat /mnt/added.txt)" "from the added branch" "a file of the added branch"
echo "=== REMOVE NOW ==="
waited=0
while look; do
    [ "$waited" -lt 120 ] || fail "added.txt was still there 120 s after the removal"
    sleep 1
    waited=$((waited + 1))
done
echo "=== GONE ==="
"#;

/// libvirt starts the daemon with `--fd` (no socket path, so no `<socket>.ctl`); the wrapper
/// adds `--ctl-socket`, and `union-virtiofsd ctl` changes the pool through it while the guest
/// runs: a branch added is seen by the guest, removed no longer. `ctl get pid` is the pid
/// libvirt started (the daemon runs in its default namespace sandbox).
#[test]
fn ctl_changes_the_pool_of_a_daemon_libvirt_started() {
    let _slot = guest::one_guest();
    let t0 = Instant::now();
    ensure_libvirtd();
    let vm = Vm::with_args("uvfs-libvirt-ctl", POOL_SCENARIO, true, |dir| {
        format!("--ctl-socket {}/ctl", dir.display())
    });
    let added = vm.dir().join("added");
    fs::create_dir(&added).unwrap();
    fs::write(added.join("added.txt"), "from the added branch\n").unwrap();
    let ctl_sock = vm.dir().join("ctl");
    vm.create();
    vm.wait_console("=== ADD NOW ===", Duration::from_secs(90));
    eprintln!("{}: booted after {:?}", vm.name, t0.elapsed());
    let args = fs::read_to_string(vm.dir().join("args")).unwrap();
    assert!(args.contains("--fd="), "{args}");
    let log = vm.daemon_log();
    assert!(
        log.contains(&format!("(control {})", ctl_sock.display())),
        "{log}"
    );
    let ctl = |args: &[&str]| {
        let out = Command::new(guest::daemon_path())
            .arg("ctl")
            .arg("--ctl-socket")
            .arg(&ctl_sock)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ctl {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            vm.report()
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(ctl(&["get", "pid"]).trim(), vm.daemon_pids()[0].to_string());
    let added = fs::canonicalize(&added).unwrap();
    ctl(&["set", "branches", &format!("+>{}=RO", added.display())]);
    assert!(
        ctl(&["get", "srcmounts"]).contains(&added.display().to_string()),
        "{}",
        vm.report()
    );
    vm.wait_console("=== REMOVE NOW ===", Duration::from_secs(90));
    ctl(&["set", "branches", &format!("-{}", added.display())]);
    vm.wait_gone(Duration::from_secs(180));
    eprintln!("{}: gone after {:?}", vm.name, t0.elapsed());
    let console = vm.console();
    assert_eq!(guest::scenario_exit(&console), Some(0), "{}", vm.report());
    assert!(console.contains("=== GONE ==="), "{}", vm.report());
    assert!(!ctl_sock.exists(), "{} left behind", ctl_sock.display());
}
