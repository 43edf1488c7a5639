//! Idmapped mounts of the share in a real guest (FUSE_ALLOW_IDMAP, protocol 7.40): guest root
//! binds /mnt on /idm with on-disk ids 0..65535 shown as 100000..165535
//! (examples/guest_idmap.rs, `mount_setattr(MOUNT_ATTR_IDMAP)`), and what a user of the
//! mount creates lands on the host under the unmapped ids. The same scenario runs against
//! virtiofsd 1.14 (which offers FUSE_ALLOW_IDMAP by default) and union-virtiofsd with
//! `--allow-idmap`; without that flag the guest's kernel refuses the idmapped mount.
//!
//! The guest kernel then sends the caller's (unmapped) ids only with requests that create
//! something (mknod, mkdir, symlink, create, link... through any mount); every other request
//! carries uid and gid -1 (`FUSE_INVALID_UIDGID`), idmapped mount or not.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use testkit::guest;
use testkit::guest::{Backend, Guest, GuestRun, Mode};
use testkit::tmpfs::Tmpfs;

/// Debian suite of the guest kernel: virtio-fs accepts idmapped mounts from Linux 6.12 on, so
/// the default (bookworm-backports, 6.12) will do; trixie-backports' 7.3 passes the same.
const KERNEL_SUITE: Option<&str> = None;

/// FUSE_ALLOW_IDMAP, bit 8 of INIT's flags2.
const FUSE_ALLOW_IDMAP: u64 = 1 << 40;

/// Owner `U:G` of each file, through the idmapped mount and the plain one, as the guest sees
/// it after the operations below; the host compares the section against [`OWNERS`].
const IDMAPPED: &str = r#"
echo "guest kernel $(uname -r)"
T=/opt/tools/bin
mkdir /idm
$T/guest_idmap mount /mnt /idm 0:100000:65536
grep -q ' /idm virtiofs .*idmapped' /proc/mounts || fail "/idm is not an idmapped mount: $(grep /idm /proc/mounts)"
# uid 101000 is on-disk 1000 in /idm; unmapped (overflow id) on /mnt.
$T/guest_idmap as 101000 101000 sh -c '
set -e
echo x > /idm/f
mkdir /idm/d
echo c > /idm/c
echo gone > /idm/gone
rm /idm/gone
mkdir /idm/gonedir
rmdir /idm/gonedir
cat /idm/f >/dev/null
'
echo g > /mnt/g
mkdir /mnt/e
# Guest root (uid 0 on the system, outside the mount's mapping) may still chown through it.
chown 101001:101001 /idm/c
# uid 0 has no on-disk id in /idm: nothing is created for it.
expect_err "Value too large" "echo r > /idm/r"
expect_err "Value too large" "mkdir /idm/rd"
[ ! -e /mnt/r ] && [ ! -e /mnt/rd ] && [ ! -e /mnt/gone ] || fail "a refused or removed name exists"
echo 3 > /proc/sys/vm/drop_caches
owners() { for p in "$@"; do echo "$p $(stat -c %u:%g "$p")"; done; }
section owners owners /idm/f /idm/d /idm/c /idm/g /idm/e /mnt/f /mnt/d /mnt/c /mnt/g /mnt/e
expect_eq "$(stat -c %u:%g /idm/f)" 101000:101000 "f through /idm"
expect_eq "$(stat -c %u:%g /mnt/f)" 1000:1000 "f through /mnt"
expect_eq "$(stat -c %u:%g /idm/d)" 101000:101000 "d through /idm"
expect_eq "$(stat -c %u:%g /mnt/d)" 1000:1000 "d through /mnt"
expect_eq "$(stat -c %u:%g /idm/g)" 100000:100000 "root's g through /idm"
expect_eq "$(stat -c %u:%g /mnt/c)" 1001:1001 "c chowned through /idm, seen on /mnt"
expect_eq "$(cat /idm/f)" x "f's contents"
umount /idm
echo "idmap scenario done"
"#;

/// What [`IDMAPPED`]'s `owners` section must print.
const OWNERS: [&str; 10] = [
    "/idm/f 101000:101000",
    "/idm/d 101000:101000",
    "/idm/c 101001:101001",
    "/idm/g 100000:100000",
    "/idm/e 100000:100000",
    "/mnt/f 1000:1000",
    "/mnt/d 1000:1000",
    "/mnt/c 1001:1001",
    "/mnt/g 0:0",
    "/mnt/e 0:0",
];

/// A daemon that did not offer FUSE_ALLOW_IDMAP: mount_setattr fails with EINVAL and nothing
/// is mounted.
const REFUSED: &str = r#"
T=/opt/tools/bin
mkdir /idm
expect_err "guest_idmap: mount_setattr(/mnt, MOUNT_ATTR_IDMAP): Invalid argument (os error 22)" \
    "$T/guest_idmap mount /mnt /idm 0:100000:65536"
