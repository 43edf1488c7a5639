//! Static branches in a real guest (QEMU, TCG): an RW upper over a base declared `static`.
//! A second `ls -lR` of a tree that lives only on the base, two seconds after the first (past
//! the default one-second windows), sends no LOOKUP and no READDIR: the guest keeps names,
//! attributes and listings for a day. Its only GETATTRs are one per directory: the guest's
//! kernel marks a directory's atime stale when it reads the directory from the daemon (the
//! first walk), and refreshes it at the next stat. A third walk sends none. The same walks
//! of a tree on the RW upper send their READDIRPLUS again. (The root, merged with the upper,
//! keeps the configured second: its GETATTR is left out of the counts.)

use std::collections::BTreeMap;

use testkit::guest;
use testkit::guest::{Backend, Guest, Mode};
use testkit::tmpfs::Tmpfs;

/// FUSE_LOOKUP, FUSE_GETATTR, FUSE_READDIR and FUSE_READDIRPLUS.
const LOOKUP: u32 = 1;
const GETATTR: u32 = 3;
const READDIR: u32 = 28;
const READDIRPLUS: u32 = 44;

/// Requests with `opcode` the daemon's debug log shows from guest process `pid`, the root's
/// left out.
fn count(log: &str, pid: &str, opcode: u32) -> usize {
    log.lines()
        .filter(|l| l.contains(&format!(" opcode={opcode} ")) && !l.contains(" nodeid=1 "))
        .filter(|l| l.ends_with(&format!(" pid={pid}")))
        .count()
}

/// LOOKUP, GETATTR and READDIR(PLUS) requests from guest process `pid`.
fn counts(log: &str, pid: &str) -> (usize, usize, usize) {
    (
        count(log, pid, LOOKUP),
        count(log, pid, GETATTR),
        count(log, pid, READDIR) + count(log, pid, READDIRPLUS),
    )
}

/// Ten directories of ten files under `root/name`.
fn tree(root: &std::path::Path, name: &str) {
    for d in 0..10 {
        let dir = root.join(format!("{name}/d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..10 {
            std::fs::write(dir.join(format!("f{f}")), format!("{d}/{f}\n")).unwrap();
        }
    }
}

#[test]
fn a_second_walk_of_a_static_base_sends_no_lookup_or_getattr() {
    let (upper, base) = (Tmpfs::new("16M"), Tmpfs::new("16M"));
    tree(base.path(), "base");
    tree(upper.path(), "upper");
    let spec = format!("{}=RO,static", base.path().display());
    let b = Backend::union(
        &[(upper.path(), Mode::Rw)],
        &["--branch", &spec, "-o", "minfreespace=1M"],
    );
    let scenario = r#"
ls -lR base > /dev/null
ls -lR upper > /dev/null
sleep 2
ls -lR base > /tmp/base.txt & b2=$!; wait $b2
ls -lR upper > /dev/null & u2=$!; wait $u2
sleep 2
ls -lR base > /dev/null & b3=$!; wait $b3
ls -lR upper > /dev/null & u3=$!; wait $u3
expect_eq "$(grep -c '^-' /tmp/base.txt)" 100 "files listed in the base"
section pids echo "$b2 $u2 $b3 $u3"
"#;
    let run = guest::run_scenario(&b, &Guest::default(), scenario);
    run.assert_success();
    let pids = run.section("pids").expect("pids section");
    let pids: Vec<&str> = pids[0].split_whitespace().collect();
    let log = &run.daemon_log;
    let walks: BTreeMap<&str, (usize, usize, usize)> = ["base-2", "upper-2", "base-3", "upper-3"]
        .into_iter()
        .zip(&pids)
        .map(|(walk, pid)| (walk, counts(log, pid)))
        .collect();
    let why = || format!("(lookup, getattr, readdir) per walk: {walks:?}");
    println!("{}", why());
    // Eleven directories: base/ and its ten.
    let (lookups, getattrs, readdirs) = walks["base-2"];
    assert_eq!((lookups, readdirs), (0, 0), "{}", why());
    assert!(getattrs <= 11, "{}", why());
    assert_eq!(walks["base-3"], (0, 0, 0), "{}", why());
    // The control: the upper's listings are read again after their second.
    assert!(
        walks["upper-2"].2 > 0 && walks["upper-3"].2 > 0,
        "{}",
        why()
    );
}
