//! Data integrity in a real guest (QEMU, Debian 6.12 kernel): fsx (`cargo install fsx`), which
//! checks every read against a model of the file, runs its default mix (reads, writes,
//! truncates, mmap) and a mix of every operation it has (plus close/reopen, invalidation,
//! fsync, fallocate, punch hole, sendfile, fadvise, copy_file_range) on one branch, on three,
//! and on a nearly full branch where `moveonenospc` moves the file mid-run; both mixes again
//! with direct I/O (O_DIRECT, added by qemu/fsx-odirect.c preloaded into fsx) on one branch and
//! on three. Fixed seeds, so a failure reruns the same operations. And stress-ng's whole
//! filesystem class with `--verify`.

use std::time::Duration;

use testkit::guest;
use testkit::guest::{Backend, Guest, Mode};
use testkit::tmpfs::Tmpfs;

/// Operations per fsx run.
const OPS: u32 = 10_000;

/// Both mixes in /mnt, each on its own file; each run must end "A-OK".
fn scenario() -> String {
    format!(
        r#"export PATH=/opt/tools/bin:$PATH
for mix in default all; do
  cfg=""; [ $mix = all ] && cfg="-f /opt/tools/fsx-all.toml"
  if fsx -N {OPS} -S 7 -q $cfg -P /tmp fsx-$mix > /tmp/out 2>&1 && grep -q 'A-OK' /tmp/out; then
    echo "FSX $mix passed"
  else
    echo "FSX $mix failed"; tail -40 /tmp/out
  fi
done
"#
    )
}

/// Both mixes as [`scenario`], on files opened with O_DIRECT: fsx runs with the shim preloaded
/// (`ODIRECT_PATH` names its file), and while it runs the scenario prints the flags
/// /proc/PID/fdinfo shows for that file ("FSX <mix> flags 0NNN", octal) and the shim's
/// "fsx-odirect:" line. The opsize alignment stays at fsx's 1: FUSE direct I/O takes any offset,
/// and fallocate offsets are not aligned anyway.
fn direct_scenario() -> String {
    format!(
        r#"export PATH=/opt/tools/bin:$PATH
for mix in default all; do
  cfg=""; [ $mix = all ] && cfg="-f /opt/tools/fsx-all.toml"
  f=fsx-odirect-$mix
  ODIRECT_PATH=$f LD_PRELOAD=/opt/tools/lib/fsx-odirect.so \
    fsx -N {OPS} -S 7 -q $cfg -P /tmp $f > /tmp/out 2>&1 &
  pid=$!
  # fsx closes and reopens the file now and then: look until it is open (or fsx ended).
  flags=""; tries=0
  while [ -z "$flags" ] && [ $tries -lt 200 ] && kill -0 $pid 2>/dev/null; do
    for fd in /proc/$pid/fd/*; do
      if [ "$(readlink $fd)" = /mnt/$f ]; then
        # (gone again if fsx closed it meanwhile)
        flags=$(sed -n 's/^flags:[[:space:]]*//p' /proc/$pid/fdinfo/${{fd##*/}} 2>/dev/null) || true
      fi
    done
    tries=$((tries + 1)); sleep 0.05
  done
  echo "FSX $mix flags ${{flags:-none}}"
  if wait $pid && grep -q 'A-OK' /tmp/out; then
    echo "FSX $mix passed"
  else
    echo "FSX $mix failed"; tail -40 /tmp/out
  fi
  grep '^fsx-odirect:' /tmp/out || true
done
"#
    )
}

/// O_DIRECT in the flags of an open file description (octal 040000 on x86-64).
const O_DIRECT: u32 = 0o40000;

/// Asserts that fsx's file in a run of [`direct_scenario`] was open with O_DIRECT, by the
/// shim's word and by /proc.
fn assert_o_direct(run: &guest::GuestRun) {
    for mix in ["default", "all"] {
        let flags = run
            .console
            .lines()
            .find_map(|l| l.trim_end().strip_prefix(&format!("FSX {mix} flags ")))
            .and_then(|f| u32::from_str_radix(f, 8).ok());
        assert!(
            flags.is_some_and(|f| f & O_DIRECT != 0),
            "{mix}: fsx's file not open with O_DIRECT ({flags:?}): {}",
            run.transcript()
        );
        assert!(
            run.console
                .contains(&format!("fsx-odirect: O_DIRECT on fsx-odirect-{mix}")),
            "{mix}: the shim did not report O_DIRECT: {}",
            run.transcript()
        );
    }
}

