//! POSIX node behaviour through a real QEMU guest: an open file outlives its names, hard links
//! share one node (link counts and inode numbers agree on every name), inode numbers survive
//! renames of files and of directories with children, device nodes can be made by guest root
//! (and not by a guest user), and a union of three branches still answers like one filesystem
//! (a directory's times change when an entry is made in its copy on another branch; rmdir of
//! a directory that is empty on one branch only answers ENOTEMPTY and removes nothing).

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};

use testkit::guest;
use testkit::guest::{Backend, Guest, Mode};
use testkit::tmpfs::Tmpfs;

/// Scenario lines that make guest user `u` (uid/gid 1000) for `su u -c …`.
const ADD_USER_U: &str = r#"echo "u:x:1000:1000::/tmp:/bin/sh" >>/etc/passwd
echo "u:x:1000:" >>/etc/group"#;

#[test]
fn open_unlinked_files_hard_links_renames_and_device_nodes_in_guest() {
    let a = Tmpfs::new("64M");
    let backend = Backend::union(&[(a.path(), Mode::Rw)], &["-o", "minfreespace=1M"]);
    let run = guest::run_scenario(
        &backend,
        &Guest::default(),
        &r#"
# An open file keeps working through another name and through /proc/self/fd after its
# names are gone (getattr, write, reopen, setattr).
exec 3<>f
echo hello >&3
ln f g
expect_eq "$(stat -c %h f)" 2 "link count of f after ln"
expect_eq "$(stat -c %h g)" 2 "link count of g after ln"
expect_eq "$(stat -c %i f)" "$(stat -c %i g)" "hard links share an inode number"
rm f
expect_eq "$(stat -L -c %h /proc/self/fd/3)" 1 "open file after rm f (nlink)"
expect_eq "$(stat -c %h g)" 1 "link count of g after rm f"
expect_eq "$(cat g)" hello "content through the other name"
rm g
expect_eq "$(stat -L -c %h /proc/self/fd/3)" 0 "open-unlinked file (nlink)"
echo world >&3
expect_eq "$(cat /proc/self/fd/3)" "hello
world" "reopening the unlinked file reads it"
chmod 600 /proc/self/fd/3
expect_eq "$(stat -L -c %a /proc/self/fd/3)" 600 "chmod of the unlinked file"
expect_eq "$(stat -L -c %s /proc/self/fd/3)" 12 "size of the unlinked file"
exec 3>&-
expect_eq "$(ls -A)" "" "nothing left in the share"

# Link counts on both names, and on a third name made later.
touch h1
ln h1 h2
expect_eq "$(stat -c %h h1) $(stat -c %h h2)" "2 2" "link counts of h1 h2"
ln h2 h3
expect_eq "$(stat -c %h h1) $(stat -c %h h2) $(stat -c %h h3)" "3 3 3" "three names"
echo data > h3
expect_eq "$(cat h1)" data "a write through one name is seen through another"

# Inode numbers survive renames of a file and of a directory with children.
mkdir -p d1/sub
echo x > d1/sub/file
echo y > file1
di=$(stat -c %i d1); si=$(stat -c %i d1/sub); fi=$(stat -c %i d1/sub/file); f1=$(stat -c %i file1)
lsi=$(ls -di d1 | cut -d' ' -f1)
mv d1 d2
mv file1 file2
expect_eq "$(stat -c %i d2)" "$di" "directory inode after rename"
expect_eq "$(ls -di d2 | cut -d' ' -f1)" "$lsi" "ls -i after rename"
expect_eq "$(stat -c %i d2/sub)" "$si" "child directory inode after parent rename"
expect_eq "$(stat -c %i d2/sub/file)" "$fi" "grandchild inode after parent rename"
expect_eq "$(stat -c %i file2)" "$f1" "file inode after rename"
expect_eq "$(cat d2/sub/file)" x "grandchild content after parent rename"
mkdir d2/sub/deeper
expect_err "Invalid argument" "mv d2 d2/sub/deeper/loop"

# Device nodes, FIFOs and sockets as guest root; not as a guest user.
mkdir dev
mknod dev/null c 1 3
mknod dev/sda b 8 0
mkfifo dev/fifo
expect_eq "$(stat -c %F dev/null)" "character special file" "char device type"
expect_eq "$(stat -c %t:%T dev/null)" "1:3" "char device numbers"
expect_eq "$(stat -c %F dev/sda)" "block special file" "block device type"
echo discarded > dev/null
chmod 777 dev
ADD_USER_U
expect_err "Operation not permitted" "su u -c 'mknod dev/null2 c 1 3'"
su u -c "mkfifo dev/userfifo"
expect_eq "$(stat -c %u:%g dev/userfifo)" "1000:1000" "a guest user's FIFO is owned by them"
"#
        .replace("ADD_USER_U", ADD_USER_U),
    );
    run.assert_success();
    let root = a.path();
    assert!(!root.join("f").exists() && !root.join("g").exists());
    assert_eq!(fs::read(root.join("h2")).unwrap(), b"data\n");
    assert_eq!(fs::metadata(root.join("h1")).unwrap().nlink(), 3);
    let null = fs::symlink_metadata(root.join("dev/null")).unwrap();
    assert!(null.file_type().is_char_device(), "{}", run.transcript());
    assert_eq!(null.rdev(), libc::makedev(1, 3));
    let sda = fs::symlink_metadata(root.join("dev/sda")).unwrap();
    assert!(sda.file_type().is_block_device());
    assert!(fs::symlink_metadata(root.join("dev/fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
    assert!(!root.join("dev/null2").exists());
}

#[test]
fn three_branches_answer_like_one_filesystem_in_guest() {
    let (a, b, c) = (Tmpfs::new("16M"), Tmpfs::new("16M"), Tmpfs::new("64M"));
    // `d` on a and c, bound to a's copy (first found); epmfs creates in c (most free space).
    for t in [&a, &c] {
        fs::create_dir(t.path().join("d")).unwrap();
    }
    // `e` is empty on a but holds `x` on c.
    fs::create_dir(a.path().join("e")).unwrap();
    fs::create_dir(c.path().join("e")).unwrap();
    fs::write(c.path().join("e/x"), "x").unwrap();
    let old = filetime_2000();
    for t in [&a, &c] {
        set_times(&t.path().join("d"), old);
    }
    let backend = Backend::union(
        &[
            (a.path(), Mode::Rw),
            (b.path(), Mode::Rw),
            (c.path(), Mode::Rw),
        ],
        &["-o", "category.create=epmfs,minfreespace=1M"],
    );
    let run = guest::run_scenario(
        &backend,
        &Guest::default(),
        r#"
expect_eq "$(stat -c %Y d)" 946684800 "d's mtime before"
touch d/new
[ "$(stat -c %Y d)" -gt 946684800 ] || fail "d's mtime did not change: $(stat -c %Y d)"
[ "$(stat -c %Z d)" -gt 946684800 ] || fail "d's ctime did not change: $(stat -c %Z d)"
expect_err "Directory not empty" "rmdir e"
expect_eq "$(ls e)" x "e still lists x"
mkdir s
expect_err "Directory not empty" "mv -T s e"
expect_eq "$(ls e)" x "e still lists x after the refused rename"
"#,
    );
    run.assert_success();
    assert!(
        c.path().join("d/new").exists() && !a.path().join("d/new").exists(),
        "the entry must have been made on another branch than the bound copy\n{}",
        run.transcript()
    );
    assert!(a.path().join("e").is_dir(), "rmdir removed nothing");
    assert!(c.path().join("e/x").exists());
}

/// 2000-01-01T00:00:00Z.
fn filetime_2000() -> libc::timespec {
    libc::timespec {
        tv_sec: 946_684_800,
        tv_nsec: 0,
    }
}

fn set_times(path: &std::path::Path, t: libc::timespec) {
    let p = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let ts = [t, t];
    // SAFETY: `p` is a valid C string and `ts` two valid timespecs, alive for the call.
    let r = unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), ts.as_ptr(), 0) };
    assert_eq!(r, 0, "utimensat {}", path.display());
}

