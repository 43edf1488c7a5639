//! Runtime branch edits with a real guest (QEMU, TCG): while the guest keeps writing numbered
//! files, the host runs `union-virtiofsd ctl` to add a big branch (the guest's new files land
//! there under `mfs`), remove an idle branch and set another read-only. The guest sees no
//! error; every file is on exactly one branch with its content, where the policy said at the
//! time it was created; the removed branch's file is gone from the guest's view and untouched
//! on the host. And the refusals of branch edits that cannot be made (the errors that
//! tests/cli/ctl.rs does not already cover), through the real binary without a guest.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use testkit::guest::{Backend, Guest, Mode, Reaper};
use testkit::live::{self, Live};
use testkit::tmpfs::Tmpfs;
use testkit::{ctl, guest};

/// The options under test: `mfs` with a floor small enough for 16M branches, names cached for
/// a second and missing names not at all (so the guest sees the host's flag files at once).
const OPTIONS: &str = "category.create=mfs,minfreespace=1M,cache.entry=1,cache.negative_entry=0";

/// The guest: reads B's file once, then writes `w/f1`, `w/f2`, … (a header line and a 4 KiB
/// block each, then `sync`), every failure printed as `WRITE-FAIL n error` and the loop going
/// on, a `PROGRESS n` marker every 10 files, until the host makes `/mnt/.stop`. When the host
/// makes `/mnt/.b-removed` it looks B's file up again (section `B-GONE`) and lists the root.
/// At the end every file is read back (`READ-FAIL n …`).
const SCENARIO: &str = r#"
read -r first < /mnt/b_only
expect_eq "$first" "on b" "B's file at boot"
i=0
while [ $i -lt 64 ]; do printf '%063d\n' $i; i=$((i+1)); done > /tmp/blk
mkdir /mnt/w
echo "=== WRITER START ==="
# (k, not n: the prelude's `section` sets n.)
k=0
b_checked=0
while :; do
    k=$((k+1))
    f=/mnt/w/f$k
    if ! { { echo "file $k"; cat /tmp/blk; } > "$f"; } 2>/tmp/err; then
        echo "WRITE-FAIL $k $(cat /tmp/err)"
    elif ! sync 2>/tmp/err; then
        echo "WRITE-FAIL $k sync: $(cat /tmp/err)"
    fi
    if [ $((k % 10)) -eq 0 ]; then echo "=== PROGRESS $k ==="; fi
    if [ $b_checked = 0 ] && [ -e /mnt/.b-removed ]; then
        b_checked=1
        echo "=== BEGIN B-GONE ==="
        ls -l /mnt/b_only 2>&1 || echo "ls status $?"
        { read -r x < /mnt/b_only; } 2>&1 || echo "read status $?"
        echo "=== END B-GONE ==="
        section root ls -a -1 /mnt
    fi
    if [ -e /mnt/.stop ]; then break; fi
    [ $k -lt 3000 ] || fail "no stop after $k files"
done
echo "=== WRITER DONE $k ==="
i=1
while [ $i -le $k ]; do
    if ! { read -r first < /mnt/w/f$i; } 2>/tmp/err; then
        echo "READ-FAIL $i $(cat /tmp/err)"
    elif [ "$first" != "file $i" ]; then
        echo "READ-FAIL $i got '$first'"
    fi
    i=$((i+1))
done
echo "files in w: $(ls /mnt/w | wc -l)"
"#;

/// How many files the guest writes (at least) before the first change and after each.
const GAP: u64 = 100;

/// How long the guest may take to reach a marker (boot included, TCG).
const MARKER_LIMIT: Duration = Duration::from_secs(120);

/// What the guest's file `n` holds.
fn content(n: u64) -> Vec<u8> {
    let mut c = format!("file {n}\n").into_bytes();
    for i in 0..64 {
        c.extend_from_slice(format!("{i:063}\n").as_bytes());
    }
    c
}

/// `ctl ARGS…` that must exit 0 with nothing on stderr; its stdout.
fn ctl_ok(socket: &Path, args: &[&str], transcript: &dyn Fn() -> String) -> String {
    let (code, out, err) = ctl::run(socket, args);
    assert!(
        code == 0 && err.is_empty(),
        "ctl {args:?}: exit {code}: {err}\n{}",
        transcript()
    );
    out
}

