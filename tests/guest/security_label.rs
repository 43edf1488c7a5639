//! `--security-label` in a real guest running SELinux: the guest kernel labels each file,
//! directory, fifo and symlink it creates on the share and sends the label with the request
//! (FUSE_SECURITY_CTX); the daemon must set it, through `--xattrmap`, on the new host object.
//! Checked against virtiofsd 1.14 with the same flags (the same mapped xattr with the same
//! value on each host object), and in the guest: `stat -c %C` on the share shows the labels the
//! guest's own tmpfs shows for the same creations (the oracle).
//!
//! The guest: the Debian kernel booted with `security=selinux` (SELinux is built in, AppArmor
//! is the default), a tiny policy of our own ([`POLICY`], compiled on the host by checkpolicy,
//! scripts/install-deps.sh installs it) loaded by the scenario through selinuxfs; permissive
//! (the kernel's default until `enforce` is written). Debian's policy (refpolicy 2.20221101)
//! has no `fs_use_xattr virtiofs`, so virtiofs would not be labelled from xattrs there; ours
//! has it, and `type_transition` rules that give each kind of new object a type of its own, so
//! a label seen on the host can only have come from the guest's policy.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use testkit::guest;
use testkit::guest::{Backend, Guest, Mode};
use testkit::tmpfs::Tmpfs;

/// A minimal non-MLS SELinux policy (checkpolicy's policy.conf language). Classes the kernel
/// knows and the policy does not are allowed (`checkpolicy -U allow`). Everything runs as
/// `kernel_t` (the initial task's SID; nothing transitions); an object made in a directory of
/// type `file_t` (what an unlabelled inode gets: the `file` SID) or `made_dir_t` gets
/// `made_{file,dir,fifo,link}_t` by its class. virtiofs is labelled from the `security.selinux`
/// xattr, the guest's tmpfs by transition.
const POLICY: &str = r#"
class security
class process
class filesystem
class file
class dir
class lnk_file
class fifo_file

sid kernel
sid security
sid unlabeled
sid fs
sid file
sid file_labels
sid init
sid any_socket
sid port
sid netif
sid netmsg
sid node
sid igmp_packet
sid icmp_socket
sid tcp_socket
sid sysctl_modprobe
sid sysctl
sid sysctl_fs
sid sysctl_kernel
sid sysctl_net
sid sysctl_net_unix
sid sysctl_vm
sid sysctl_dev
sid kmod
sid policy
sid scmp_packet
sid devnull

common file { ioctl read write create getattr setattr lock relabelfrom relabelto append unlink link rename execute open }

class security { load_policy setenforce }
class process { transition dyntransition }
class filesystem { mount remount unmount getattr relabelfrom relabelto associate }
class file inherits file
class dir inherits file { add_name remove_name reparent search rmdir }
class lnk_file inherits file
class fifo_file inherits file

type kernel_t;
type unlabeled_t;
type fs_t;
type file_t;
type made_file_t;
type made_dir_t;
type made_fifo_t;
type made_link_t;

allow kernel_t self:process { transition dyntransition };

type_transition kernel_t { file_t made_dir_t }:file made_file_t;
type_transition kernel_t { file_t made_dir_t }:dir made_dir_t;
type_transition kernel_t { file_t made_dir_t }:fifo_file made_fifo_t;
type_transition kernel_t { file_t made_dir_t }:lnk_file made_link_t;

role system_r;
role system_r types kernel_t;

user system_u roles { system_r object_r };

sid kernel system_u:system_r:kernel_t
sid security system_u:object_r:unlabeled_t
sid unlabeled system_u:object_r:unlabeled_t
sid fs system_u:object_r:fs_t
sid file system_u:object_r:file_t
sid file_labels system_u:object_r:unlabeled_t
sid init system_u:system_r:kernel_t
sid any_socket system_u:object_r:unlabeled_t
sid port system_u:object_r:unlabeled_t
sid netif system_u:object_r:unlabeled_t
sid netmsg system_u:object_r:unlabeled_t
sid node system_u:object_r:unlabeled_t
sid igmp_packet system_u:object_r:unlabeled_t
sid icmp_socket system_u:object_r:unlabeled_t
sid tcp_socket system_u:object_r:unlabeled_t
sid sysctl_modprobe system_u:object_r:unlabeled_t
sid sysctl system_u:object_r:unlabeled_t
sid sysctl_fs system_u:object_r:unlabeled_t
sid sysctl_kernel system_u:object_r:unlabeled_t
sid sysctl_net system_u:object_r:unlabeled_t
sid sysctl_net_unix system_u:object_r:unlabeled_t
sid sysctl_vm system_u:object_r:unlabeled_t
sid sysctl_dev system_u:object_r:unlabeled_t
sid kmod system_u:object_r:unlabeled_t
sid policy system_u:object_r:unlabeled_t
sid scmp_packet system_u:object_r:unlabeled_t
sid devnull system_u:object_r:file_t

