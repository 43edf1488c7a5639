//! `--xattrmap` (and `-o xattrmap=`) in a real guest, next to virtiofsd 1.14 with the same
//! map: the guest sets, reads, lists and removes xattrs with getfattr/setfattr; its
//! transcript and the names stored on the host branch must be the ones expected and the same
//! under both daemons. Names passing unchanged (the behaviour before the map was honoured)
//! fail both checks: `trusted.*` would land (or fail) as itself, and refused names would be
//! set. A guest file capability stored under another name must be cleared by the changes
//! that clear the real one (a direct write the guest leaves to the daemon among them).
//!
//! Also without a guest: a map either daemon refuses is refused by the other (exit status 2,
//! one error line here); and, through the `FileSystem` impl over two branches, what a shell
//! cannot show: every copy renamed, the list's size and ERANGE measured on the mapped list,
//! `unsupported`'s ENOTSUP, ACL names refused before and after mapping, and a renamed
//! capability cleared by the daemon itself on each change that clears the real one.

use std::path::Path;
use std::process::Command;

use fuse_backend_rs::abi::fuse_abi::{stat64, SetattrValid};
use fuse_backend_rs::api::filesystem::{GetxattrReply, ListxattrReply};
use rustix::fs::XattrFlags;
use std::os::unix::fs::MetadataExt;
use testkit::calls::Calls;
use testkit::errno::errno_of;
use testkit::fsharness::{c, ctx, walk};
use testkit::guest::{Backend, Guest, Mode};
use testkit::tmpfs::Tmpfs;
use testkit::{fsharness, guest, tree};
use union_virtiofsd::fs::xattrmap::XattrMap;
use union_virtiofsd::fs::{FsConfig, UnionFs};

/// `trusted.*` stored under `user.vm.`, other `user.*` names as they are, every other guest
/// name refused; in lists, `user.vm.` is stripped and every other host name shown (the `ok`
/// rule's empty prepend matches them all).
const PREFIX_MAP: &str = ":prefix:all:trusted.:user.vm.::ok:all:user.:::bad:all:::";

/// virtiofsd's SELinux example: the guest's `security.*` kept apart from the host's, under
/// `trusted.virtiofs.` (the daemons keep CAP_SYS_ADMIN for `trusted.*`).
const SELINUX_MAP: &str = ":map:security.:trusted.virtiofs.:";

/// Shell helpers: `try CMD...` prints `ok: CMD = OUTPUT` or `error: CMD = STRERROR`; `names
/// FILE` prints the file's xattr names as the guest lists them, sorted.
const HELPERS: &str = r#"
T=/opt/tools/bin
set_() { $T/setfattr -n "$1" -v "$2" "$3"; }
get() { $T/getfattr --only-values -n "$1" "$2"; }
rm_() { $T/setfattr -x "$1" "$2"; }
try() {
    if out=$("$@" 2>&1); then echo "ok: $* = $out"; else echo "error: $* = ${out##*: }"; fi
}
names() { $T/getfattr --absolute-names -m - "$1" 2>&1 | grep -v '^#' | grep -v '^$' | sort; }
cd /mnt
echo x > f
"#;

const PREFIX_SCENARIO: &str = r#"
ops() {
    try set_ trusted.foo tv f
    try set_ user.bar uv f
    try set_ security.baz sv f
    # `ok:all:user.` lets the guest write under user.vm. directly (the doc's warning).
    try set_ user.vm.trusted.direct dv f
    try set_ trusted.gone x f
    try rm_ trusted.gone f
    try get trusted.foo f
    try get user.bar f
    try get security.baz f
    try get trusted.host pre
    try get user.plain pre
    try get user.vm.trusted.host pre
    # Listed (the ok rule shows it), yet refused by name.
    try get security.raw pre
    try rm_ security.raw pre
    try rm_ security.baz f
}
section ops ops
section names-f names f
section names-pre names pre
"#;

