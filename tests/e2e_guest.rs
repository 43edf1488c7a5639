//! End-to-end tests in a real QEMU guest (TCG) against `union-virtiofsd`: the guest's virtio-fs
//! driver does the I/O and the host checks which branch holds what. Needs QEMU, the guest kernel
//! and initramfs (scripts/install-deps.sh, fetch-kernel.sh, build-initramfs.sh); fails, never
//! skips, without them.

#[path = "support/guest.rs"]
mod guest;

use std::fs;
use std::path::Path;

use guest::{Backend, Guest, Mode};
use tempfile::TempDir;

/// Branch `a` (RW, first) and `b` (RO), pre-populated so that names overlap and differ.
struct Branches {
    a: TempDir,
    b: TempDir,
}

fn write(root: &Path, rel: &str, contents: &[u8]) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, contents).unwrap();
}

fn branches() -> Branches {
    let (a, b) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    write(a.path(), "shared.txt", b"from a\n");
    write(b.path(), "shared.txt", b"from b, must stay hidden\n");
    write(a.path(), "onlya/a1.txt", b"a1\n");
    write(b.path(), "onlyb/b1.txt", b"b1\n");
    write(a.path(), "common/x_a.txt", b"xa\n");
    write(b.path(), "common/x_b.txt", b"xb\n");
    write(b.path(), "ro.txt", b"read only\n");
    Branches { a, b }
}

const UNION_SCENARIO: &str = r#"
# First branch wins for a name in both branches.
expect_eq "$(cat shared.txt)" "from a" "shared.txt content"
expect_eq "$(cat ro.txt)" "read only" "RO-only file readable"
expect_eq "$(cat onlyb/b1.txt)" "b1" "file in RO-only dir"

# Merged, de-duplicated readdir.
section root ls -1a
section common ls -1 common

# create, write, read back, append
echo hello > new.txt
expect_eq "$(cat new.txt)" "hello" "read back"
echo more >> new.txt
expect_eq "$(cat new.txt)" "hello
more" "read back after append"
echo c > common/new_c.txt

# rename
mv new.txt renamed.txt
[ ! -e new.txt ] || fail "new.txt still exists after rename"
expect_eq "$(cat renamed.txt)" "hello
more" "renamed content"

# unlink
echo tmp > gone.txt
rm gone.txt
[ ! -e gone.txt ] || fail "gone.txt still exists after unlink"

# mkdir where the parent exists only on the RW branch
mkdir onlya/sub
echo s > onlya/sub/f.txt
expect_eq "$(cat onlya/sub/f.txt)" "s" "file in new dir"

# the RO branch is never modified
expect_err "Read-only file system" "echo x > /mnt/ro.txt"
expect_err "Read-only file system" "echo x >> /mnt/ro.txt"
expect_err "Read-only file system" "mkdir /mnt/onlyb/sub"
expect_eq "$(cat ro.txt)" "read only" "RO file unchanged"

section after ls -1a
"#;

#[test]
fn union_semantics_in_guest() {
    let br = branches();
    let b_before = guest::snapshot(br.b.path());
    let backend = Backend::union(&[(br.a.path(), Mode::Rw), (br.b.path(), Mode::Ro)], &[]);
    let run = guest::run_scenario(&backend, &Guest::default(), UNION_SCENARIO);
    run.assert_success();

    let section = |name| {
        run.section(name)
            .unwrap_or_else(|| panic!("no section {name}\n{}", run.transcript()))
    };
    assert_eq!(
        section("root"),
        [
            ".",
            "..",
            "common",
            "onlya",
            "onlyb",
            "ro.txt",
            "shared.txt"
        ],
        "merged root listing"
    );
    assert_eq!(section("common"), ["x_a.txt", "x_b.txt"], "merged common/");
    assert_eq!(
        section("after"),
        [
            ".",
            "..",
            "common",
            "onlya",
            "onlyb",
            "renamed.txt",
            "ro.txt",
            "shared.txt"
        ],
        "root listing after the scenario"
    );

    // New files landed in the first RW branch; the RO branch is byte-for-byte unchanged.
    let a = br.a.path();
    assert_eq!(fs::read(a.join("renamed.txt")).unwrap(), b"hello\nmore\n");
    assert_eq!(fs::read(a.join("common/new_c.txt")).unwrap(), b"c\n");
    assert_eq!(fs::read(a.join("onlya/sub/f.txt")).unwrap(), b"s\n");
    for gone in ["new.txt", "gone.txt", "onlyb", "ro.txt"] {
        assert!(!a.join(gone).exists(), "{gone} must not exist in branch a");
    }
    assert_eq!(fs::read(a.join("shared.txt")).unwrap(), b"from a\n");
    assert_eq!(
        guest::snapshot(br.b.path()),
        b_before,
        "RO branch b was modified"
    );
}

/// Reads a 4 MiB host file, writes a copy through the guest, and reports the negotiated max_pages.
fn big_io_with(extra: &[&str]) -> u32 {
    let br = branches();
    let pattern: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
    fs::write(br.a.path().join("big.bin"), &pattern).unwrap();
    let backend = Backend::union(&[(br.a.path(), Mode::Rw), (br.b.path(), Mode::Ro)], extra);
    let guest = Guest {
        queue_size: 1024,
        ..Guest::default()
    };
    let run = guest::run_scenario(
        &backend,
        &guest,
        r#"
dd if=big.bin of=/tmp/big bs=1M 2>/dev/null
dd if=/tmp/big of=big.copy bs=1M conv=fsync 2>/dev/null
sync; echo 3 > /proc/sys/vm/drop_caches
cmp big.copy big.bin || fail "4 MiB copy differs in the guest"
"#,
    );
    run.assert_success();
    assert!(
        fs::read(br.a.path().join("big.copy")).unwrap() == pattern,
        "4 MiB copy differs on the host"
    );
    guest::logged_max_pages(&run.daemon_log)
        .unwrap_or_else(|| panic!("daemon log has no max_pages=N line\n{}", run.transcript()))
}

#[test]
fn max_pages_option_limits_negotiation() {
    let limited = big_io_with(&["--max-pages", "32"]);
    assert_eq!(limited, 32, "--max-pages 32");
}

#[test]
fn max_pages_default_follows_queue_size() {
    let default = big_io_with(&[]);
    // The daemon advertises min(--max-pages default, queue size - 4).
    assert!(
        default > 32 && default <= 1020,
        "default max_pages={default}, expected 32 < N <= 1020 with queue-size 1024"
    );
}
