//! virtiofsd 1.14's options that change what the guest sees, each tried in a real guest with
//! the same commands against union-virtiofsd and virtiofsd 1.14 with the same flag.
//!
//! `--writeback`: buffered 4 KiB writes reach the host whole after `sync`, in far fewer WRITE
//! requests than writes (the guest's page cache gathers them; without the writeback cache each
//! write is a request); a partial page written through a write-only open (the guest reads the
//! page first); appends applied by the guest (O_APPEND); a write-only file written by its
//! owner; the set-user-ID bit cleared by another user's write; size and mtime after an
//! append.
//!
//! Submounts: a host filesystem mounted inside a branch gets a st_dev of its own in the guest
//! and its own mount there (`--announce-submounts`, the default), or shares the share's with
//! `--no-announce-submounts`; (st_dev, st_ino) stays unique either way.
//!
//! `--cache always`: the guest keeps directory listings across opens (FOPEN_CACHE_DIR, as
//! virtiofsd sets it), so listing a directory again reads nothing from the daemon, and the
//! guest's own changes to it still show in its next listing; after its first OPENDIR (answered
//! ENOSYS: FUSE_NO_OPENDIR_SUPPORT) it opens directories without asking, no RELEASEDIR either.
//!
//! xattrs on a symlink answer as on the guest's own tmpfs (xfstests generic/062's case): a
//! `user.*` name reads as absent (ENODATA) and cannot be set (EPERM), and the list is the
//! same.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use testkit::guest;
use testkit::guest::{Backend, Guest, Mode};
use testkit::tmpfs::Tmpfs;

/// Guest user `u` (uid/gid 1000) for `su u -c …`.
const ADD_USER_U: &str = r#"echo "u:x:1000:1000::/tmp:/bin/sh" >>/etc/passwd
echo "u:x:1000:" >>/etc/group"#;

const WRITEBACK: &str = r#"
dd if=/dev/urandom of=/tmp/src bs=4k count=256 2>/dev/null
dd if=/tmp/src of=wb bs=4k 2>/dev/null
sync
cmp /tmp/src wb || fail "256 buffered 4 KiB writes"
# A write-only open: the guest's page cache reads the rest of the page before it writes.
printf AAAAAAAAAA > part
sync
echo 3 > /proc/sys/vm/drop_caches
printf xyz | dd of=part bs=1 seek=2 conv=notrunc 2>/dev/null
sync
echo 3 > /proc/sys/vm/drop_caches
expect_eq "$(cat part)" AAxyzAAAAA "a partial page through a write-only open"
# Appends, through two opens.
echo one > app
echo two >> app
exec 4>>app
echo three >&4
echo four >&4
exec 4>&-
sync
echo 3 > /proc/sys/vm/drop_caches
expect_eq "$(cat app | tr '\n' ' ')" "one two three four " "appends"
# A write-only file, written by its owner.
touch wo
chown u:u wo
chmod 0200 wo
su u -c 'echo secret > /mnt/wo' || fail "the owner cannot write a write-only file"
sync
expect_eq "$(cat wo)" secret "the write-only file"
# set-user-ID goes when another user writes.
echo x > suid
chmod 4777 suid
su u -c 'echo y >> /mnt/suid' || fail "another user cannot write a 4777 file"
sync
expect_eq "$(stat -c %a suid)" 777 "set-user-ID after another user's write"
# Size and mtime after an append to an old file.
touch -d 2000-01-01 wb
echo more >> wb
sync
expect_eq "$(stat -c %s wb)" 1048581 "size after the append"
[ "$(stat -c %Y wb)" -gt 946771200 ] || fail "mtime not updated by the append"
echo 3 > /proc/sys/vm/drop_caches
expect_eq "$(stat -c %s wb)" 1048581 "size after the append, from the host"
[ "$(stat -c %Y wb)" -gt 946771200 ] || fail "mtime not updated by the append, from the host"
echo "writeback scenario done"
"#;

/// getfattr and setfattr on a symlink (never following it), in the share and then on a
/// tmpfs of the guest's own; both transcripts are printed for the host to compare.
const SYMLINK_XATTRS: &str = r#"
T=/opt/tools/bin
mkdir -p /tmp/local
mount -t tmpfs none /tmp/local
probe() {
    cd "$1"
    echo target > tgt
    ln -s tgt lnk
    $T/setfattr -n user.on_target -v 1 tgt
    $T/getfattr -h -n user.x lnk 2>&1 | sed 's/^.*: //' || true
    $T/setfattr -h -n user.x -v 1 lnk 2>&1 | sed 's/^.*: //' || true
    $T/getfattr -h -d -m '^user\.' lnk 2>&1 || true
    $T/getfattr -d -m '^user\.' lnk 2>&1 || true
}
section share probe /mnt
section local probe /tmp/local
"#;