const SELINUX_SCENARIO: &str = r#"
ops() {
    try set_ security.guest g1 f
    try set_ user.u g2 f
    try set_ trusted.virtiofs.sneak s f
    try get security.label pre
    try get security.hostlabel pre
    try get trusted.virtiofs.security.label pre
    try get trusted.other pre
    try get user.plain pre
    try rm_ trusted.virtiofs.security.label pre
    try rm_ security.label pre
    try get security.label pre
}
section ops ops
section names-f names f
section names-pre names pre
"#;

/// What the guest printed, by section.
#[derive(Debug, PartialEq)]
struct Seen {
    ops: Vec<String>,
    names_f: Vec<String>,
    names_pre: Vec<String>,
}

/// The branch (a tmpfs) with `pre` holding `host` xattrs set on the host.
fn branch(host: &[(&str, &str)]) -> Tmpfs {
    let t = Tmpfs::new("16M");
    let pre = t.path().join("pre");
    std::fs::write(&pre, "pre\n").unwrap();
    for (name, value) in host {
        rustix::fs::setxattr(&pre, *name, value.as_bytes(), XattrFlags::empty())
            .unwrap_or_else(|e| panic!("host setxattr {name}: {e}"));
    }
    t
}

/// `name=value` for every xattr of `path` on the host, sorted.
fn host_xattrs(path: &Path) -> Vec<String> {
    let mut out: Vec<String> = tree::xattrs(path, &[""])
        .into_iter()
        .map(|(name, v)| format!("{name}={}", String::from_utf8_lossy(&v)))
        .collect();
    out.sort();
    out
}

/// The names of `path`'s xattrs on the host, sorted (for values no shell prints).
fn host_names(path: &Path) -> Vec<String> {
    let mut out: Vec<String> = tree::xattrs(path, &[""])
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    out.sort();
    out
}

fn run(backend: &Backend, scenario: &str) -> Seen {
    let guest = Guest {
        extra_initrd: vec![guest::tools_initrd()],
        ..Guest::default()
    };
    let run = guest::run_scenario(backend, &guest, &format!("{HELPERS}\n{scenario}"));
    run.assert_success();
    let section = |n: &str| {
        run.section(n)
            .unwrap_or_else(|| panic!("no {n} section:\n{}", run.transcript()))
    };
    Seen {
        ops: section("ops"),
        names_f: section("names-f"),
        names_pre: section("names-pre"),
    }
}

fn lines(s: &[&str]) -> Vec<String> {
    s.iter().map(|l| (*l).to_owned()).collect()
}

const PREFIX_HOST: [(&str, &str); 3] = [
    ("user.vm.trusted.host", "h1"),
    ("user.plain", "h2"),
    ("security.raw", "h3"),
];

/// The guest's transcript and the host's names for [`PREFIX_MAP`].
fn check_prefix(seen: &Seen, dir: &Path) {
    assert_eq!(
        seen.ops,
        lines(&[
            "ok: set_ trusted.foo tv f = ",
            "ok: set_ user.bar uv f = ",
            "error: set_ security.baz sv f = Operation not permitted",
            "ok: set_ user.vm.trusted.direct dv f = ",
            "ok: set_ trusted.gone x f = ",
            "ok: rm_ trusted.gone f = ",
            "ok: get trusted.foo f = tv",
            "ok: get user.bar f = uv",
            "error: get security.baz f = No such attribute",
            "ok: get trusted.host pre = h1",
            "ok: get user.plain pre = h2",
            "ok: get user.vm.trusted.host pre = h1",
            "error: get security.raw pre = No such attribute",
            "error: rm_ security.raw pre = Operation not permitted",
            "error: rm_ security.baz f = Operation not permitted",
        ])
    );
    assert_eq!(
        seen.names_f,
        lines(&["trusted.direct", "trusted.foo", "user.bar"])
    );
    assert_eq!(
        seen.names_pre,
        lines(&["security.raw", "trusted.host", "user.plain"])
    );
    assert_eq!(
        host_xattrs(&dir.join("f")),
        lines(&[
            "user.bar=uv",
            "user.vm.trusted.direct=dv",
            "user.vm.trusted.foo=tv"
        ])
    );
    assert_eq!(
        host_xattrs(&dir.join("pre")),
        lines(&[
            "security.raw=h3",
            "user.plain=h2",
            "user.vm.trusted.host=h1"
        ])
    );
}

