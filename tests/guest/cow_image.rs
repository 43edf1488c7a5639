//! A VM image workload on copy-on-write layers (`cow=true`): a minimal Debian
//! (debootstrap minbase, scripts/build-debian-base.sh) is the read-only base, an empty tmpfs
//! directory the writable layer. The Debian guest kernel boots with the union as its root
//! filesystem (`root=share rootfstype=virtiofs`, no initramfs) and runs, as init, a script that
//! installs a local package with dpkg (its postinst calls update-alternatives), runs
//! `dpkg --configure -a`, edits and deletes files of the base, removes a base directory and
//! makes it again, lists the whole tree, and powers off. Then: the base is byte-for-byte
//! unchanged, and the host kernel's overlayfs over the same base and writable layer shows
//! exactly the tree the guest listed (names, types, modes, owners, and the contents of the
//! changed areas).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use testkit::guest;
use testkit::guest::{Backend, Guest, Mode};
use testkit::tmpfs::Tmpfs;

/// What `find` prints for each entry, and which files get a checksum: the same command runs
/// in the guest (on /) and on the host (on the overlayfs mount).
const LIST: &str = r#"find . -xdev \( -path ./proc -o -path ./sys -o -path ./run -o -path ./tmp -o -path ./dev \) -prune -o -printf '%p|%y|%m|%U|%G\n' | LC_ALL=C sort
find ./etc ./var/lib/dpkg ./usr/bin ./usr/share/doc/dpkg ./uvfs -xdev -type f -print0 | LC_ALL=C sort -z | xargs -0 md5sum"#;

const INIT: &str = r#"#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mount -t devtmpfs dev /dev 2>/dev/null || true
echo "=== UVFS MOUNTED share ==="
(
set -e
dpkg -i /uvfs/uvfs-hello_1.0_all.deb
dpkg --configure -a
[ "$(uvfs-greet)" = "hello from a copy-on-write layer" ]
update-alternatives --display uvfs-greet
dpkg -s uvfs-hello | grep -q "Status: install ok installed"
echo "edited in the guest" >> /etc/motd
rm /etc/issue.net
rm -r /usr/share/doc/dpkg
mkdir /usr/share/doc/dpkg
echo new > /usr/share/doc/dpkg/README.new
cd /
echo "=== BEGIN LISTING ==="
LIST_COMMANDS
echo "=== END LISTING ==="
)
rc=$?
sync
echo "=== SCENARIO EXIT $rc ==="
echo o > /proc/sysrq-trigger
sleep 10
"#;

/// Every file under `root` with its kind, mode, owner and content hash (the base's
/// fingerprint).
fn fingerprint(root: &Path) -> BTreeMap<String, String> {
    let out = Command::new("sh")
        .arg("-c")
        .arg("find . -printf '%p|%y|%m|%U|%G|%s|%l\\n' | LC_ALL=C sort; find . -type f -print0 | LC_ALL=C sort -z | xargs -0 md5sum")
        .current_dir(root)
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| (l.to_owned(), String::new()))
        .collect()
}

#[test]
fn a_debian_root_on_copy_on_write_layers_installs_a_package_and_leaves_the_base_untouched() {
    let out = Command::new(guest::repo_root().join("scripts/build-debian-base.sh"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cache = std::path::PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());

    let base = Tmpfs::new("1G");
    let ok = Command::new("tar")
        .args(["--numeric-owner", "-xpf"])
        .arg(cache.join("base.tar"))
        .arg("-C")
        .arg(base.path())
        .status()
        .unwrap()
        .success();
    assert!(ok, "untar the base");
    let top = Tmpfs::new("512M");
    let upper = top.path().join("upper");
    let work = top.path().join("work");
    std::fs::create_dir(&upper).unwrap();
    std::fs::create_dir(&work).unwrap();
    // What the test brings: the init script and the package, in a directory of its own.
    std::fs::create_dir(upper.join("uvfs")).unwrap();
    std::fs::copy(
        cache.join("uvfs-hello_1.0_all.deb"),
        upper.join("uvfs/uvfs-hello_1.0_all.deb"),
    )
    .unwrap();
    let init = upper.join("uvfs/init");
    std::fs::write(&init, INIT.replace("LIST_COMMANDS", LIST)).unwrap();
    std::fs::set_permissions(&init, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let before = fingerprint(base.path());

    let backend = Backend::union(
        &[(&upper, Mode::Rw), (base.path(), Mode::Ro)],
        &["-o", "cow=true,minfreespace=0"],
    );
    let g = Guest {
        append: "root=share rootfstype=virtiofs rw init=/uvfs/init".to_owned(),
        no_initrd: true,
        mem: "1G".to_owned(),
        timeout: Duration::from_secs(300),
        ..Guest::default()
    };
    let run = guest::run_scenario(&backend, &g, "");
    run.assert_success();
    let listed = run.section("LISTING").expect("the guest's listing");

    // The base is untouched.
    assert!(fingerprint(base.path()) == before, "the base changed");
    // The host's overlayfs over the same layers shows what the guest listed.
    let mnt = tempfile::tempdir().unwrap();
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        base.path().display(),
        upper.display(),
        work.display()
    );
    let mounted = Command::new("mount")
        .args(["-t", "overlay", "overlay", "-o", &opts])
        .arg(mnt.path())
        .status()
        .unwrap()
        .success();
    assert!(mounted, "mount overlayfs");
    let host = Command::new("sh")
        .arg("-c")
        .arg(LIST)
        .current_dir(mnt.path())
        .output()
        .unwrap();
    let _ = Command::new("umount").arg(mnt.path()).status();
    let host: Vec<String> = String::from_utf8_lossy(&host.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    let guest_set: std::collections::BTreeSet<&String> = listed.iter().collect();
    let host_set: std::collections::BTreeSet<&String> = host.iter().collect();
    let only_guest: Vec<_> = guest_set.difference(&host_set).take(20).collect();
    let only_host: Vec<_> = host_set.difference(&guest_set).take(20).collect();
    assert!(
        only_guest.is_empty() && only_host.is_empty(),
        "guest and overlayfs differ:\nonly in the guest: {only_guest:#?}\nonly on the host: {only_host:#?}"
    );
    assert!(
        listed.len() > 5000,
        "a whole Debian tree: {} lines",
        listed.len()
    );
    // The package is installed, in the upper layer only.
    assert!(upper.join("usr/bin/uvfs-hello").exists());
    assert!(!base.path().join("usr/bin/uvfs-hello").exists());
    assert!(listed
        .iter()
        .any(|l| l.starts_with("./etc/alternatives/uvfs-greet|l|")));
}