#[test]
fn privileges_are_cleared_as_the_kernel_would_in_guest() {
    let a = Tmpfs::new("64M");
    let backend = Backend::union(&[(a.path(), Mode::Rw)], &["-o", "minfreespace=1M"]);
    let run = guest::run_scenario(
        &backend,
        &Guest::default(),
        &r#"
ADD_USER_U
for f in w t o c; do echo data >$f; done
chmod 6777 w t o
chmod 4755 c
chmod 777 .
# A write, a truncate and a truncating open by a user who is not the owner clear set-user-ID
# and (group-executable) set-group-ID, as on a local filesystem.
su u -c "echo more >>w"
expect_eq "$(stat -c %a w)" 777 "write by a non-owner"
su u -c "truncate -s 1 t"
expect_eq "$(stat -c %a t)" 777 "truncate by a non-owner"
su u -c "echo new >o"
expect_eq "$(stat -c %a o)" 777 "O_TRUNC open by a non-owner"
expect_eq "$(cat o)" new "content after the truncating open"
# chown clears set-user-ID even for root.
chown 1000 c
expect_eq "$(stat -c %a:%u c)" 755:1000 "chown"
# Root (CAP_FSETID) keeps them.
echo x >r; chmod 4755 r; echo more >>r
expect_eq "$(stat -c %a r)" 4755 "write by root"
"#
        .replace("ADD_USER_U", ADD_USER_U),
    );
    run.assert_success();
    let flags = guest::logged_init_flags(&run.daemon_log).expect("INIT logged");
    assert_ne!(
        flags & (1 << 28),
        0,
        "FUSE_HANDLE_KILLPRIV_V2 negotiated: {flags:#x}"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = |n: &str| fs::metadata(a.path().join(n)).unwrap().permissions().mode() & 0o7777;
    assert_eq!(
        (mode("w"), mode("t"), mode("o"), mode("r")),
        (0o777, 0o777, 0o777, 0o4755)
    );
}