const SELINUX_HOST: [(&str, &str); 4] = [
    ("trusted.virtiofs.security.label", "h1"),
    ("security.hostlabel", "h2"),
    ("user.plain", "h3"),
    ("trusted.other", "h4"),
];

/// The guest's transcript and the host's names for [`SELINUX_MAP`].
fn check_selinux(seen: &Seen, dir: &Path) {
    assert_eq!(
        seen.ops,
        lines(&[
            "ok: set_ security.guest g1 f = ",
            "ok: set_ user.u g2 f = ",
            "error: set_ trusted.virtiofs.sneak s f = Operation not permitted",
            "ok: get security.label pre = h1",
            "error: get security.hostlabel pre = No such attribute",
            "error: get trusted.virtiofs.security.label pre = No such attribute",
            "ok: get trusted.other pre = h4",
            "ok: get user.plain pre = h3",
            "error: rm_ trusted.virtiofs.security.label pre = Operation not permitted",
            "ok: rm_ security.label pre = ",
            "error: get security.label pre = No such attribute",
        ])
    );
    assert_eq!(seen.names_f, lines(&["security.guest", "user.u"]));
    // security.hostlabel, the host's own, is hidden.
    assert_eq!(seen.names_pre, lines(&["trusted.other", "user.plain"]));
    assert_eq!(
        host_xattrs(&dir.join("f")),
        lines(&["trusted.virtiofs.security.guest=g1", "user.u=g2"])
    );
    assert_eq!(
        host_xattrs(&dir.join("pre")),
        lines(&["security.hostlabel=h2", "trusted.other=h4", "user.plain=h3"])
    );
}

/// Runs `scenario` under union-virtiofsd and then under virtiofsd 1.14, each on a fresh
/// branch whose `pre` holds `host`'s xattrs and each started with the same `map` arguments:
/// `check` must pass on both, and both transcripts must be the same.
fn same_as_virtiofsd(host: &[(&str, &str)], map: &[&str], scenario: &str, check: fn(&Seen, &Path)) {
    let ours = branch(host);
    let args = [&["-o", "minfreespace=1M"][..], map].concat();
    let seen = run(&Backend::union(&[(ours.path(), Mode::Rw)], &args), scenario);
    check(&seen, ours.path());

    let theirs = branch(host);
    let dir = theirs.path().to_str().unwrap();
    let args = [
        &["--socket-path", "{socket}", "--shared-dir", dir, "--xattr"][..],
        map,
    ]
    .concat();
    let reference = run(
        &Backend::command(guest::virtiofsd_binary(), &args),
        scenario,
    );
    assert_eq!(seen, reference, "virtiofsd 1.14 answered otherwise");
    check(&reference, theirs.path());
}

#[test]
fn prefix_map_renames_refuses_and_hides_as_virtiofsd() {
    same_as_virtiofsd(
        &PREFIX_HOST,
        &["--xattrmap", PREFIX_MAP],
        PREFIX_SCENARIO,
        check_prefix,
    );
}

#[test]
fn selinux_map_from_the_legacy_option_as_virtiofsd() {
    let legacy = format!("xattrmap={SELINUX_MAP}");
    same_as_virtiofsd(
        &SELINUX_HOST,
        &["-o", &legacy, "--modcaps=+sys_admin"],
        SELINUX_SCENARIO,
        check_selinux,
    );
}

/// A guest file capability (v2: CAP_NET_RAW permitted and effective).
const CAP_VALUE: &str = "0x0100000200200000000000000000000000000000";