/// A branch (tmpfs) with a file and a directory `sub` on which another tmpfs is mounted,
/// holding a file of the same name; unmounted on drop.
struct Nested {
    outer: Tmpfs,
}

impl Nested {
    fn new() -> Nested {
        let outer = Tmpfs::new("16M");
        std::fs::write(outer.path().join("f"), "outer\n").unwrap();
        std::fs::create_dir(outer.path().join("sub")).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=4M", "tmpfs"])
            .arg(outer.path().join("sub"))
            .status()
            .unwrap()
            .success();
        assert!(ok, "mounting a tmpfs needs root");
        std::fs::write(outer.path().join("sub/f"), "inner\n").unwrap();
        Nested { outer }
    }

    fn path(&self) -> &Path {
        self.outer.path()
    }
}

impl Drop for Nested {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.outer.path().join("sub"))
            .status();
    }
}

/// The guest's view: `DEV INO` of /mnt, /mnt/f, /mnt/sub (the mount point: stat does not
/// cross it), /mnt/sub/. (the mounted root) and /mnt/sub/f, and whether /mnt/sub is a mount
/// of its own in the guest.
const SUBMOUNTS: &str = r#"
section ids stat -c '%d %i' /mnt /mnt/f /mnt/sub /mnt/sub/. /mnt/sub/f
expect_eq "$(cat /mnt/sub/f)" inner "the file on the nested filesystem"
if grep -q ' /mnt/sub ' /proc/mounts; then echo "submount: yes"; else echo "submount: no"; fi
"#;

/// (dev, ino) of /mnt, /mnt/f, /mnt/sub, /mnt/sub/. and /mnt/sub/f as the guest saw them,
/// and whether the guest mounted /mnt/sub apart.
fn submounts(backend: &Backend) -> (Vec<(u64, u64)>, bool) {
    let run = guest::run_scenario(backend, &Guest::default(), SUBMOUNTS);
    run.assert_success();
    let ids = run
        .section("ids")
        .expect("ids section")
        .iter()
        .map(|l| {
            let (d, i) = l.split_once(' ').expect("DEV INO");
            (d.parse().unwrap(), i.trim().parse().unwrap())
        })
        .collect::<Vec<(u64, u64)>>();
    assert_eq!(ids.len(), 5, "{}", run.transcript());
    (ids, run.console.contains("submount: yes"))
}

/// No two of the guest's files share (st_dev, st_ino), the mount point and the root mounted
/// on it included (they are two host directories).
fn assert_unique(ids: &[(u64, u64)]) {
    let mut unique = ids.to_vec();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(
        unique.len(),
        ids.len(),
        "(st_dev, st_ino) repeated: {ids:?}"
    );
}

#[test]
fn a_mount_point_in_a_branch_is_announced_as_a_submount() {
    let n = Nested::new();
    let (ids, mounted) = submounts(&Backend::union(
        &[(n.path(), Mode::Rw)],
        &["-o", "minfreespace=1M"],
    ));
    assert_ne!(ids[3].0, ids[0].0, "sub/. has the share's st_dev: {ids:?}");
    assert_eq!(
        ids[4].0, ids[3].0,
        "sub/f is not on sub/.'s st_dev: {ids:?}"
    );
    assert_eq!(ids[1].0, ids[0].0, "f left the share's st_dev: {ids:?}");
    assert_unique(&ids);
    assert!(mounted, "the guest did not mount /mnt/sub apart");
    let n2 = Nested::new();
    let (ids, mounted) = submounts(&Backend::union(
        &[(n2.path(), Mode::Rw)],
        &["-o", "minfreespace=1M", "--no-announce-submounts"],
    ));
    assert!(ids.iter().all(|(d, _)| *d == ids[0].0), "{ids:?}");
    assert_unique(&ids[..3]);
    assert_unique(&[ids[0], ids[1], ids[3], ids[4]]);
    assert!(!mounted);
}

