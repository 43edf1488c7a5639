//! The real launcher: libvirt 11.3 (bookworm-backports) starts the daemon from a domain's
//! `<filesystem><binary path=…>` and boots the test guest with it (`type='qemu'`, memfd shared
//! memory). Both of libvirt's option styles are exercised: with `separate-options` in
//! `--print-capabilities` libvirt passes `--fd=N --shared-dir DIR --cache …`; a wrapper that
//! hides the feature makes it fall back to `--fd=N -o source=DIR,…` (libvirt 9's only style).
//! The guest reads a host file and writes one the host then reads. libvirtd and virtlogd are
//! started by hand (no systemd) when not running.

#[path = "support/guest.rs"]
mod guest;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const URI: &str = "qemu:///system";

fn virsh(args: &[&str]) -> std::process::Output {
    Command::new("virsh")
        .args(["-c", URI])
        .args(args)
        .output()
        .expect("virsh (scripts/install-deps.sh installs libvirt)")
}

/// The lines this test needs in /etc/libvirt/qemu.conf: QEMU runs as root, because where
/// /dev/kvm exists but only root may open it (nested KVM off, as here), libvirt's QEMU
/// capability cache is judged stale on every start and QEMU re-probed (about 70 s under TCG).
const QEMU_CONF: &str =
    "\n# union-virtiofsd tests (tests/e2e_libvirt.rs)\nuser = \"root\"\ngroup = \"root\"\n";

/// Starts virtlogd and libvirtd (no systemd here), with [`QEMU_CONF`] in effect.
fn ensure_libvirtd() {
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
            let ok = Command::new(d)
                .arg("-d")
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
      <source path='{dir}/console.log'/>
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

/// A wrapper libvirt runs as the daemon: records its arguments, optionally hides
/// `separate-options` from `--print-capabilities`, and execs the real daemon.
fn wrapper(dir: &Path, separate_options: bool) -> PathBuf {
    let daemon = guest::daemon_path();
    let caps = if separate_options {
        format!("exec {} --print-capabilities", daemon.display())
    } else {
        "echo '{\"type\": \"fs\"}'; exit 0".to_owned()
    };
    let script = format!(
        "#!/bin/sh\nif [ \"$1\" = --print-capabilities ]; then {caps}; fi\n\
         echo \"$@\" >{dir}/args\nexec {daemon} \"$@\"\n",
        dir = dir.display(),
        daemon = daemon.display()
    );
    let path = dir.join("daemon-wrapper");
    fs::write(&path, script).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Boots a transient domain and waits until the guest has powered off.
fn boot(name: &str, dir: &Path, binary: &Path, share: &Path) -> String {
    let t0 = Instant::now();
    let xml = dir.join("domain.xml");
    fs::write(&xml, domain_xml(name, dir, binary, share)).unwrap();
    let out = virsh(&["create", xml.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "virsh create: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{name}: created after {:?}", t0.elapsed());
    let deadline = Instant::now() + Duration::from_secs(180);
    while virsh(&["domstate", name]).status.success() {
        if Instant::now() > deadline {
            let _ = virsh(&["destroy", name]);
            panic!("{name} did not power off");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!("{name}: gone after {:?}", t0.elapsed());
    String::from_utf8_lossy(&fs::read(dir.join("console.log")).unwrap_or_default())
        .replace('\r', "")
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
    let _ = virsh(&["destroy", &name]);
    // QEMU runs as libvirt's unprivileged user: everything it reads must be reachable.
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
    let share = dir.join("share");
    fs::create_dir(&share).unwrap();
    fs::write(share.join("from-host.txt"), "hello from the host\n").unwrap();
    initrd_with(
        dir,
        r#"
expect_eq "$(cat from-host.txt)" "hello from the host" "host file in the guest"
echo "hello from the guest" > from-guest.txt
"#,
    );
    let binary = wrapper(dir, separate_options);
    let console = boot(&name, dir, &binary, &share);
    assert!(
        console.contains("=== SCENARIO EXIT 0 ==="),
        "guest console:\n{console}\n--- daemon log:\n{}",
        fs::read_to_string(format!("/var/log/libvirt/qemu/{name}-fs0-virtiofsd.log"))
            .unwrap_or_default()
    );
    assert_eq!(
        fs::read_to_string(share.join("from-guest.txt")).unwrap(),
        "hello from the guest\n"
    );
    let args = fs::read_to_string(dir.join("args")).unwrap();
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
    run_style(true);
    run_style(false);
}