/// Under [`SELINUX_MAP`] the guest's `security.capability` is stored as
/// `trusted.virtiofs.security.capability`, which the host kernel does not clear: a write
/// (direct, under `--cache never`: the guest leaves it to the daemon), a truncating open and
/// a chown must each clear it, as they clear the real one; an untouched file keeps it.
const CAPABILITY_SCENARIO: &str = r#"
cap() { $T/getfattr --absolute-names -e hex -n security.capability "$1" | grep =; }
ops() {
    for f in written truncated owned kept; do
        echo x > $f
        try set_ security.capability __CAP__ $f
    done
    try cap written
    echo y >> written
    : > truncated
    try chown 1:1 owned
    for f in written truncated owned kept; do try cap $f; done
}
section ops ops
section names-f names kept
section names-pre names pre
"#;

fn check_capability(seen: &Seen, dir: &Path) {
    let cap = format!("security.capability={CAP_VALUE}");
    let mut ops: Vec<String> = ["written", "truncated", "owned", "kept"]
        .iter()
        .map(|f| format!("ok: set_ security.capability {CAP_VALUE} {f} = "))
        .collect();
    ops.extend([
        format!("ok: cap written = {cap}"),
        "ok: chown 1:1 owned = ".into(),
        "error: cap written = No such attribute".into(),
        "error: cap truncated = No such attribute".into(),
        "error: cap owned = No such attribute".into(),
        format!("ok: cap kept = {cap}"),
    ]);
    assert_eq!(seen.ops, ops);
    assert_eq!(seen.names_f, lines(&["security.capability"]));
    assert_eq!(seen.names_pre, lines(&["user.plain"]));
    for f in ["written", "truncated", "owned"] {
        assert_eq!(
            host_names(&dir.join(f)),
            Vec::<String>::new(),
            "{f} on the host"
        );
    }
    assert_eq!(
        host_names(&dir.join("kept")),
        lines(&["trusted.virtiofs.security.capability"])
    );
}

#[test]
fn a_renamed_file_capability_is_cleared_by_write_truncate_and_chown_as_virtiofsd() {
    same_as_virtiofsd(
        &[("user.plain", "h")],
        &[
            "--xattrmap",
            SELINUX_MAP,
            "--modcaps=+sys_admin",
            "--cache",
            "never",
        ],
        &CAPABILITY_SCENARIO.replace("__CAP__", CAP_VALUE),
        check_capability,
    );
}

/// Maps both daemons accept, and maps both refuse (virtiofsd's own test cases among them).
#[test]
fn the_same_maps_are_refused_with_one_error_line() {
    let good = [
        ":map::user.virtiofs.:",
        ":prefix:all::user.virtiofs.::bad:all:::",
        "/prefix/all/trusted./user.virtiofs./\n /bad/server//trusted./\n \
         /bad/client/user.virtiofs.//\n /ok/all///",
        ":prefix:client:trusted.:user.virtiofs.:",
        ":unsupported:all:security.:security.: ;ok;all;;;",
        " :ok:all:::\t:bad:all::: ",
    ];
    let bad = [
        "",
        "   ",
        ":prefix:client:hi",
        ":prefix:all:trusted.:user.vm.::ok:all:user.::bad:all:::",
        ":TOMATOPIRATE:trusted.:virtiofs.user.:",
        "/prefix/helloworld///",
        ":map:trusted.:virtiofs.user.::map:trusted.:virtiofs.user.:",
        ":map::u.: :ok:all:::",
        ":OK:all:::",
    ];
    let work = tempfile::tempdir().unwrap();
    for (map, accepted) in good
        .iter()
        .map(|m| (m, true))
        .chain(bad.iter().map(|m| (m, false)))
    {
        let theirs = Command::new(guest::virtiofsd_binary())
            .args(["--print-capabilities", "--xattrmap", map])
            .output()
            .unwrap();
        assert_eq!(
            theirs.status.success(),
            accepted,
            "virtiofsd on {map:?}: {}",
            String::from_utf8_lossy(&theirs.stderr)
        );
        // Our daemon checks the map before it opens branches: a good map gets as far as the
        // missing branch, a bad one no further than the map.
        let ours = Command::new(guest::daemon_path())
            .arg("--socket-path")
            .arg(work.path().join("s"))
            .args(["--shared-dir", "/nonexistent/branch", "--xattrmap", map])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&ours.stderr);
        assert_eq!(ours.status.code(), Some(2), "{map:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{map:?}: {err}");
        assert_eq!(
            !err.contains("invalid --xattrmap: "),
            accepted,
            "{map:?}: {err}"
        );
    }
}

