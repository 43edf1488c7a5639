//! Host-side locks under stress in a real guest (QEMU, Debian 6.12 kernel): stress-ng's lock
//! stressors finish and leave no lock on the host, a deadlock between two guest processes
//! answers EDEADLK exactly as the guest's own tmpfs does, and waits for locks held by a host
//! process end by the daemon's word (the guest's virtio-fs driver never interrupts a request,
//! so nothing else could end them).

use std::os::fd::AsRawFd;
use std::time::Duration;

use testkit::guest::{Backend, Guest, Mode};
use testkit::tmpfs::Tmpfs;
use testkit::{guest, hostlocks};

/// How long each stressor runs, and how much longer than that it may take before it counts
/// as hung: the default `lock-timeout` (10 s) ends the wait of a lockf child whose parent
/// waits for it to exit, plus slack for TCG.
const STRESS_SECS: u64 = 5;
const MARGIN_SECS: u64 = 25;

fn guest(extra: Vec<std::path::PathBuf>) -> Guest {
    Guest {
        extra_initrd: extra,
        mem: "1G".to_owned(),
        smp: 2,
        timeout: Duration::from_secs(400),
        ..Guest::default()
    }
}

#[test]
fn stress_ng_lock_stressors_finish_and_leave_no_host_lock() {
    // As a new user tried it: one RW and one RO branch, default lock options.
    let (rw, ro) = (Tmpfs::new("64M"), Tmpfs::new("16M"));
    let backend = Backend::union(
        &[(rw.path(), Mode::Rw), (ro.path(), Mode::Ro)],
        &["-o", "minfreespace=1M"],
    );
    let limit = STRESS_SECS + MARGIN_SECS;
    let scenario = format!(
        r#"export PATH=/opt/tools/bin:$PATH
for s in lockf fcntl flock locka; do
  for n in 2 4; do
    rc=0
    timeout -s KILL {limit} stress-ng --$s $n --timeout {STRESS_SECS}s --verify --temp-path /mnt > /tmp/out 2>&1 || rc=$?
    if [ $rc -eq 0 ] && grep -q 'successful run completed' /tmp/out; then
      echo "STRESS $s $n passed"
    else
      echo "STRESS $s $n failed (exit $rc)"; cat /tmp/out
    fi
  done
done
touch stress-done
i=0; while [ ! -e host-checked ]; do i=$((i+1)); [ $i -lt 600 ] || fail "no host-checked"; sleep 0.1; done
echo "host locks after the stressors: $(cat host-checked)"
"#
    );
    // Once the stressors are done, and while the session is live, the host must hold no
    // lock on the branch.
    let root = rw.path().to_owned();
    let checker = std::thread::spawn(move || {
        hostlocks::wait_for(&root.join("stress-done"), 380);
        let left = hostlocks::locks_on_fs(&root);
        std::fs::write(root.join("host-checked"), left.len().to_string()).unwrap();
        left
    });
    let run = guest::run_scenario(&backend, &guest(vec![guest::stress_initrd()]), &scenario);
    run.assert_success();
    for s in ["lockf", "fcntl", "flock", "locka"] {
        for n in [2, 4] {
            let line = format!("STRESS {s} {n} passed");
            assert!(run.console.contains(&line), "{line}\n{}", run.transcript());
        }
    }
    let left = checker.join().unwrap();
    assert!(left.is_empty(), "locks left on the host: {left:?}");
    assert!(
        run.console.contains("host locks after the stressors: 0"),
        "{}",
        run.transcript()
    );
}

#[test]
fn a_two_process_deadlock_answers_edeadlk_as_the_guests_tmpfs() {
    let t = Tmpfs::new("16M");
    let backend = Backend::union(&[(t.path(), Mode::Rw)], &["-o", "minfreespace=1M"]);
    // The same program on the share and on a tmpfs of the guest's own: one byte range of
    // one file, and one byte in each of two files.
    let scenario = r#"export PATH=/opt/tools/bin:$PATH
mkdir -p /tmp/local && mount -t tmpfs tmpfs /tmp/local
for d in /tmp/local /mnt; do
  echo x > $d/f; echo y > $d/g
  echo "=== BEGIN $d one ==="; guest_lock $d/f deadlock; echo "=== END $d one ==="
  echo "=== BEGIN $d two ==="; guest_lock $d/f deadlock $d/g; echo "=== END $d two ==="
done
"#;
    let g = guest(vec![guest::tools_initrd()]);
    let run = guest::run_scenario(&backend, &g, scenario);
    run.assert_success();
    for case in ["one", "two"] {
        let local = run.section(&format!("/tmp/local {case}"));
        let share = run.section(&format!("/mnt {case}"));
        assert_eq!(
            local.as_deref(),
            Some(
                &[
                    "F_GETLK names the child".to_owned(),
                    "waits ended: EDEADLK and granted".to_owned()
                ][..]
            ),
            "the guest's tmpfs: {}",
            run.transcript()
        );
        assert_eq!(share, local, "{case} file(s): {}", run.transcript());
    }
}

/// A classic POSIX write lock and an flock lock on `file`, as any host program takes them.
fn host_locks(file: &std::fs::File) {
    // SAFETY: a zeroed flock is valid; then a write lock on the whole file.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    // SAFETY: a valid descriptor and flock.
    let posix = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &fl) };
    // SAFETY: flock on a valid descriptor.
    let flock = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!((posix, flock), (0, 0));
}

#[test]
fn waits_for_a_host_processs_locks_end_by_the_daemons_word() {
    let t = Tmpfs::new("16M");
    let path = t.path().join("f");
    std::fs::write(&path, "shared\n").unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    // The host holds both kinds for the whole run: only the daemon can end the guest's waits.
    host_locks(&file);
    let backend = Backend::union(
        &[(t.path(), Mode::Rw)],
        &["-o", "minfreespace=1M,lock-timeout=2,lock-wait-external=2"],
    );
    let scenario = r#"export PATH=/opt/tools/bin:$PATH
rc=0; guest_lock f wait || rc=$?
echo "fcntl F_SETLKW ended: $rc"
flock -x f true 2>/tmp/err || echo "flock ended: $(cat /tmp/err)"
# The guest's own locks on the file still work once the host's are gone.
touch host-may-go
i=0; while [ ! -e host-gone ]; do i=$((i+1)); [ $i -lt 600 ] || fail "no host-gone"; sleep 0.1; done
guest_lock f wait && flock -x f true && echo "granted after the host let go"
"#;
    let root = t.path().to_owned();
    let releaser = std::thread::spawn(move || {
        hostlocks::wait_for(&root.join("host-may-go"), 120);
        drop(file); // closing releases both
        std::fs::write(root.join("host-gone"), "").unwrap();
    });
    let run = guest::run_scenario(&backend, &guest(vec![guest::tools_initrd()]), scenario);
    run.assert_success();
    releaser.join().unwrap();
    // guest_lock exits 1 when F_SETLKW fails; the daemon answered EDEADLK (a deadlock it
    // cannot see), and flock(1) reports the ENOLCK it got.
    assert!(
        run.console.contains("fcntl F_SETLKW ended: 1"),
        "{}",
        run.transcript()
    );
    assert!(
        run.console
            .contains("flock ended: flock: f: No locks available"),
        "{}",
        run.transcript()
    );
    assert!(
        run.console.contains("granted after the host let go"),
        "{}",
        run.transcript()
    );
}
