//! What a real guest (QEMU, TCG) sees of changes the host makes to the branches while the
//! share is mounted, for each round trip the daemon lets the guest skip (issue 47, item 6):
//!
//! - the lookup memo (defaults, two branches): a name the host adds is found at once (no
//!   negative entries by default), a file the host adds on a higher branch shadows the lower
//!   copy and a file it removes is gone once the guest's one-second entry window has passed,
//!   though the daemon had learnt where each name was;
//! - directories read without OPENDIR (`--cache always`): the listing the guest keeps stays
//!   as it was (documented: a day, once the guest has refreshed the directory's attributes
//!   after the READDIR that filled it), and once the guest's caches are dropped the next listing,
//!   served without a handle, has the host's new name; with `cache.readdir=true` alone (the
//!   default one-second attributes) the guest sees the directory's new mtime after a second
//!   and lists the name without dropping anything;
//! - a static base: an edited file keeps its old pages and a new name stays out of the kept
//!   listing past the default windows, as documented, and both show after a cache drop.
//!
//! The guest says when it has cached the old state (it creates `ready` through the share);
//! the host then changes the branches and creates `go`, which the guest waits for (a missing
//! name is looked up again each time: no negative entries in these configurations).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use testkit::guest;
use testkit::guest::{Backend, Guest, Mode};
use testkit::tmpfs::Tmpfs;

/// Scenario helper: wait (up to 60 s) until `go` exists in the share.
const WAIT_GO: &str = r#"
wait_go() { i=0; while [ ! -e go ]; do i=$((i+1)); [ $i -lt 600 ] || fail "no go from the host after 60 s"; sleep 0.1; done; }
"#;

/// FUSE_OPENDIR.
const OPENDIR: u32 = 27;

/// Runs `change` on the host once the guest has created `ready` in one of `branches`, then
/// creates `go` in the first of them. Gives up (changing nothing) after 120 s.
fn on_ready(
    branches: &[&Path],
    change: impl FnOnce() + Send + 'static,
) -> std::thread::JoinHandle<bool> {
    let branches: Vec<PathBuf> = branches.iter().map(|b| b.to_path_buf()).collect();
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !branches.iter().any(|b| b.join("ready").exists()) {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        change();
        std::fs::write(branches[0].join("go"), "").unwrap();
        true
    })
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn the_union_shows_host_changes_once_the_guest_asks_again() {
    let (b1, b2) = (Tmpfs::new("16M"), Tmpfs::new("16M"));
    write(&b2.path().join("d/f"), "lower\n");
    write(&b2.path().join("d/gone"), "x\n");
    std::fs::create_dir(b1.path().join("d")).unwrap();
    let (p1, p2) = (b1.path().to_owned(), b2.path().to_owned());
    let host = on_ready(&[b1.path(), b2.path()], move || {
        write(&p1.join("d/f"), "upper\n");
        std::fs::remove_file(p2.join("d/gone")).unwrap();
        write(&p2.join("d/new"), "new\n");
    });
    let b = Backend::union(
        &[(b1.path(), Mode::Rw), (b2.path(), Mode::Rw)],
        &["-o", "minfreespace=1M"],
    );
    let scenario = format!(
        r#"{WAIT_GO}
expect_eq "$(cat d/f)" lower "d/f before"
[ -e d/gone ] || fail "d/gone missing before"
[ ! -e d/new ] || fail "d/new there before"
ls d > /dev/null
touch ready
wait_go
[ -e d/new ] || fail "a name the host added is not found at once"
sleep 2
expect_eq "$(cat d/f)" upper "d/f after the entry window"
[ ! -e d/gone ] || fail "a name the host removed is still there after the entry window"
expect_eq "$(ls d | tr '\n' ' ')" "f new " "the listing after"
"#
    );
    let run = guest::run_scenario(&b, &Guest::default(), &scenario);
    assert!(host.join().unwrap(), "{}", run.transcript());
    run.assert_success();
}