/// A union over `branches` (each RW) with `map`.
fn mapped_union(branches: &[&Path], map: &str) -> UnionFs {
    // As the command line does: a map implies --xattr.
    let opts = union_virtiofsd::fs::options::UnionOptions {
        xattr: union_virtiofsd::fs::options::XattrMode::Passthrough,
        xattrmap: Some(XattrMap::parse(map).unwrap()),
        minfreespace: 0,
        ..Default::default()
    };
    UnionFs::new(FsConfig {
        branches: branches
            .iter()
            .map(|p| format!("{}=RW", p.display()).parse().unwrap())
            .collect(),
        opts,
        ids: Default::default(),
    })
    .unwrap()
}

#[test]
fn every_copy_is_renamed_and_lists_are_sized_after_mapping() {
    let (a, b) = (Tmpfs::new("4M"), Tmpfs::new("4M"));
    for t in [&a, &b] {
        std::fs::write(t.path().join("f"), "x").unwrap();
    }
    let host = |t: &Tmpfs| host_xattrs(&t.path().join("f"));
    let fs = mapped_union(&[a.path(), b.path()], PREFIX_MAP);
    let f = walk(&fs, "f").unwrap().inode;
    // setxattr and removexattr reach every copy (category.action=epall) under the host name.
    fs.setxattr(&ctx(), f, &c("trusted.k"), b"v", 0).unwrap();
    fs.setxattr(&ctx(), f, &c("trusted.gone"), b"v", 0).unwrap();
    fs.removexattr(&ctx(), f, &c("trusted.gone")).unwrap();
    assert_eq!(host(&a), lines(&["user.vm.trusted.k=v"]));
    assert_eq!(host(&b), host(&a));
    // A host name the map hides still counts on the host, not in the guest's list.
    rustix::fs::setxattr(a.path().join("f"), "security.h", b"h", XattrFlags::empty()).unwrap();
    let fs = mapped_union(&[a.path()], ":map::user.vm.:");
    let f = walk(&fs, "f").unwrap().inode;
    let mapped = b"trusted.k\0";
    assert!(matches!(
        fs.listxattr(&ctx(), f, 0).unwrap(),
        ListxattrReply::Count(n) if n as usize == mapped.len()
    ));
    match fs.listxattr(&ctx(), f, mapped.len() as u32).unwrap() {
        ListxattrReply::Names(n) => assert_eq!(n, mapped),
        ListxattrReply::Count(_) => panic!("a count for a sized request"),
    }
    assert_eq!(
        errno_of(fs.listxattr(&ctx(), f, mapped.len() as u32 - 1)),
        libc::ERANGE
    );
    assert!(matches!(
        fs.getxattr(&ctx(), f, &c("trusted.k"), 0).unwrap(),
        GetxattrReply::Count(1)
    ));
    // `map` with an empty key ends in `bad`: nothing outside the prefix is reachable.
    assert_eq!(
        errno_of(fs.getxattr(&ctx(), f, &c("user.vm.trusted.k"), 64)),
        libc::ENODATA
    );
}