#[test]
fn virtiofsd_announces_the_same_submount() {
    let n = Nested::new();
    let dir = n.path().to_str().unwrap().to_owned();
    let (ids, mounted) = submounts(&Backend::command(
        guest::virtiofsd_binary(),
        &["--socket-path", "{socket}", "--shared-dir", &dir],
    ));
    assert_ne!(ids[3].0, ids[0].0, "{ids:?}");
    assert_eq!(ids[4].0, ids[3].0, "{ids:?}");
    assert!(mounted);
    // virtiofsd shows host inode numbers: the mount point and the share's root, two tmpfs
    // roots, are both (share's st_dev, 1) there; not asserted (theirs to change).
    println!("virtiofsd ids: {ids:?}");
}

fn run(backend: &Backend) -> guest::GuestRun {
    let run = guest::run_scenario(
        backend,
        &Guest::default(),
        &format!("{ADD_USER_U}\n{WRITEBACK}"),
    );
    run.assert_success();
    run
}

/// What the host has in the branch after the scenario.
fn assert_host(dir: &Path) {
    let read = |n: &str| std::fs::read_to_string(dir.join(n)).unwrap();
    assert_eq!(read("part"), "AAxyzAAAAA");
    assert_eq!(read("app"), "one\ntwo\nthree\nfour\n");
    assert_eq!(read("wo"), "secret\n");
    let suid = std::fs::metadata(dir.join("suid")).unwrap();
    assert_eq!(
        suid.mode() & 0o7777,
        0o777,
        "set-user-ID cleared on the host"
    );
    assert_eq!(std::fs::metadata(dir.join("wb")).unwrap().len(), 1_048_581);
}

/// FUSE_WRITEBACK_CACHE in INIT's flags.
const FUSE_WRITEBACK_CACHE: u64 = 1 << 16;

/// WRITE requests (opcode 16) in a debug log.
fn writes(log: &str) -> usize {
    log.lines().filter(|l| l.contains(" opcode=16 ")).count()
}

#[test]
fn writeback_gathers_writes_and_keeps_their_meaning() {
    let a = Tmpfs::new("64M");
    let with = run(&Backend::union(
        &[(a.path(), Mode::Rw)],
        &["--writeback", "-o", "minfreespace=1M"],
    ));
    assert_host(a.path());
    assert!(
        guest::logged_init_flags(&with.daemon_log).is_some_and(|f| f & FUSE_WRITEBACK_CACHE != 0),
        "INIT did not enable the writeback cache:\n{}",
        with.transcript()
    );
    let gathered = writes(&with.daemon_log);
    // Without it, the same scenario: one WRITE per write(2).
    let b = Tmpfs::new("64M");
    let without = run(&Backend::union(
        &[(b.path(), Mode::Rw)],
        &["-o", "minfreespace=1M"],
    ));
    assert_host(b.path());
    let each = writes(&without.daemon_log);
    assert_eq!(
        guest::logged_init_flags(&without.daemon_log).map(|f| f & FUSE_WRITEBACK_CACHE),
        Some(0)
    );
    println!("WRITE requests: {gathered} with --writeback, {each} without");
    assert!(each >= 256, "{each} WRITEs without the writeback cache");
    assert!(
        gathered * 8 < each,
        "{gathered} WRITEs with the writeback cache, {each} without"
    );
}

/// Runs [`SYMLINK_XATTRS`] against `backend`: the share's answers, and the tmpfs's.
fn symlink_xattrs(backend: &Backend) -> (Vec<String>, Vec<String>) {
    let guest = Guest {
        extra_initrd: vec![guest::tools_initrd()],
        ..Guest::default()
    };
    let run = guest::run_scenario(backend, &guest, SYMLINK_XATTRS);
    run.assert_success();
    let share = run.section("share").expect("share section");
    let local = run.section("local").expect("local section");
    (share, local)
}

#[test]
fn xattrs_on_a_symlink_answer_as_a_local_filesystem() {
    let a = Tmpfs::new("16M");
    let (share, local) = symlink_xattrs(&Backend::union(
        &[(a.path(), Mode::Rw)],
        &["-o", "minfreespace=1M", "--xattr"],
    ));
    assert!(
        local.iter().any(|l| l.contains("No such attribute")),
        "the oracle: {local:?}"
    );
    assert_eq!(share, local);
}

#[test]
fn virtiofsd_xattrs_on_a_symlink_answer_the_same() {
    let a = Tmpfs::new("16M");
    let dir = a.path().to_str().unwrap().to_owned();
    let (share, local) = symlink_xattrs(&Backend::command(
        guest::virtiofsd_binary(),
        &["--socket-path", "{socket}", "--shared-dir", &dir, "--xattr"],
    ));
    assert_eq!(share, local);
}