/// Waits (bounded) until the daemon's control socket next to `socket` is there.
fn wait_ctl_socket(socket: &Path) {
    let p = PathBuf::from(format!("{}.ctl", socket.display()));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !p.exists() {
        assert!(Instant::now() < deadline, "no {}", p.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The console's lines so far, without carriage returns.
fn console_lines(console: &Path) -> Vec<String> {
    guest::read_lossy(console)
        .lines()
        .map(|l| l.trim_end_matches('\r').to_owned())
        .collect()
}

/// The highest `=== PROGRESS n ===` on the console.
fn progress(console: &Path) -> u64 {
    console_lines(console)
        .iter()
        .filter_map(|l| {
            l.strip_prefix("=== PROGRESS ")?
                .strip_suffix(" ===")?
                .parse()
                .ok()
        })
        .max()
        .unwrap_or(0)
}

/// Which branches (indices into `branches`) hold the guest's file `w/fN`, for every N found.
fn holders(branches: &[&Path]) -> BTreeMap<u64, Vec<usize>> {
    let mut found: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, b) in branches.iter().enumerate() {
        let Ok(entries) = fs::read_dir(b.join("w")) else {
            continue;
        };
        for e in entries {
            let name = e.unwrap().file_name().into_string().unwrap();
            let n = name
                .strip_prefix('f')
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("unexpected {}/w/{name}", b.display()));
            found.entry(n).or_default().push(i);
        }
    }
    found
}

/// The highest file number on any branch now.
fn newest(branches: &[&Path]) -> u64 {
    holders(branches).keys().copied().max().unwrap_or(0)
}

#[test]
fn branches_change_while_the_guest_writes() {
    guest::require_qemu();
    let _slot = guest::one_guest();
    let (a, b, c, d) = (
        Tmpfs::new("16M"),
        Tmpfs::new("16M"),
        Tmpfs::new("16M"),
        Tmpfs::new("64M"),
    );
    // B's file fills half of it: B has the least space and mfs never picks it, so it stays idle.
    let mut b_file = b"on b\n".to_vec();
    b_file.resize(8 << 20, 0);
    fs::write(b.path().join("b_only"), &b_file).unwrap();
    let b_stamps = || {
        let m = |p: &Path| fs::metadata(p).unwrap().modified().unwrap();
        (m(b.path()), m(&b.path().join("b_only")))
    };
    let b_before = b_stamps();
    let all: [&Path; 4] = [a.path(), b.path(), c.path(), d.path()];
    let canon = |p: &Path| fs::canonicalize(p).unwrap().display().to_string();
    let (ap, bp, cp, dp) = (
        canon(a.path()),
        canon(b.path()),
        canon(c.path()),
        canon(d.path()),
    );

    let backend = Backend::union(
        &[
            (a.path(), Mode::Rw),
            (b.path(), Mode::Rw),
            (c.path(), Mode::Rw),
        ],
        &["-o", OPTIONS],
    )
    .at_info();
    let mut live = Live::start(&backend);
    let (socket, daemon_log, console) = (
        live.socket.clone(),
        live.daemon_log.clone(),
        live.console.clone(),
    );
    let transcript = || guest::live_transcript(&console, &daemon_log);
    wait_ctl_socket(&socket);
    // The options parsed, and read back by their mergerfs names.
    for (key, want) in [
        ("category.create", "mfs"),
        ("minfreespace", "1048576"),
        ("cache.entry", "1"),
        ("cache.negative_entry", "0"),
    ] {
        let got = ctl_ok(&socket, &["get", key], &transcript);
        assert_eq!(got.trim(), want, "{key}");
    }

    let guest = Guest {
        timeout: Duration::from_secs(400),
        ..Guest::default()
    };
    let start = Instant::now();
    live.boot(&guest, SCENARIO);
    let mut steps: Vec<String> = Vec::new();
    let mut note = |what: String| {
        println!("[{:6.1}s] {what}", start.elapsed().as_secs_f64());
        steps.push(what);
    };
    // Waits until the guest's progress reaches `at_least` (the QEMU must still run).
    let wait_progress = |reaper: &mut Reaper, at_least: u64, what: &str| -> u64 {
        let deadline = Instant::now() + MARKER_LIMIT;
        loop {
            let p = progress(&console);
            if p >= at_least {
                return p;
            }
            assert!(
                Instant::now() < deadline && reaper.0[1].try_wait().unwrap().is_none(),
                "{what}: the guest never wrote file {at_least}\n{}",
                transcript()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let wait_line = |reaper: &mut Reaper, line: &str| {
        let deadline = Instant::now() + MARKER_LIMIT;
        while !console_lines(&console).iter().any(|l| l == line) {
            assert!(
                Instant::now() < deadline && reaper.0[1].try_wait().unwrap().is_none(),
                "the guest never printed {line:?}\n{}",
                transcript()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };

    // 1. D joins at the end of the list: from now on mfs picks it.
    let p = wait_progress(&mut live.reaper, GAP, "before adding D");
    let before_d = newest(&all);
    ctl_ok(
        &socket,
        &["set", "branches", &format!("+>{dp}")],
        &transcript,
    );
    let after_d = newest(&all);
    note(format!(
        "added D at progress {p}: files up to {before_d} existed before, {after_d} after"
    ));

    // 2. B, which the guest does not use, leaves; the guest then looks its file up again.
    let p = wait_progress(&mut live.reaper, after_d + GAP, "before removing B");
    ctl_ok(
        &socket,
        &["set", "branches", &format!("-{bp}")],
        &transcript,
    );
    let after_b = newest(&all);
    note(format!("removed B at progress {p} (newest file {after_b})"));
    fs::write(c.path().join(".b-removed"), b"").unwrap();
    wait_line(&mut live.reaper, "=== END B-GONE ===");

    // 3. The whole list set at once: A read-only, C and D kept.
    let p = wait_progress(
        &mut live.reaper,
        progress(&console) + GAP / 2,
        "before setting A RO",
    );
    let before_ro = newest(&all);
    ctl_ok(
        &socket,
        &["set", "branches", &format!("={ap}=RO:{cp}=RW:{dp}=RW")],
        &transcript,
    );
    let after_ro = newest(&all);
    note(format!(
        "set A RO at progress {p}: files up to {before_ro} before, {after_ro} after"
    ));
    let p = wait_progress(&mut live.reaper, after_ro + GAP, "after setting A RO");
    note(format!("progress {p}"));

    // The daemon's view, while the guest is still connected.
    let branches = ctl_ok(&socket, &["get", "branches"], &transcript);
    assert_eq!(
        branches.trim(),
        format!("{ap}=RO:{cp}=RW:{dp}=RW"),
        "{}",
        transcript()
    );
    let probe = after_ro + 2;
    let allpaths = ctl_ok(
        &socket,
        &["query", &format!("/w/f{probe}"), "allpaths"],
        &transcript,
    );
    assert_eq!(allpaths.trim(), format!("{dp}/w/f{probe}"));
    let gone = ctl::fails(&socket, &["query", "/b_only", "allpaths"]);
    note(format!("query /b_only: {gone}"));

    fs::write(c.path().join(".stop"), b"").unwrap();
    let status = guest::wait_until(&mut live.reaper.0[1], start + guest.timeout);
    let elapsed = start.elapsed();
    let text = live::assert_passed(&console, status, "the guest failed", transcript);
    drop(live.reaper);

    // The guest saw no error.
    let lines = console_lines(&console);
    let failures: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("WRITE-FAIL") || l.contains("READ-FAIL"))
        .collect();
    assert!(failures.is_empty(), "{failures:#?}\n{}", transcript());
    let written: u64 = lines
        .iter()
        .find_map(|l| {
            l.strip_prefix("=== WRITER DONE ")?
                .strip_suffix(" ===")?
                .parse()
                .ok()
        })
        .expect("no WRITER DONE");
    assert!(
        lines.iter().any(|l| *l == format!("files in w: {written}")),
        "{}",
        transcript()
    );

    // Every file on exactly one branch, with its content, where the policy put it.
    let found = holders(&all);
    assert_eq!(
        found.keys().copied().collect::<Vec<_>>(),
        (1..=written).collect::<Vec<_>>(),
        "files on the branches"
    );
    let names = ["A", "B", "C", "D"];
    let mut per_branch = [0u64; 4];
    for (&n, on) in &found {
        assert_eq!(
            on.len(),
            1,
            "file {n} is on {:?}",
            on.iter().map(|&i| names[i]).collect::<Vec<_>>()
        );
        let i = on[0];
        per_branch[i] += 1;
        assert_eq!(
            fs::read(all[i].join(format!("w/f{n}"))).unwrap(),
            content(n),
            "content of file {n} on {}",
            names[i]
        );
        assert_ne!(i, 1, "file {n} landed on B, which mfs should never pick");
        // The guest writes one file after another. A file the host had not seen on any
        // branch after a change returned (newest + 1) may have been created under the old
        // branches, but the one after it was created only once that one was done: under the
        // new branches.
        if n <= before_d {
            assert!(
                i == 0 || i == 2,
                "file {n}, before D was added, is on {}",
                names[i]
            );
        }
        if n >= after_d + 2 {
            assert_eq!(i, 3, "file {n}, after D was added, is on {}", names[i]);
        }
        if n >= after_ro + 2 {
            assert_ne!(i, 0, "file {n}, after A went RO, is on A");
        }
    }
    assert!(
        written >= after_ro + GAP,
        "too few files after the last change"
    );

    // B's file: gone from the guest's view, untouched on the host.
    let b_gone = guest::section_of(&text, "B-GONE").expect("no B-GONE section");
    let b_text = b_gone.join("\n");
    let seen = if b_text.contains("No such file or directory") {
        "ENOENT"
    } else if b_text.contains("Stale file handle") {
        "ESTALE"
    } else {
        panic!(
            "B's file after its branch left: {b_gone:?}\n{}",
            transcript()
        )
    };
    assert!(
        b_gone.iter().any(|l| l.starts_with("ls status")),
        "{b_gone:?}"
    );
    assert!(
        b_gone.iter().any(|l| l.starts_with("read status")),
        "{b_gone:?}"
    );
    let root = guest::section_of(&text, "root").expect("no root section");
    assert!(root.iter().any(|l| l == "w"), "{root:?}");
    assert!(!root.iter().any(|l| l.contains("b_only")), "{root:?}");
    let b_names: Vec<_> = fs::read_dir(b.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(b_names, ["b_only"], "B's directory changed");
    assert!(
        fs::read(b.path().join("b_only")).unwrap() == b_file,
        "B's file changed"
    );
    assert_eq!(b_stamps(), b_before, "B's directory or file was modified");

    println!(
        "{written} files in {elapsed:.1?} (A {}, B {}, C {}, D {}); B's file after removal: \
         {seen}: {b_gone:?}; steps: {steps:#?}",
        per_branch[0], per_branch[1], per_branch[2], per_branch[3]
    );
}

/// Branch edits that cannot be made, through the real binary (no guest needed): a directory
/// already in the pool (by its path, through another name, twice in one list) and a removal
/// that leaves no branch. Each is exit 2 with one line, and the branches stay as they were.
/// (Unknown keys, bad values and missing directories are tests/cli/ctl.rs's.)
#[test]
fn impossible_branch_edits_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (a, c) = (dir.path().join("a"), dir.path().join("c"));
    for d in [&a, &c] {
        fs::create_dir(d).unwrap();
    }
    let link = dir.path().join("link-to-a");
    std::os::unix::fs::symlink(&a, &link).unwrap();
    let socket = dir.path().join("vfs.sock");
    let log = dir.path().join("daemon.log");
    let backend = Backend::union(&[(&a, Mode::Rw), (&c, Mode::Ro)], &[]).at_info();
    let _reaper = Reaper(vec![guest::spawn_backend(&backend, &socket, &log)]);
    wait_ctl_socket(&socket);
    let transcript = || guest::read_lossy(&log);
    let before = ctl_ok(&socket, &["get", "branches"], &transcript);
    let (ap, cp) = (a.display().to_string(), c.display().to_string());

    for value in [
        format!("+>{ap}"),
        format!("+<{}", link.display()),
        format!("+{cp}=RW"),
        format!("={ap}:{cp}:{ap}=NC"),
    ] {
        let e = ctl::fails(&socket, &["set", "branches", &value]);
        assert!(e.contains("already a branch of the union"), "{value}: {e}");
    }
    let e = ctl::fails(&socket, &["set", "branches", "-*"]);
    assert!(e.ends_with("the union would have no branch left"), "{e}");
    let e2 = ctl::fails(
        &socket,
        &[
            "set",
            "branches",
            &format!("-{dir}/*", dir = dir.path().display()),
        ],
    );
    assert!(e2.ends_with("the union would have no branch left"), "{e2}");
    assert_eq!(ctl_ok(&socket, &["get", "branches"], &transcript), before);
}