/// The daemon run with `args`; `ls dir` in the guest, the host adds `dir/new`, and what the
/// guest lists then (`before`) and after `then` (a guest command).
fn list_around_a_host_create(args: &[&str], then: &str) -> guest::GuestRun {
    let t = Tmpfs::new("16M");
    for n in ["a", "b"] {
        write(&t.path().join("dir").join(n), "x\n");
    }
    let p = t.path().to_owned();
    let host = on_ready(&[t.path()], move || write(&p.join("dir/new"), "new\n"));
    let b = Backend::union(&[(t.path(), Mode::Rw)], args);
    let scenario = format!(
        r#"{WAIT_GO}
expect_eq "$(ls dir | tr '\n' ' ')" "a b " "the listing before"
# Again: its stat refreshes the attributes the first reading marked stale (the kernel does
# that after every READDIR it sends), and the listing comes from the guest's cache.
ls dir > /dev/null
touch ready
wait_go
section before ls -1 dir
{then}
section after ls -1 dir
"#
    );
    let run = guest::run_scenario(&b, &Guest::default(), &scenario);
    assert!(host.join().unwrap(), "{}", run.transcript());
    run.assert_success();
    run
}

/// Every listing was served without OPENDIR but the first (answered ENOSYS).
fn assert_no_opendir(run: &guest::GuestRun) {
    assert_eq!(
        guest::logged_requests(&run.daemon_log, OPENDIR),
        1,
        "OPENDIR requests (the first is answered ENOSYS)\n{}",
        run.transcript()
    );
}

#[test]
fn cache_always_lists_a_host_change_after_a_cache_drop() {
    let run = list_around_a_host_create(
        &["--cache", "always", "-o", "minfreespace=1M"],
        "sync; echo 3 > /proc/sys/vm/drop_caches",
    );
    let why = run.transcript();
    // Documented: the guest keeps its listing (its attributes, mtime included, for a day).
    assert_eq!(run.section("before").unwrap(), ["a", "b"], "{why}");
    assert_eq!(run.section("after").unwrap(), ["a", "b", "new"], "{why}");
    assert_no_opendir(&run);
}

#[test]
fn kept_listings_with_the_default_windows_list_a_host_change_after_a_second() {
    let run = list_around_a_host_create(&["-o", "cache.readdir=true,minfreespace=1M"], "sleep 2");
    let why = run.transcript();
    assert_eq!(run.section("after").unwrap(), ["a", "b", "new"], "{why}");
    assert_no_opendir(&run);
}

#[test]
fn a_static_base_changed_on_the_host_shows_after_a_cache_drop() {
    let (upper, base) = (Tmpfs::new("16M"), Tmpfs::new("16M"));
    write(&base.path().join("s/f"), "old\n");
    let p = base.path().to_owned();
    let host = on_ready(&[upper.path()], move || {
        write(&p.join("s/f"), "new\n");
        write(&p.join("s/added"), "added\n");
    });
    let spec = format!("{}=RO,static", base.path().display());
    let b = Backend::union(
        &[(upper.path(), Mode::Rw)],
        &["--branch", &spec, "-o", "minfreespace=1M"],
    );
    let scenario = format!(
        r#"{WAIT_GO}
expect_eq "$(cat s/f)" old "s/f before"
expect_eq "$(ls s | tr '\n' ' ')" "f " "the listing before"
# Again: its stat refreshes the attributes the first reading marked stale (the kernel does
# that after every READDIR it sends), and the listing comes from the guest's cache.
ls s > /dev/null
touch ready
wait_go
sleep 2
expect_eq "$(cat s/f)" old "s/f past the default windows (kept, as documented)"
expect_eq "$(ls s | tr '\n' ' ')" "f " "the listing past the default windows (kept)"
sync; echo 3 > /proc/sys/vm/drop_caches
expect_eq "$(cat s/f)" new "s/f after the cache drop"
expect_eq "$(ls s | tr '\n' ' ')" "added f " "the listing after the cache drop"
"#
    );
    let run = guest::run_scenario(&b, &Guest::default(), &scenario);
    assert!(host.join().unwrap(), "{}", run.transcript());
    run.assert_success();
}