#[test]
fn virtiofsd_writeback_does_the_same() {
    let a = Tmpfs::new("64M");
    let dir = a.path().to_str().unwrap().to_owned();
    run(&Backend::command(
        guest::virtiofsd_binary(),
        &[
            "--socket-path",
            "{socket}",
            "--shared-dir",
            &dir,
            "--writeback",
        ],
    ));
    assert_host(a.path());
}

/// Lists a 300-file directory five times, then changes it from the guest: each change must
/// show in the next listing.
const LISTINGS: &str = r#"
for i in 1 2 3 4 5; do expect_eq "$(ls /mnt/d | wc -l)" 300 "listing $i"; done
touch /mnt/d/new
expect_eq "$(ls /mnt/d | wc -l)" 301 "after the guest's create"
rm /mnt/d/f7
expect_eq "$(ls /mnt/d | grep -c '^f7$' || true)" 0 "after the guest's unlink"
expect_eq "$(ls /mnt/d | wc -l)" 300 "after the guest's unlink"
"#;

/// READDIR (28) and READDIRPLUS (44) requests in a debug log (ours, or virtiofsd's).
fn listings(log: &str) -> usize {
    log.lines()
        .filter(|l| {
            [
                " opcode=28 ",
                " opcode=44 ",
                "opcode=Readdir (28)",
                "opcode=Readdirplus (44)",
            ]
            .iter()
            .any(|op| l.contains(op))
        })
        .count()
}

/// OPENDIR (27) and RELEASEDIR (29) requests in this daemon's debug log.
fn opens(log: &str) -> (usize, usize) {
    let n = |op: &str| log.lines().filter(|l| l.contains(op)).count();
    (n(" opcode=27 "), n(" opcode=29 "))
}

/// Runs [`LISTINGS`] against `backend` over `dir` (filled with the 300 files first); the
/// directory-reading requests it took, and the daemon's log.
fn list_five_times(backend: &Backend, dir: &Path) -> (usize, String) {
    std::fs::create_dir(dir.join("d")).unwrap();
    for i in 0..300 {
        std::fs::write(dir.join(format!("d/f{i}")), b"").unwrap();
    }
    let run = guest::run_scenario(backend, &Guest::default(), LISTINGS);
    run.assert_success();
    (listings(&run.daemon_log), run.daemon_log)
}

#[test]
fn cache_always_keeps_directory_listings_as_virtiofsd_does() {
    let a = Tmpfs::new("16M");
    let (cached, cached_log) = list_five_times(
        &Backend::union(
            &[(a.path(), Mode::Rw)],
            &["-o", "minfreespace=0", "--cache", "always"],
        ),
        a.path(),
    );
    let b = Tmpfs::new("16M");
    let (uncached, uncached_log) = list_five_times(
        &Backend::union(&[(b.path(), Mode::Rw)], &["-o", "minfreespace=0"]),
        b.path(),
    );
    let c = Tmpfs::new("16M");
    let dir = c.path().to_str().unwrap().to_owned();
    let (theirs, _) = list_five_times(
        &Backend::command(
            guest::virtiofsd_binary(),
            &[
                "--socket-path",
                "{socket}",
                "--shared-dir",
                &dir,
                "--cache",
                "always",
                "--log-level",
                "debug",
            ],
        ),
        c.path(),
    );
    println!(
        "directory reads: {cached} with --cache always, {uncached} with the default, \
         virtiofsd --cache always {theirs}"
    );
    // Each listing of 300 names is at least two requests (one page of entries holds fewer).
    assert!(uncached >= 5 * 2 + 2, "{uncached} reads without caching");
    assert!(
        cached * 2 < uncached,
        "{cached} reads with --cache always, {uncached} without"
    );
    assert!(
        theirs * 2 < uncached,
        "the oracle: virtiofsd read {theirs} times, this daemon uncached {uncached}"
    );
    // With every listing kept, the guest's first OPENDIR is answered ENOSYS (its kernel
    // offers FUSE_NO_OPENDIR_SUPPORT) and it opens directories without asking from then on:
    // no other OPENDIR, no RELEASEDIR, while its listings above stayed right. By default each
    // `ls` opens and releases the directory.
    assert_eq!(
        opens(&cached_log),
        (1, 0),
        "OPENDIR and RELEASEDIR with --cache always"
    );
    assert!(
        cached_log.contains("opens them without OPENDIR and RELEASEDIR from now on"),
        "the daemon says it"
    );
    let (o, r) = opens(&uncached_log);
    assert!(
        o >= 8 && r == o,
        "{o} OPENDIR and {r} RELEASEDIR by default"
    );
}
