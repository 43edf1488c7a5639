//! The union-semantics scenario shared by the e2e test (against union-virtiofsd) and
//! `examples/guest_backend.rs --mergerfs` (against mergerfs + virtiofsd, to check that the
//! expectations match mergerfs). Knows branches and expected outcomes, nothing about QEMU.

use std::fs;
use std::path::Path;

use tempfile::TempDir;

use crate::guest::GuestRun;
use crate::tree::{self, Tree};

/// Branch `a` (RW, first) and `b` (RO), pre-populated so that names overlap and differ.
pub struct Branches {
    /// First branch, RW.
    pub a: TempDir,
    /// Second branch, RO.
    pub b: TempDir,
}

/// Writes `contents` to `root/rel`, creating parent directories.
pub fn write(root: &Path, rel: &str, contents: &[u8]) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, contents).unwrap();
}

/// Fresh branches: `shared.txt` in both (different contents), `onlya/` only in a, `onlyb/` and
/// `ro.txt` only in b, `common/` in both with one file each.
pub fn branches() -> Branches {
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

/// The guest side of the scenario (run in /mnt after [`crate::guest::PRELUDE`]): its checks, and
/// the sections `root`, `common` and `after` that [`check`] reads.
pub const UNION_SCENARIO: &str = r#"
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

/// Asserts the scenario's outcome: guest-side checks passed, merged listings, and where files
/// landed on the host; `b_before` is [`tree::snapshot`] of branch `b` taken before the run.
pub fn check(run: &GuestRun, br: &Branches, b_before: &Tree) {
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
        &tree::snapshot(br.b.path()),
        b_before,
        "RO branch b was modified"
    );
}