#[test]
fn refusals_answer_virtiofsds_errnos() {
    let a = Tmpfs::new("4M");
    std::fs::write(a.path().join("f"), "x").unwrap();
    rustix::fs::setxattr(a.path().join("f"), "user.s", b"v", XattrFlags::empty()).unwrap();
    let map = ":unsupported:all:user.s:user.s::bad:client:user.b::\
               :prefix:client:acc:system.posix_acl_::ok:all:::";
    let fs = mapped_union(&[a.path()], map);
    let f = walk(&fs, "f").unwrap().inode;
    // unsupported: ENOTSUP for every call, and hidden.
    assert_eq!(
        errno_of(fs.getxattr(&ctx(), f, &c("user.s"), 64)),
        libc::ENOTSUP
    );
    assert_eq!(
        errno_of(fs.setxattr(&ctx(), f, &c("user.s"), b"v", 0)),
        libc::ENOTSUP
    );
    assert_eq!(
        errno_of(fs.removexattr(&ctx(), f, &c("user.s"))),
        libc::ENOTSUP
    );
    assert!(matches!(
        fs.listxattr(&ctx(), f, 0).unwrap(),
        ListxattrReply::Count(0)
    ));
    // bad: EPERM, but ENODATA to a read.
    assert_eq!(
        errno_of(fs.getxattr(&ctx(), f, &c("user.b"), 64)),
        libc::ENODATA
    );
    assert_eq!(
        errno_of(fs.setxattr(&ctx(), f, &c("user.b"), b"v", 0)),
        libc::EPERM
    );
    assert_eq!(
        errno_of(fs.removexattr(&ctx(), f, &c("user.b"))),
        libc::EPERM
    );
    // ACL names are refused as the guest sent them, and as the map makes them.
    for name in ["system.posix_acl_access", "access"] {
        assert_eq!(
            errno_of(fs.setxattr(&ctx(), f, &c(name), b"v", 0)),
            libc::EOPNOTSUPP,
            "{name}"
        );
    }
    assert_eq!(host_xattrs(&a.path().join("f")), lines(&["user.s=v"]));
}

