//! `--posix-acl` in a real guest: one scenario of POSIX ACL operations runs in the same boot
//! on the share and on a tmpfs the guest mounts itself (the oracle: the guest kernel's own
//! ACL semantics), and the two transcripts must match line by line. Backends: union-virtiofsd
//! over one tmpfs branch, over two branches whose create policy puts new files beside a
//! directory made on the other branch (its parent, default ACL included, is cloned there), over
//! copy-on-write layers whose read-only lower layer holds an ACL'd file and a directory with a
//! default ACL, and virtiofsd 1.14 with the same flag.
//!
//! Covered: an access ACL set and read back; a default ACL on a directory and the files,
//! directories and fifos made inside it under umask 022 and 077 (the default ACL wins over the
//! umask) and outside it (the umask applies); chmod of an ACL'd file rewriting the mask entry;
//! `setfacl -b` and `-k`; the set-group-ID bit cleared when the owner, outside the file's
//! group, sets an ACL, and kept when inside it; enforcement: a user granted rw only by an ACL
//! entry writes, one denied by an entry (`u:1000:---`) on a 0666 file neither reads nor writes,
//! nor creates in a 0777 directory denying it so.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use testkit::guest;
use testkit::guest::{Backend, Guest, Mode};
use testkit::tmpfs::Tmpfs;

/// Guest user `u` (uid/gid 1000) for `su u -c …`.
const ADD_USER_U: &str = r#"echo "u:x:1000:1000::/tmp:/bin/sh" >>/etc/passwd
echo "u:x:1000:" >>/etc/group"#;

/// Makes, in the current directory, the objects that the copy-on-write run finds on its
/// read-only lower layer: `cowf` (0640, `u:1000:rw`) and `cowd` (0755, default ACL
/// `u:1000:rwx`). Run by the host (`T=/usr/bin`) for that lower layer, by the guest elsewhere.
const PREP: &str = r#"printf 'base\n' > cowf
chmod 640 cowf
$T/setfacl -m u:1000:rw cowf
mkdir cowd
chmod 755 cowd
$T/setfacl -d -m u:1000:rwx cowd
"#;

/// The scenario, as a shell function `probe DIR` printing a canonical transcript: numeric
/// `getfacl -n` listings, `stat` lines (name, octal mode, owner, kind) and the outcome of each
/// access as `NAME: allowed|denied`. Nothing in it is fatal (`set +e`, stderr folded into
/// the transcript): a failure is a difference, and the transcripts are compared whole.
const PROBE: &str = r#"
T=/opt/tools/bin
# r CMD...: run, folding stderr in; a failure is a line of the transcript.
r() { if ! "$@" 2>&1; then echo "failed: $*"; fi; }
acl() { for f in "$@"; do r $T/getfacl -n "$f"; done; }
st() { for f in "$@"; do stat -c '%n %a %u:%g %F' "$f"; done; }
# can WHAT CMD: whether user u may run CMD.
can() { if su u -c "$2" >/dev/null 2>&1; then echo "$1: allowed"; else echo "$1: denied"; fi; }
probe() {
    set +e
    cd "$1" || return
    umask 022
    # The copy-on-write run finds these on its lower layer (copied up below); elsewhere made here.
    [ -e cowf ] || { PREP_COMMANDS }
    echo "--- copy-up"
    acl cowf cowd
    can "append cowf through the ACL" "echo more >> $1/cowf"
    r cat cowf
    acl cowf
    r chmod 600 cowf
    acl cowf
    echo x > cowd/f
    mkdir cowd/d
    acl cowd cowd/f cowd/d
    st cowf cowd cowd/f cowd/d

    mkdir t
    chmod 755 t
    cd t
    echo "--- access ACL"
    echo data > f1
    r $T/setfacl -m u:1000:rw f1
    acl f1
    st f1
    echo "--- default ACL"
    mkdir d
    r $T/setfacl -d -m u:1000:rwx,g::rx,o::- d
    acl d
    for m in 022 077; do
        umask $m
        echo x > d/file$m
        mkdir d/dir$m
        mknod d/node$m p
        mkfifo d/fifo$m
        echo x > d/dir$m/nested
        echo x > out$m
        mkdir outdir$m
        mkfifo outfifo$m
        acl d/file$m d/dir$m d/node$m d/fifo$m d/dir$m/nested out$m outdir$m outfifo$m
        st d/file$m d/dir$m d/node$m d/fifo$m d/dir$m/nested out$m outdir$m outfifo$m
    done
    umask 022
    echo "--- chmod rewrites the mask"
    r chmod 640 f1
    acl f1
    r chmod 664 f1
    acl f1
    r chmod 700 d/file022
    acl d/file022
    st f1 d/file022
    echo "--- removal"
    r $T/setfacl -b f1
    acl f1
    r $T/setfacl -k d
    acl d
    r $T/setfacl -b d/dir022
    acl d/dir022
    st f1 d d/dir022
    echo "--- set-group-ID"
    touch g_out g_in
    chown 1000:0 g_out
    chown 1000:1000 g_in
    chmod 2775 g_out g_in
    can "setfacl on g_out (not in its group)" "$T/setfacl -m u:0:r $1/t/g_out"
    can "setfacl on g_in (in its group)" "$T/setfacl -m u:0:r $1/t/g_in"
    st g_out g_in
    acl g_out g_in
    echo "--- enforcement"
    echo secret > granted
    chmod 600 granted
    r $T/setfacl -m u:1000:rw granted
    can "write granted" "echo u >> $1/t/granted"
    can "read granted" "cat $1/t/granted"
    r cat granted
    echo open > denied
    chmod 666 denied
    r $T/setfacl -m u:1000:--- denied
    can "write denied" "echo u >> $1/t/denied"
    can "read denied" "cat $1/t/denied"
    r cat denied
    mkdir closed
    chmod 777 closed
    r $T/setfacl -m u:1000:--- closed
    can "create in closed" "touch $1/t/closed/x"
    st granted denied closed
    acl granted denied closed
    cd /
    set -e
}
"#;