fs_use_xattr virtiofs system_u:object_r:fs_t;
fs_use_trans tmpfs system_u:object_r:file_t;
fs_use_trans devtmpfs system_u:object_r:file_t;

genfscon proc / system_u:object_r:fs_t
genfscon sysfs / system_u:object_r:fs_t
genfscon selinuxfs / system_u:object_r:fs_t
"#;

/// virtiofsd's documented mapping (README, "SELinux Support"): the guest's `security.selinux`
/// is `trusted.virtiofs.security.selinux` on the host.
const XATTRMAP: &str = ":map:security.selinux:trusted.virtiofs.:";

/// The host name of the guest's `security.selinux` under [`XATTRMAP`].
const HOST_XATTR: &str = "trusted.virtiofs.security.selinux";

/// The objects the scenario creates, relative to the share's root.
const OBJECTS: [&str; 8] = ["f", "d", "fifo", "node", "lnk", "d/f", "d/sub", "d/lnk"];

/// Loads the policy, then makes [`OBJECTS`] on the share and on a tmpfs of the guest's own and
/// prints each one's label as the guest sees it (`stat -c '%n %C'`) once the guest's caches are
/// dropped (the share's labels are then read back from the daemon). Failures are printed, not
/// fatal: they show as differences.
const SCENARIO: &str = r#"
T=/opt/tools/bin
mount -t selinuxfs selinuxfs /sys/fs/selinux
cat /etc/uvfs-selinux/policy.33 > /sys/fs/selinux/load
echo "enforce: $(cat /sys/fs/selinux/enforce)"
mkdir -p /tmp/local
mount -t tmpfs none /tmp/local
make() {
    set +e
    cd "$1" || return
    echo x > f
    mkdir d
    mkfifo fifo
    mknod node p
    ln -s f lnk
    echo y > d/f
    mkdir d/sub
    ln -s ../f d/lnk
    cd /
    set -e
}
show() {
    cd "$1"
    $T/stat -c '%n %C' OBJECTS
    cd /
}
section made_share make /mnt 2>&1
section made_local make /tmp/local 2>&1
sync
echo 3 > /proc/sys/vm/drop_caches
section share show /mnt 2>&1
section local show /tmp/local 2>&1
"#;

