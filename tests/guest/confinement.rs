//! Every sandbox mode serving a real guest (QEMU, Debian kernel), always under `--seccomp
//! kill`: the namespace sandbox as root (the default), the chroot sandbox, no sandbox, and an
//! unprivileged daemon in a user namespace with virtiofsd's `--uid-map`/`--gid-map`; and
//! `--translate-uid/--translate-gid`. In each, guest root and a guest user make, change and
//! remove files, and the test reads on the host who owns what was made.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use testkit::guest::{Backend, Guest, Mode};
use testkit::tmpfs::Tmpfs;
use testkit::{guest, users};

/// What the guest does in every mode: as root and as user `u` (1000), create, write, chmod,
/// link, rename, list and remove; a file made on the host is read back. Prints the ids the
/// guest sees for the kept entries.
const WORKLOAD: &str = r#"echo "u:x:1000:1000::/tmp:/bin/sh" >>/etc/passwd
echo "u:x:1000:" >>/etc/group
expect_eq "$(cat from-host)" "host data" "a file made on the host"
mkdir rootdir
echo root > rootdir/f
chmod 640 rootdir/f
ln rootdir/f rootdir/g
mv rootdir/g rootdir/h
expect_eq "$(stat -c %h rootdir/f)" 2 "link count"
rm rootdir/h
chmod 777 .
su u -c "mkdir userdir && echo user > userdir/f && chmod 600 userdir/f && mv userdir/f userdir/kept"
expect_eq "$(su u -c 'cat userdir/kept')" user "the user reads back"
expect_err "Permission denied" "su u -c 'cat rootdir/f'"
section IDS stat -c '%n %u %g' rootdir rootdir/f userdir userdir/kept from-host
"#;

/// The ids the guest printed in its IDS section: name -> (uid, gid).
fn guest_ids(run: &guest::GuestRun) -> std::collections::BTreeMap<String, (u32, u32)> {
    let lines = run.section("IDS").expect("IDS section");
    lines
        .iter()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f[0].to_owned(),
                (f[1].parse().unwrap(), f[2].parse().unwrap()),
            )
        })
        .collect()
}

fn host_ids(root: &Path, name: &str) -> (u32, u32) {
    let m = std::fs::symlink_metadata(root.join(name)).unwrap();
    (m.uid(), m.gid())
}

fn prepared_branch() -> Tmpfs {
    let t = Tmpfs::new("32M");
    std::fs::write(t.path().join("from-host"), "host data\n").unwrap();
    t
}

/// Runs the workload against `backend` over `branch`; checks the guest succeeded.
fn run(backend: &Backend) -> guest::GuestRun {
    let run = guest::run_scenario(backend, &Guest::default(), WORKLOAD);
    run.assert_success();
    run
}

#[test]
fn root_daemon_serves_the_guest_in_every_sandbox_mode() {
    for sandbox in ["namespace", "chroot", "none"] {
        let t = prepared_branch();
        let backend = Backend::union(
            &[(t.path(), Mode::Rw)],
            &[
                "--sandbox",
                sandbox,
                "--seccomp",
                "kill",
                "-o",
                "minfreespace=1M",
            ],
        );
        let r = run(&backend);
        let ids = guest_ids(&r);
        assert_eq!(ids["userdir/kept"], (1000, 1000), "{sandbox}");
        assert_eq!(ids["rootdir/f"], (0, 0), "{sandbox}");
        assert_eq!(
            host_ids(t.path(), "userdir/kept"),
            (1000, 1000),
            "{sandbox}"
        );
        assert_eq!(host_ids(t.path(), "rootdir/f"), (0, 0), "{sandbox}");
        let mode = std::fs::metadata(t.path().join("userdir/kept"))
            .unwrap()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{sandbox}");
        assert!(!t.path().join("rootdir/h").exists());
        let log = &r.daemon_log;
        let want = match sandbox {
            "namespace" => "sandbox: new mount, PID and network namespaces",
            "chroot" => "sandbox: chroot into the daemon's own descriptor directory",
            _ => "capabilities kept",
        };
        assert!(log.contains(want), "{sandbox}: {log}");
    }
}