/// Runs [`PROBE`] on the share (section `share`) and on a tmpfs of the guest's own (section
/// `local`).
fn scenario() -> String {
    let prep = PREP.replace('\n', "; ");
    format!(
        "{ADD_USER_U}\n{}\nmkdir -p /tmp/local\nmount -t tmpfs none /tmp/local\n\
         section share probe /mnt 2>&1\nsection local probe /tmp/local 2>&1\n",
        PROBE.replace("PREP_COMMANDS", &prep)
    )
}

/// The guest's transcripts on the share and on its own tmpfs, after [`PROBE`] ran on both
/// against `backend`.
fn transcripts(backend: &Backend) -> (guest::GuestRun, Vec<String>, Vec<String>) {
    let g = Guest {
        extra_initrd: vec![guest::tools_initrd()],
        timeout: Duration::from_secs(300),
        ..Guest::default()
    };
    let run = guest::run_scenario(backend, &g, &scenario());
    run.assert_success();
    let share = run.section("share").expect("share section");
    let local = run.section("local").expect("local section");
    println!("share transcript:\n{}", share.join("\n"));
    (run, share, local)
}

/// Panics, showing `diff -u` of the two, unless the share's transcript is the tmpfs's.
fn assert_same(what: &str, share: &[String], local: &[String]) {
    assert!(
        local.iter().any(|l| l.starts_with("default:user:1000:rwx")),
        "the oracle saw no default ACL: {local:#?}"
    );
    if share == local {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (t, s) = (dir.path().join("tmpfs"), dir.path().join("share"));
    std::fs::write(&t, local.join("\n") + "\n").unwrap();
    std::fs::write(&s, share.join("\n") + "\n").unwrap();
    let diff = Command::new("diff")
        .arg("-u")
        .args([&t, &s])
        .output()
        .expect("diff");
    panic!(
        "{what}: the share's transcript differs from the guest tmpfs's:\n{}\n--- share\n{}",
        String::from_utf8_lossy(&diff.stdout),
        share.join("\n")
    );
}

/// FUSE_DONT_MASK, FUSE_POSIX_ACL and FUSE_SETXATTR_EXT in INIT's flags.
const ACL_INIT_FLAGS: u64 = (1 << 6) | (1 << 20) | (1 << 29);

/// The host's `getfacl -n` of `path` (relative to `dir`), header lines dropped.
fn host_acl(dir: &Path, path: &str) -> Vec<String> {
    let out = Command::new("getfacl")
        .args(["-n", "--omit-header", path])
        .current_dir(dir)
        .output()
        .expect("host getfacl (scripts/install-deps.sh installs acl)");
    assert!(
        out.status.success(),
        "getfacl {path}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Whether a `getfacl` listing has an entry starting `entry` (an `#effective:` comment may
/// follow it).
fn has_entry(listing: &[String], entry: &str) -> bool {
    listing.iter().any(|l| l.starts_with(entry))
}

/// Our daemon negotiated the three ACL flags (its INIT debug line).
fn assert_acl_negotiated(run: &guest::GuestRun) {
    let enabled = guest::logged_init_flags(&run.daemon_log);
    assert!(
        enabled.is_some_and(|f| f & ACL_INIT_FLAGS == ACL_INIT_FLAGS),
        "INIT enabled {enabled:#x?}, want POSIX_ACL|DONT_MASK|SETXATTR_EXT:\n{}",
        run.transcript()
    );
}

#[test]
fn acls_on_one_branch_behave_as_on_the_guests_tmpfs() {
    let a = Tmpfs::new("32M");
    let (run, share, local) = transcripts(&Backend::union(
        &[(a.path(), Mode::Rw)],
        &["--posix-acl", "-o", "minfreespace=1M"],
    ));
    assert_same("one branch", &share, &local);
    assert_acl_negotiated(&run);
    // The ACLs are the host's own xattrs.
    assert!(has_entry(&host_acl(a.path(), "t/granted"), "user:1000:rw-"));
    assert!(has_entry(
        &host_acl(a.path(), "t/d/dir077"),
        "default:user:1000:rwx"
    ));
}

#[test]
fn acls_survive_a_cloned_parent() {
    // Directories go to the first branch (ff), everything else to the one with the most free
    // space (mfs: b), so each file made in t/d needs t/d cloned onto b, default ACL included.
    let (a, b) = (Tmpfs::new("16M"), Tmpfs::new("64M"));
    let (run, share, local) = transcripts(&Backend::union(
        &[(a.path(), Mode::Rw), (b.path(), Mode::Rw)],
        &[
            "--posix-acl",
            "-o",
            "category.create=mfs,func.mkdir=ff,minfreespace=1M",
        ],
    ));
    assert_same("two branches", &share, &local);
    assert_acl_negotiated(&run);
    let on = |t: &Tmpfs, rel: &str| t.path().join(rel).exists();
    assert!(
        on(&a, "t/outdir022") && !on(&b, "t/outdir022"),
        "mkdir went to a"
    );
    assert!(
        on(&b, "t/d/file022") && !on(&a, "t/d/file022"),
        "create went to b"
    );
    assert!(
        on(&b, "t/d/fifo077") && !on(&a, "t/d/fifo077"),
        "mknod went to b"
    );
    assert!(
        on(&a, "t/d/dir022") && on(&b, "t/d/dir022/nested"),
        "t/d/dir022 cloned onto b"
    );
    assert!(on(&b, "cowd/f") && !on(&a, "cowd/f"), "cowd cloned onto b");
    // t/d/dir077's clone on b (made for `nested`) carries its default ACL.
    assert!(
        has_entry(&host_acl(b.path(), "t/d/dir077"), "default:user:1000:rwx"),
        "the clone of t/d/dir077 lost its default ACL"
    );
}

#[test]
fn acls_survive_copy_up() {
    let lower = Tmpfs::new("16M");
    let upper = Tmpfs::new("32M");
    let ok = Command::new("sh")
        .args(["-c", &format!("T=/usr/bin\nset -e\n{PREP}")])
        .current_dir(lower.path())
        .status()
        .expect("sh")
        .success();
    assert!(ok, "preparing the lower layer (host setfacl)");
    let before = host_acl(lower.path(), "cowf");
    let (run, share, local) = transcripts(&Backend::union(
        &[(upper.path(), Mode::Rw), (lower.path(), Mode::Ro)],
        &["--posix-acl", "-o", "cow=true,minfreespace=1M"],
    ));
    assert_same("copy-on-write", &share, &local);
    assert_acl_negotiated(&run);
    assert_eq!(
        host_acl(lower.path(), "cowf"),
        before,
        "the lower layer changed"
    );
    assert_eq!(
        std::fs::read_to_string(lower.path().join("cowf")).unwrap(),
        "base\n"
    );
    assert!(
        has_entry(&host_acl(upper.path(), "cowf"), "user:1000:rw-"),
        "the copy-up lost the ACL"
    );
    assert!(upper.path().join("cowd/f").exists(), "cowd copied up");
}

#[test]
fn virtiofsd_acls_behave_as_on_the_guests_tmpfs() {
    let a = Tmpfs::new("32M");
    let dir = a.path().to_str().unwrap().to_owned();
    let (_, share, local) = transcripts(&Backend::command(
        guest::virtiofsd_binary(),
        &[
            "--socket-path",
            "{socket}",
            "--shared-dir",
            &dir,
            "--posix-acl",
        ],
    ));
    assert_same("virtiofsd 1.14", &share, &local);
    assert!(has_entry(&host_acl(a.path(), "t/granted"), "user:1000:rw-"));
}