/// The policy compiled and packed as `/etc/uvfs-selinux/policy.33` in a cpio archive for
/// [`Guest::extra_initrd`], in `dir`.
fn policy_archive(dir: &Path) -> PathBuf {
    let root = dir.join("root");
    let etc = root.join("etc/uvfs-selinux");
    std::fs::create_dir_all(&etc).unwrap();
    let conf = dir.join("policy.conf");
    std::fs::write(&conf, POLICY).unwrap();
    let out = Command::new("checkpolicy")
        .args(["-U", "allow", "-c", "33", "-o"])
        .arg(etc.join("policy.33"))
        .arg(&conf)
        .output()
        .expect("checkpolicy (scripts/install-deps.sh installs it)");
    assert!(
        out.status.success(),
        "checkpolicy: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let archive = dir.join("selinux.cpio");
    let ok = Command::new("sh")
        .arg("-c")
        .arg("find etc | cpio -o -H newc --owner=0:0 --quiet > \"$1\"")
        .arg("sh")
        .arg(&archive)
        .current_dir(&root)
        .status()
        .unwrap()
        .success();
    assert!(ok, "packing the policy");
    archive
}

/// Each host object under `roots` (the branches) that is one of [`OBJECTS`], with the value
/// of its [`HOST_XATTR`] (`None`: absent), as `(branch index, relative path, value)`; the
/// values are SELinux contexts, text with a final NUL.
fn host_labels(roots: &[&Path]) -> Vec<(usize, String, Option<String>)> {
    let mut out = Vec::new();
    for (i, root) in roots.iter().enumerate() {
        for rel in OBJECTS {
            let path = root.join(rel);
            if std::fs::symlink_metadata(&path).is_err() {
                continue;
            }
            let mut buf = vec![0u8; 4096];
            let value = rustix::fs::lgetxattr(&path, HOST_XATTR, &mut buf[..])
                .ok()
                .map(|n| String::from_utf8_lossy(&buf[..n]).into_owned());
            out.push((i, rel.to_owned(), value));
        }
    }
    out
}

/// What one run showed: the guest's labels (`NAME CONTEXT` lines) on the share and on its
/// tmpfs, and the host's.
struct Labels {
    run: guest::GuestRun,
    share: Vec<String>,
    local: Vec<String>,
    host: Vec<(usize, String, Option<String>)>,
}

impl Labels {
    /// The guest's label of `rel` on its own tmpfs.
    fn local_label(&self, rel: &str) -> &str {
        self.local
            .iter()
            .find_map(|l| l.strip_prefix(rel)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no label for {rel} in {:?}", self.local))
    }

    /// Panics unless the share showed the tmpfs's labels, each one of the policy's own
    /// (`made_*_t`), and every host object carries its label, NUL-terminated as the guest
    /// kernel sends it.
    fn assert_consistent(&self, what: &str) {
        let made = self.run.section("made_share").unwrap_or_default();
        assert!(
            made.is_empty(),
            "{what}: creating on the share failed: {made:?}\n{}",
            self.run.transcript()
        );
        assert_eq!(self.share, self.local, "{what}: labels on the share");
        for rel in OBJECTS {
            let label = self.local_label(rel);
            assert!(
                label.contains(":made_"),
                "{what}: oracle label {rel} {label}"
            );
        }
        assert!(!self.host.is_empty());
        for (branch, rel, value) in &self.host {
            let want = format!("{}\0", self.local_label(rel));
            assert_eq!(
                value.as_deref(),
                Some(want.as_str()),
                "{what}: {HOST_XATTR} of {rel} on branch {branch}"
            );
        }
    }
}

/// Runs [`SCENARIO`] against `backend`, whose branches are `roots`.
fn labels(backend: &Backend, roots: &[&Path]) -> Labels {
    let dir = tempfile::tempdir().unwrap();
    let g = Guest {
        extra_initrd: vec![guest::tools_initrd(), policy_archive(dir.path())],
        append: "security=selinux".to_owned(),
        timeout: Duration::from_secs(180),
        ..Guest::default()
    };
    let run = guest::run_scenario(
        backend,
        &g,
        &SCENARIO.replace("OBJECTS", &OBJECTS.join(" ")),
    );
    run.assert_success();
    let share = run.section("share").expect("share section");
    let local = run.section("local").expect("local section");
    println!("share:\n{}\nlocal:\n{}", share.join("\n"), local.join("\n"));
    let host = host_labels(roots);
    for (b, rel, v) in &host {
        println!("host {b} {rel}: {v:?}");
    }
    Labels {
        run,
        share,
        local,
        host,
    }
}

/// virtiofsd 1.14 with the documented flags over `dir`.
fn virtiofsd(dir: &Path) -> Backend {
    Backend::command(
        guest::virtiofsd_binary(),
        &[
            "--socket-path",
            "{socket}",
            "--shared-dir",
            dir.to_str().unwrap(),
            "--security-label",
            "--xattrmap",
            XATTRMAP,
            "--modcaps=+sys_admin",
        ],
    )
}

/// Our daemon with virtiofsd's flags over `branches` (RW), and `extra` arguments.
fn union(branches: &[&Path], extra: &[&str]) -> Backend {
    let branches: Vec<(&Path, Mode)> = branches.iter().map(|p| (*p, Mode::Rw)).collect();
    let mut args = vec![
        "--security-label",
        "--xattrmap",
        XATTRMAP,
        "--modcaps=+sys_admin",
    ];
    args.extend_from_slice(extra);
    Backend::union(&branches, &args)
}

#[test]
fn virtiofsd_stores_the_guests_labels() {
    let a = Tmpfs::new("16M");
    let l = labels(&virtiofsd(a.path()), &[a.path()]);
    l.assert_consistent("virtiofsd 1.14");
    assert_eq!(l.host.len(), OBJECTS.len());
}

#[test]
fn the_guests_labels_reach_the_host_as_with_virtiofsd() {
    let (a, v) = (Tmpfs::new("16M"), Tmpfs::new("16M"));
    let ours = labels(&union(&[a.path()], &["-o", "minfreespace=1M"]), &[a.path()]);
    let theirs = labels(&virtiofsd(v.path()), &[v.path()]);
    assert_eq!(ours.host, theirs.host, "host xattrs: ours, virtiofsd's");
    assert_eq!(ours.share, theirs.share, "the guest's labels");
    ours.assert_consistent("one branch");
}

#[test]
fn a_label_on_a_cloned_parent_and_on_the_new_file() {
    // Directories go to a (ff), everything else to b (mfs): d/f and d/lnk need d cloned onto
    // b, its label included.
    let (a, b) = (Tmpfs::new("16M"), Tmpfs::new("64M"));
    let l = labels(
        &union(
            &[a.path(), b.path()],
            &["-o", "category.create=mfs,func.mkdir=ff,minfreespace=1M"],
        ),
        &[a.path(), b.path()],
    );
    l.assert_consistent("two branches");
    let on = |branch: usize, rel: &str| l.host.iter().any(|(i, r, _)| *i == branch && r == rel);
    assert!(on(0, "d") && on(1, "d"), "d cloned onto b: {:?}", l.host);
    assert!(on(1, "d/f") && !on(0, "d/f"));
    assert!(on(0, "d/sub") && !on(1, "d/sub"));
    assert!(on(1, "fifo") && on(1, "lnk") && on(1, "f"));
}