#[test]
fn unprivileged_daemon_with_an_id_map_serves_the_guest() {
    let user = users::uvfs_test();
    let (uid, gid, sub_u, sub_g) = (user.uid, user.gid, user.sub_uid, user.sub_gid);
    let t = prepared_branch();
    std::os::unix::fs::chown(t.path(), Some(uid), Some(gid)).unwrap();
    std::os::unix::fs::chown(t.path().join("from-host"), Some(uid), Some(gid)).unwrap();
    let daemon = guest::daemon_path();
    // The launcher's part: a socket directory the user may write, then the daemon as that
    // user (no capability, no supplementary group) with libvirt's session-mode maps.
    let script = "chown uvfs-test \"${2%/*}\" && exec setpriv --reuid=uvfs-test \
                  --regid=uvfs-test --clear-groups \"$0\" \"$@\"";
    let branch = t.path().to_str().unwrap();
    let maps = [
        format!("--uid-map=:0:{uid}:1:"),
        format!("--uid-map=:1:{sub_u}:65536:"),
        format!("--gid-map=:0:{gid}:1:"),
        format!("--gid-map=:1:{sub_g}:65536:"),
    ];
    let mut args = vec![
        "-c",
        script,
        daemon.to_str().unwrap(),
        "--socket-path",
        "{socket}",
        "--shared-dir",
        branch,
        "--log-level",
        "debug",
        "-o",
        "minfreespace=1M",
    ];
    args.extend(maps.iter().map(String::as_str));
    let r = run(&Backend::command("sh", &args));
    assert!(
        r.daemon_log.contains("sandbox: new user namespace"),
        "{}",
        r.daemon_log
    );
    let ids = guest_ids(&r);
    // The guest sees the namespace's ids; the host has the mapped ones.
    assert_eq!(ids["userdir/kept"], (1000, 1000));
    assert_eq!(ids["rootdir/f"], (0, 0));
    assert_eq!(ids["from-host"], (0, 0));
    assert_eq!(
        host_ids(t.path(), "userdir/kept"),
        (sub_u + 999, sub_g + 999)
    );
    assert_eq!(host_ids(t.path(), "rootdir/f"), (uid, gid));
}

#[test]
fn translated_ids_in_the_guest() {
    let t = prepared_branch();
    // Host files owned by 7000..7009 are shown as nobody (65534); guest 1000 is host 5000 both
    // ways; guest 2000 may not act.
    std::os::unix::fs::chown(t.path().join("from-host"), Some(7003), Some(7003)).unwrap();
    let backend = Backend::union(
        &[(t.path(), Mode::Rw)],
        &[
            "-o",
            "minfreespace=1M",
            "--translate-uid=map:1000:5000:1",
            "--translate-gid=map:1000:5000:1",
            "--translate-uid=squash-host:7000:65534:10",
            "--translate-gid=squash-host:7000:65534:10",
            "--translate-uid=forbid-guest:2000:1",
        ],
    );
    let scenario = format!(
        "{WORKLOAD}\necho 'v:x:2000:2000::/tmp:/bin/sh' >>/etc/passwd\n\
         expect_err 'Operation not permitted' \"su v -c 'mkdir by-2000'\"\n"
    );
    let r = guest::run_scenario(&backend, &Guest::default(), &scenario);
    r.assert_success();
    let ids = guest_ids(&r);
    assert_eq!(ids["userdir/kept"], (1000, 1000));
    assert_eq!(ids["from-host"], (65534, 65534));
    assert_eq!(host_ids(t.path(), "userdir/kept"), (5000, 5000));
    assert_eq!(host_ids(t.path(), "rootdir/f"), (0, 0));
    assert!(!t.path().join("by-2000").exists());
}