/// The daemon clears a renamed file capability itself on each change the host kernel clears
/// `security.capability` on (the guest leaves a direct write to the daemon, and asks before
/// the others only when it knows of the capability): a write, a copy into the file, an
/// fallocate, a truncate by name and through an open file, a truncating open, a chown; not a
/// chmod or a new time, nor a directory's.
#[test]
fn a_renamed_capability_is_cleared_by_the_daemon_itself() {
    let t = Tmpfs::new("4M");
    let renamed = "trusted.virtiofs.security.capability";
    let files = [
        "written",
        "copied",
        "allocated",
        "truncated",
        "ftruncated",
        "opened",
        "owned",
        "touched",
    ];
    for f in files {
        std::fs::write(t.path().join(f), "x").unwrap();
    }
    std::fs::create_dir(t.path().join("d")).unwrap();
    std::fs::write(t.path().join("kept-source"), "z").unwrap();
    for f in files.iter().chain(&["d", "kept-source"]) {
        rustix::fs::setxattr(t.path().join(f), renamed, b"cap", XattrFlags::empty()).unwrap();
    }
    let fs = mapped_union(&[t.path()], SELINUX_MAP);
    let ino = |f: &str| walk(&fs, f).unwrap().inode;
    let attr = |size: i64, uid: u32, mode: u32| {
        // SAFETY: stat64 is plain data; all zeroes is a valid value.
        let mut a: stat64 = unsafe { std::mem::zeroed() };
        (a.st_size, a.st_uid, a.st_gid, a.st_mode) = (size, uid, uid, mode);
        a
    };

    let f = ino("written");
    let (fh, _, _) = fs.open(&ctx(), f, libc::O_WRONLY as u32, 0).unwrap();
    let data = fsharness::SliceReader(b"y".to_vec(), 0);
    let n = fs
        .write(
            &ctx(),
            f,
            fh.unwrap(),
            &mut { data },
            1,
            1,
            None,
            false,
            0,
            0,
        )
        .unwrap();
    assert_eq!(n, 1);
    fs.release(&ctx(), f, 0, fh.unwrap(), false, false, None)
        .unwrap();

    let (src, dst) = (ino("kept-source"), ino("copied"));
    let (sfh, _, _) = fs.open(&ctx(), src, libc::O_RDONLY as u32, 0).unwrap();
    let (dfh, _, _) = fs.open(&ctx(), dst, libc::O_WRONLY as u32, 0).unwrap();
    let (sfh, dfh) = (sfh.unwrap(), dfh.unwrap());
    let n = fs
        .copy_file_range(&ctx(), src, sfh, 0, dst, dfh, 1, 1, 0)
        .unwrap();
    assert_eq!(n, 1);
    fs.release(&ctx(), src, 0, sfh, false, false, None).unwrap();
    fs.release(&ctx(), dst, 0, dfh, false, false, None).unwrap();
    // A handle that cannot change the file cannot strip its capability either.
    let f = ino("touched");
    let (fh, _, _) = fs.open(&ctx(), f, libc::O_RDONLY as u32, 0).unwrap();
    assert_eq!(
        errno_of(fs.fallocate(&ctx(), f, fh.unwrap(), 0, 0, 8192)),
        libc::EBADF
    );
    fs.release(&ctx(), f, 0, fh.unwrap(), false, false, None)
        .unwrap();
    let f = ino("allocated");
    let (fh, _, _) = fs.open(&ctx(), f, libc::O_WRONLY as u32, 0).unwrap();
    fs.fallocate(&ctx(), f, fh.unwrap(), 0, 0, 8192).unwrap();
    fs.release(&ctx(), f, 0, fh.unwrap(), false, false, None)
        .unwrap();

    fs.setattr(
        &ctx(),
        ino("truncated"),
        attr(0, 0, 0),
        None,
        SetattrValid::SIZE,
    )
    .unwrap();
    let f = ino("ftruncated");
    let (fh, _, _) = fs.open(&ctx(), f, libc::O_RDWR as u32, 0).unwrap();
    fs.setattr(&ctx(), f, attr(0, 0, 0), fh, SetattrValid::SIZE)
        .unwrap();
    fs.release(&ctx(), f, 0, fh.unwrap(), false, false, None)
        .unwrap();
    let f = ino("opened");
    let (fh, _, _) = fs
        .open(&ctx(), f, (libc::O_WRONLY | libc::O_TRUNC) as u32, 0)
        .unwrap();
    fs.release(&ctx(), f, 0, fh.unwrap(), false, false, None)
        .unwrap();
    let owner = SetattrValid::UID | SetattrValid::GID;
    fs.setattr(&ctx(), ino("owned"), attr(0, 1, 0), None, owner)
        .unwrap();
    fs.setattr(&ctx(), ino("d"), attr(0, 1, 0), None, owner)
        .unwrap();
    let touch = SetattrValid::MODE | SetattrValid::MTIME_NOW;
    fs.setattr(&ctx(), ino("touched"), attr(0, 0, 0o600), None, touch)
        .unwrap();

    for f in &files[..files.len() - 1] {
        assert_eq!(host_names(&t.path().join(f)), Vec::<String>::new(), "{f}");
    }
    // Neither a file only chmod'ed, touched and read, nor a directory, nor the copy's source.
    for f in ["touched", "d", "kept-source"] {
        assert_eq!(host_names(&t.path().join(f)), lines(&[renamed]), "{f}");
    }
    // The changes themselves were made.
    assert_eq!(std::fs::read(t.path().join("written")).unwrap(), b"xy");
    assert_eq!(std::fs::read(t.path().join("copied")).unwrap(), b"xz");
    assert_eq!(
        std::fs::metadata(t.path().join("allocated")).unwrap().len(),
        8192
    );
    assert_eq!(std::fs::metadata(t.path().join("owned")).unwrap().uid(), 1);
}
