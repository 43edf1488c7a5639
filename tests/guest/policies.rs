//! mergerfs policies through a real QEMU guest: tmpfs branches of different sizes on the host,
//! the guest's own file operations, and the host checking which branch received what.

use std::fs;
use std::process::Command;

use testkit::guest;
use testkit::guest::{Backend, Guest, Mode};
use testkit::tmpfs::Tmpfs;

fn holders(b: &[&Tmpfs], rel: &str) -> Vec<usize> {
    (0..b.len())
        .filter(|&i| b[i].path().join(rel).exists())
        .collect()
}

#[test]
fn space_policies_and_minfreespace_in_guest() {
    let (a, b, c) = (Tmpfs::new("16M"), Tmpfs::new("64M"), Tmpfs::new("32M"));
    let opts = "category.create=mfs,func.mkdir=lfs,minfreespace=20M";
    let backend = Backend::union(
        &[
            (a.path(), Mode::Rw),
            (b.path(), Mode::Rw),
            (c.path(), Mode::Rw),
        ],
        &["-o", opts],
    );
    let run = guest::run_scenario(
        &backend,
        &Guest::default(),
        r#"
echo one > first          # mfs: b (64M) has the most space
dd if=/dev/zero of=big bs=1M count=40 2>/dev/null   # b again; b now has ~24M left, c 32M
sync
echo two > second         # mfs: now c
mkdir lfsdir              # lfs among branches above 20M free: b (~24M), not a (16M < 20M)
section df df -k .
"#,
    );
    run.assert_success();
    let br = [&a, &b, &c];
    assert_eq!(holders(&br, "first"), [1], "{}", run.transcript());
    assert_eq!(holders(&br, "big"), [1]);
    assert_eq!(holders(&br, "second"), [2]);
    assert_eq!(holders(&br, "lfsdir"), [1]);
    assert!(
        fs::read_dir(a.path()).unwrap().next().is_none(),
        "a is under minfreespace"
    );
    // The guest's df is the sum of the three filesystems: 112M.
    let df = run.section("df").unwrap();
    let total_k: u64 = df[1].split_whitespace().nth(1).unwrap().parse().unwrap();
    assert_eq!(total_k, 112 * 1024, "{df:?}");
}

#[test]
fn moveonenospc_and_enospc_in_guest() {
    let (a, b) = (Tmpfs::new("16M"), Tmpfs::new("64M"));
    let scenario = r#"
dd if=/dev/urandom of=/tmp/src bs=1M count=30 2>/dev/null
if cp /tmp/src grow; then echo copied; else echo failed; fi
section sum md5sum /tmp/src
"#;
    // Without moveonenospc the small first-found branch fills up: the guest sees ENOSPC.
    let plain = Backend::union(
        &[(a.path(), Mode::Rw), (b.path(), Mode::Rw)],
        &["-o", "category.create=ff,minfreespace=0"],
    );
    let run = guest::run_scenario(&plain, &Guest::default(), scenario);
    run.assert_success();
    assert!(
        run.console.contains("No space left on device"),
        "{}",
        run.transcript()
    );
    assert!(run.console.contains("failed"));
    fs::remove_file(a.path().join("grow")).unwrap();

    // With it, the file moves to the big branch mid-copy and no byte is lost.
    let moving = Backend::union(
        &[(a.path(), Mode::Rw), (b.path(), Mode::Rw)],
        &["-o", "category.create=ff,minfreespace=0,moveonenospc=mfs"],
    );
    let run = guest::run_scenario(&moving, &Guest::default(), scenario);
    run.assert_success();
    assert!(run.console.contains("copied"), "{}", run.transcript());
    assert!(
        !a.path().join("grow").exists(),
        "moved away from the full branch"
    );
    let sum = run.section("sum").unwrap()[0]
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let host = Command::new("md5sum")
        .arg(b.path().join("grow"))
        .output()
        .unwrap();
    let host = String::from_utf8(host.stdout).unwrap();
    assert_eq!(
        host.split_whitespace().next().unwrap(),
        sum,
        "content intact on branch b"
    );
    assert!(
        run.daemon_log.contains("moveonenospc: moved"),
        "{}",
        run.transcript()
    );
}
