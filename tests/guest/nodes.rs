//! Nodes in a real guest (QEMU, Debian 6.12 kernel): a guest copies a tree far larger than
//! the daemon's open file limit, and every file arrives intact (the daemon keeps a bounded
//! number of node descriptors and reopens the rest); an open-unlinked file, hard links and a
//! rename keep working while their nodes are closed and reopened, in every
//! `--inode-file-handles` mode.

use std::time::Duration;

use testkit::guest::{Backend, Guest, Mode};
use testkit::tmpfs::Tmpfs;
use testkit::{guest, tree};

/// `extra` daemon arguments at info level (debug logs every request).
fn backend(t: &Tmpfs, extra: &[&str]) -> Backend {
    Backend::union(&[(t.path(), Mode::Rw)], extra).at_info()
}

#[test]
fn a_guest_copies_a_tree_far_larger_than_the_open_file_limit() {
    let t = Tmpfs::new("256M");
    // 2,500 files in 25 directories: with the copy, the guest holds three times as many
    // nodes as the daemon may open descriptors.
    for d in 0..25 {
        let dir = t.path().join(format!("tree/d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..100 {
            std::fs::write(
                dir.join(format!("f{f}")),
                format!("{d}/{f}\n").repeat(f + 1),
            )
            .unwrap();
        }
    }
    let b = backend(
        &t,
        &[
            "--rlimit-nofile",
            "2048",
            "--cache",
            "always",
            "-o",
            "minfreespace=1M",
        ],
    );
    let g = Guest {
        timeout: Duration::from_secs(300),
        ..Guest::default()
    };
    let run = guest::run_scenario(
        &b,
        &g,
        "cp -a tree copy\necho \"copied: $(find copy -type f | wc -l)\"",
    );
    run.assert_success();
    assert!(run.console.contains("copied: 2500"), "{}", run.transcript());
    assert_eq!(
        tree::snapshot(&t.path().join("copy")),
        tree::snapshot(&t.path().join("tree")),
        "the copy differs"
    );
    assert!(
        run.daemon_log.contains("open file limit: 2048"),
        "{}",
        run.transcript()
    );
}

#[test]
fn open_unlinked_files_hard_links_and_renames_in_every_mode() {
    let scenario = r#"
echo data > f
exec 3< f
ln f g
rm f
# Enough other nodes that the daemon closes those of f and g.
mkdir many; for i in $(seq 40); do echo $i > many/x$i; done; ls -l many >/dev/null
expect_eq "$(cat <&3)" data "the open-unlinked file"
expect_eq "$(stat -c %h g)" 1 "link count after the unlink"
mv g h
for i in $(seq 40); do cat many/x$i >/dev/null; done
expect_eq "$(cat h)" data "the renamed link"
ln h i
expect_eq "$(stat -c %i h)" "$(stat -c %i i)" "one inode number for two links"
echo "nodes ok"
"#;
    for mode in ["never", "prefer", "mandatory"] {
        let t = Tmpfs::new("16M");
        let handles = format!("--inode-file-handles={mode}");
        let b = backend(&t, &[&handles, "-o", "minfreespace=1M,node-fds=8"]);
        let run = guest::run_scenario(&b, &Guest::default(), scenario);
        run.assert_success();
        assert!(
            run.console.contains("nodes ok"),
            "{mode}: {}",
            run.transcript()
        );
    }
}