#[test]
fn no_host_path_outside_the_branches_is_reachable_from_the_guest() {
    // A host file outside the branches, and symlinks in the branch that name it every way a
    // path can: absolute, climbing with `..`, and through /proc's root links. The daemon shows
    // symlinks as what they point to (follow-symlinks=all), so it resolves them itself.
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = format!("HOSTSECRET-{}", std::process::id());
    std::fs::write(secret_dir.path().join("secret.txt"), &secret).unwrap();
    let s = secret_dir.path().to_str().unwrap();
    let t = prepared_branch();
    let up = "../".repeat(12);
    let links = [
        ("abs", s.to_owned()),
        ("rel", format!("{up}{}", &s[1..])),
        ("proc1", format!("/proc/1/root{s}")),
        ("procself", format!("/proc/self/root{s}")),
        ("absfile", format!("{s}/secret.txt")),
        ("relfile", format!("{up}{}/secret.txt", &s[1..])),
        ("procfile", format!("/proc/1/root{s}/secret.txt")),
    ];
    for (name, target) in &links {
        std::os::unix::fs::symlink(target, t.path().join(name)).unwrap();
    }
    let backend = Backend::union(
        &[(t.path(), Mode::Rw)],
        &["-o", "minfreespace=1M,follow-symlinks=all"],
    );
    let r = guest::run_scenario(
        &backend,
        &Guest::default(),
        r#"for n in abs rel proc1 procself; do cat $n/secret.txt 2>&1 || true; ls $n 2>&1 || true; done
for n in absfile relfile procfile; do cat $n 2>&1 || true; done
section LIST ls -la
echo reached-the-end"#,
    );
    r.assert_success();
    assert!(r.console.contains("reached-the-end"), "{}", r.transcript());
    assert!(!r.console.contains(&secret), "{}", r.transcript());
    assert!(r
        .section("LIST")
        .is_some_and(|l| l.iter().any(|x| x.contains("abs"))));
}

#[test]
fn the_host_checks_each_change_as_the_guest_caller() {
    // Host root's files in a root directory, a sticky directory with another user's file, and
    // a directory a guest user may write only through a supplementary group (4343).
    let t = prepared_branch();
    let p = t.path();
    let setup = |rel: &str, dir: bool, owner: (u32, u32), mode: u32| {
        let path = p.join(rel);
        if dir {
            std::fs::create_dir(&path).unwrap();
        } else {
            std::fs::write(&path, "host\n").unwrap();
        }
        std::os::unix::fs::chown(&path, Some(owner.0), Some(owner.1)).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .unwrap();
    };
    setup("hostdir", true, (0, 0), 0o755);
    setup("hostdir/f", false, (0, 0), 0o644);
    setup("sticky", true, (0, 0), 0o1777);
    setup("sticky/theirs", false, (4000, 4000), 0o666);
    setup("group", true, (0, 4343), 0o770);
    setup("group/f", false, (0, 4343), 0o660);
    setup("open", true, (0, 0), 0o777);
    // Guest root is host nobody.
    let backend = Backend::union(
        &[(p, Mode::Rw)],
        &[
            "-o",
            "minfreespace=1M",
            "--translate-uid=squash-guest:0:65534:1",
            "--translate-gid=squash-guest:0:65534:1",
        ],
    );
    let scenario = r#"echo "u:x:1000:1000::/tmp:/bin/sh" >>/etc/passwd
echo "u:x:1000:" >>/etc/group
echo "g2:x:4343:u" >>/etc/group
expect_err "Permission denied" "rm -f hostdir/f"
expect_err "Permission denied" "mv hostdir/f hostdir/g"
expect_err "Permission denied" "sh -c 'echo guest > hostdir/f'"
expect_err "Permission denied" "touch hostdir/new"
expect_err "Operation not permitted" "chmod 4777 hostdir/f"
expect_err "Operation not permitted" "rm -f sticky/theirs"
touch open/made
su u -c "echo user > group/f && touch group/mine && rm group/mine"
expect_eq "$(su u -c 'cat group/f')" user "a supplementary group grants, as the guest kernel said"
echo reached-the-end
"#;
    let r = guest::run_scenario(&backend, &Guest::default(), scenario);
    r.assert_success();
    assert!(r.console.contains("reached-the-end"), "{}", r.transcript());
    assert_eq!(
        std::fs::read_to_string(p.join("hostdir/f")).unwrap(),
        "host\n"
    );
    assert_eq!(
        std::fs::metadata(p.join("hostdir/f")).unwrap().mode() & 0o7777,
        0o644
    );
    assert!(!p.join("hostdir/g").exists() && !p.join("hostdir/new").exists());
    assert!(p.join("sticky/theirs").exists());
    assert_eq!(host_ids(p, "open/made"), (65534, 65534));
    assert_eq!(
        std::fs::read_to_string(p.join("group/f")).unwrap(),
        "user\n"
    );
}
