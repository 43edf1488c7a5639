//! A directory read without OPENDIR across a migration (issue 47, item 6). With `--cache
//! always` the guest's kernel opens directories itself (its first OPENDIR was answered
//! ENOSYS) and reads them with READDIR requests that carry no handle, only the offset of the
//! last entry it has: the listing such a reading goes on in lives in the daemon, not in the
//! session. A guest process reads the first entries of a 300-name directory, the guest
//! migrates to a fresh daemon, and the process reads the rest of the same open directory
//! there: every name once, none missing. The destination serves those READDIRs (no OPENDIR
//! reaches it: the guest's kernel remembers that none is needed), and a create there shows
//! in the next listing.

use std::time::Duration;

use testkit::guest::{self, Backend, Guest};
use testkit::migrate::{self, Plan, Side};
use testkit::tmpfs::Tmpfs;

/// FUSE_OPENDIR and FUSE_READDIRPLUS.
const OPENDIR: u32 = 27;
const READDIRPLUS: u32 = 44;

/// Names in the directory read across the migration.
const NAMES: usize = 300;

#[test]
fn a_directory_read_without_opendir_goes_on_after_a_migration() {
    let share = Tmpfs::new("16M");
    let big = share.path().join("big");
    std::fs::create_dir(&big).unwrap();
    for i in 0..NAMES {
        std::fs::write(big.join(format!("name-{i:03}")), "").unwrap();
    }
    let backend = Backend::union(
        &[(share.path(), guest::Mode::Rw)],
        &["-o", "minfreespace=1M", "--cache", "always"],
    );
    let scenario = format!(
        r#"
export PATH=/opt/tools/bin:$PATH
wait_file() {{ i=0; while [ ! -e "$1" ]; do i=$((i+1)); [ $i -lt 600 ] || fail "$2"; sleep 0.1; done; }}
guest_readdir /mnt/big 10 /tmp/started /tmp/go > /tmp/names &
reader=$!
wait_file /tmp/started "guest_readdir did not start"
migrate_now
outcome=$(wait_migrated)
expect_eq "$outcome" done "migration outcome"
touch /tmp/go
wait $reader || fail "guest_readdir failed after the migration"
expect_eq "$(wc -l < /tmp/names)" {NAMES} "names read across the migration"
expect_eq "$(sort -u /tmp/names | wc -l)" {NAMES} "distinct names read across the migration"
expect_eq "$(sort /tmp/names | head -1) $(sort /tmp/names | tail -1)" "name-000 name-299" "first and last name"
echo after > /mnt/big/zz-after
expect_eq "$(ls /mnt/big | wc -l)" {} "the listing after a create on the destination"
"#,
        NAMES + 1
    );
    let g = Guest {
        smp: 2,
        mem: "512M".to_owned(),
        timeout: Duration::from_secs(100),
        extra_initrd: vec![guest::tools_initrd()],
        ..Guest::default()
    };
    let plan = Plan::new(share.path().join(".migrated"));
    let run = migrate::run_migration(&backend, &backend, &g, &scenario, plan);
    let t = run.transcript();
    run.assert_completed();
    run.assert_success();
    assert_eq!(run.exit_on, Some(Side::Dest), "{t}");
    // The source answered the guest's only OPENDIR (ENOSYS); the destination got none and
    // served the rest of the listing.
    assert_eq!(
        guest::logged_requests(&run.source_daemon_log, OPENDIR),
        1,
        "{t}"
    );
    assert_eq!(
        guest::logged_requests(&run.dest_daemon_log, OPENDIR),
        0,
        "{t}"
    );
    assert!(
        guest::logged_requests(&run.dest_daemon_log, READDIRPLUS) > 0,
        "{t}"
    );
}