grep -q ' /idm ' /proc/mounts && fail "/idm mounted"
echo "refused scenario done"
"#;

/// A branch whose root anyone may write in (the scenario's users do not own it).
fn branch() -> Tmpfs {
    Tmpfs::with_options("size=16M,mode=1777")
}

fn guest() -> Guest {
    Guest {
        extra_initrd: vec![guest::tools_initrd()],
        kernel_suite: KERNEL_SUITE,
        ..Guest::default()
    }
}

/// Runs [`IDMAPPED`] against `backend` serving `dir` and checks the guest's and the host's
/// view of the owners.
fn idmapped(backend: &Backend, dir: &Path) -> GuestRun {
    let run = guest::run_scenario(backend, &guest(), IDMAPPED);
    run.assert_success();
    assert_eq!(
        run.section("owners").expect("owners section"),
        OWNERS,
        "{}",
        run.transcript()
    );
    let owner = |n: &str| {
        let m = std::fs::metadata(dir.join(n)).unwrap_or_else(|e| panic!("host {n}: {e}"));
        (m.uid(), m.gid())
    };
    assert_eq!(owner("f"), (1000, 1000), "f on the host");
    assert_eq!(owner("d"), (1000, 1000), "d on the host");
    assert_eq!(owner("c"), (1001, 1001), "c on the host");
    assert_eq!(owner("g"), (0, 0), "g on the host");
    for gone in ["r", "rd", "gone", "gonedir"] {
        assert!(!dir.join(gone).exists(), "{gone} exists on the host");
    }
    run
}

/// The uid of each request with opcode `op` in the daemon's debug log
/// (`unique=… opcode=OP … uid=U …`).
fn uids(log: &str, op: u32) -> Vec<u32> {
    let tag = format!(" opcode={op} ");
    log.lines()
        .filter(|l| l.contains(&tag))
        .filter_map(|l| l.split_once(" uid=")?.1.split(' ').next()?.parse().ok())
        .collect()
}

/// FUSE opcodes whose uids [`uids`] reports.
const MKDIR: u32 = 9;
const UNLINK: u32 = 10;
const RMDIR: u32 = 11;
const CREATE: u32 = 35;

#[test]
fn virtiofsd_serves_an_idmapped_mount() {
    let a = branch();
    let dir = a.path().to_str().unwrap().to_owned();
    idmapped(
        &Backend::command(
            guest::virtiofsd_binary(),
            &["--socket-path", "{socket}", "--shared-dir", &dir],
        ),
        a.path(),
    );
}

/// Needs `--allow-idmap` (the daemon side of FUSE_ALLOW_IDMAP).
#[test]
fn allow_idmap_serves_an_idmapped_mount() {
    let a = branch();
    let run = idmapped(
        &Backend::union(
            &[(a.path(), Mode::Rw)],
            &["-o", "minfreespace=1M", "--allow-idmap"],
        ),
        a.path(),
    );
    let log = &run.daemon_log;
    assert!(
        guest::logged_init_flags(log).is_some_and(|f| f & FUSE_ALLOW_IDMAP != 0),
        "INIT did not enable FUSE_ALLOW_IDMAP:\n{}",
        run.transcript()
    );
    // What the guest's kernel sends: the on-disk ids of the creator for a create, none (-1)
    // for a removal.
    let (creates, mkdirs) = (uids(log, CREATE), uids(log, MKDIR));
    let (unlinks, rmdirs) = (uids(log, UNLINK), uids(log, RMDIR));
    println!("uids: create {creates:?} mkdir {mkdirs:?} unlink {unlinks:?} rmdir {rmdirs:?}");
    assert!(
        creates.contains(&1000) && creates.contains(&0),
        "{creates:?}"
    );
    assert!(mkdirs.contains(&1000) && mkdirs.contains(&0), "{mkdirs:?}");
    assert_eq!(unlinks, [u32::MAX], "unlink of /idm/gone");
    assert_eq!(rmdirs, [u32::MAX], "rmdir of /idm/gonedir");
}

#[test]
fn without_allow_idmap_the_guest_refuses_an_idmapped_mount() {
    let a = branch();
    let run = guest::run_scenario(
        &Backend::union(&[(a.path(), Mode::Rw)], &["-o", "minfreespace=1M"]),
        &guest(),
        REFUSED,
    );
    run.assert_success();
    assert_eq!(
        guest::logged_init_flags(&run.daemon_log).map(|f| f & FUSE_ALLOW_IDMAP),
        Some(0),
        "{}",
        run.transcript()
    );
}