/// Runs `scenario` in a guest over a union of `branches` with `-o opts`; each fsx mix must
/// report "FSX <mix> passed".
fn run_fsx(branches: &[(&std::path::Path, Mode)], opts: &str, scenario: &str) -> guest::GuestRun {
    let b = Backend::union(branches, &["-o", opts]).at_info();
    let g = Guest {
        extra_initrd: vec![guest::fsx_initrd()],
        timeout: Duration::from_secs(300),
        ..Guest::default()
    };
    let run = guest::run_scenario(&b, &g, scenario);
    run.assert_success();
    for mix in ["default", "all"] {
        assert!(
            run.console.contains(&format!("FSX {mix} passed")),
            "{mix}: {}",
            run.transcript()
        );
    }
    run
}

/// `scenario` by [`run_fsx`] on one branch, then on three.
fn on_one_branch_and_on_three(scenario: &str) -> [guest::GuestRun; 2] {
    let a = Tmpfs::new("64M");
    let one = run_fsx(&[(a.path(), Mode::Rw)], "minfreespace=1M", scenario);
    let (a, b, c) = (Tmpfs::new("64M"), Tmpfs::new("64M"), Tmpfs::new("64M"));
    let three = run_fsx(
        &[
            (a.path(), Mode::Rw),
            (b.path(), Mode::Rw),
            (c.path(), Mode::Rw),
        ],
        "minfreespace=1M",
        scenario,
    );
    [one, three]
}

#[test]
fn fsx_on_one_branch_and_on_three() {
    on_one_branch_and_on_three(&scenario());
}

#[test]
fn fsx_with_o_direct_on_one_branch_and_on_three() {
    for run in on_one_branch_and_on_three(&direct_scenario()) {
        assert_o_direct(&run);
    }
}

#[test]
fn fsx_on_a_nearly_full_branch_with_moveonenospc() {
    // The files are made on the small branch (ff), which has room for less than fsx's file:
    // a write that runs out of space moves the file to the large branch, and fsx sees nothing.
    let (small, big) = (Tmpfs::new("1M"), Tmpfs::new("64M"));
    std::fs::write(small.path().join("fill"), vec![0u8; 900 << 10]).unwrap();
    run_fsx(
        &[(small.path(), Mode::Rw), (big.path(), Mode::Rw)],
        "minfreespace=0,category.create=ff,moveonenospc=true",
        &scenario(),
    );
    for mix in ["default", "all"] {
        let name = format!("fsx-{mix}");
        assert!(
            big.path().join(&name).exists() && !small.path().join(&name).exists(),
            "{name} was moved to the large branch"
        );
    }
}

/// The filesystem-class stressors stress-ng 0.15 skips by itself here, and why: nothing a
/// FUSE filesystem can offer.
const SKIPPED: [(&str, &str); 3] = [
    ("binderfs", "binderfs not supported"),
    ("fiemap", "FS_IOC_FIEMAP not supported"),
    ("verity", "verity is not supported"),
];

#[test]
fn stress_ng_filesystem_class_passes_with_verify() {
    let (a, b) = (Tmpfs::new("512M"), Tmpfs::new("64M"));
    let backend = Backend::union(
        &[(a.path(), Mode::Rw), (b.path(), Mode::Ro)],
        &["-o", "minfreespace=1M"],
    )
    .at_info();
    let g = Guest {
        extra_initrd: vec![guest::stress_initrd()],
        mem: "1G".to_owned(),
        smp: 2,
        timeout: Duration::from_secs(500),
        ..Guest::default()
    };
    // Every stressor of the class, one after another, 3 s each; iomix's 1 GiB file is made
    // smaller to fit the branch.
    let scenario = r#"export PATH=/opt/tools/bin:$PATH
rc=0
stress-ng --class filesystem --sequential 1 --timeout 3s --verify --iomix-bytes 64m \
  --temp-path /mnt > /tmp/out 2>&1 || rc=$?
echo "stress-ng exit $rc"
grep -E 'fail|error|skipping|successful' /tmp/out
"#;
    let run = guest::run_scenario(&backend, &g, scenario);
    run.assert_success();
    // 3 is stress-ng's "no resource": what the skipped stressors below report.
    assert!(
        run.console.contains("stress-ng exit 0") || run.console.contains("stress-ng exit 3"),
        "{}",
        run.transcript()
    );
    assert!(
        run.console.contains("] successful run completed"),
        "{}",
        run.transcript()
    );
    for line in run.console.lines() {
        assert!(
            !line.contains("fail:") && !line.contains("error:"),
            "{line}\n{}",
            run.transcript()
        );
        if line.contains("skipping") {
            assert!(
                SKIPPED
                    .iter()
                    .any(|(s, why)| line.contains(&format!("{s}: {why}"))),
                "an unexpected skip: {line}"
            );
        }
    }
}
