#!/usr/bin/env bash
# The project's test command, in two tiers.
#   scripts/test.sh [--quick] [TESTNAME-FILTER ...]
#
# --quick: what needs no guest, no libvirt and no nightly toolchain: the unit tests, the
#   filesystem-level tests (tests/fs), the protocol tests over the vhost-user socket
#   (tests/protocol), the daemon as a process (tests/cli: command line, control socket, life
#   cycle, confinement, syslog) and the differential tests against a real mergerfs mount
#   (tests/mergerfs) and the union mounted on the host through /dev/fuse (tests/host, with
#   pjdfstest and fsx, installed here by cargo if absent). A few minutes once the dependencies are
#   built.
# Without --quick, the full suite (.ci/run calls this): the release build as it ships (static,
#   whole-program LTO) checked for how it is linked, its Debian package installed and serving
#   a guest (scripts/check-package.sh), the fuzzers' short fixed-seed pass, the quick tier, and
#   the real-guest tests (tests/guest, QEMU TCG, libvirt) against that release build.
#   Nothing is skipped: a missing QEMU, kernel or tool is a failure.
#
# Host packages come from scripts/install-deps.sh; the guest kernels, archives and tools are
# cached under $UVFS_CACHE (scripts/lib.sh; ~/.cache/union-virtiofsd), outside the clone, and
# rebuilt when their inputs change. Every step's time is logged, and listed again at the end.
# The last line of standard output sums every test binary's result: "N passed, N failed".
# Other arguments go to the test binaries as name filters (e.g. `scripts/test.sh --quick
# cow::`); one guest test alone: `cargo test --test guest upgrade::` (docs/src/testing.md).
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$UVFS_ROOT"

quick=0
if [ "${1:-}" = --quick ]; then
    quick=1
    shift
fi

# The tiers' test targets (Cargo.toml's workspace; tests/<name>/main.rs).
quick_targets=(--workspace --lib --bins --examples --test fs --test protocol --test cli --test mergerfs --test host)
guest_targets=(--workspace --test guest)

steps=$(mktemp)
out=$(mktemp)
trap 'rm -f "$out" "$steps"' EXIT
# timed NAME CMD...: runs CMD, logs and records (in a file: command substitutions run it in a
# subshell) how long it took.
timed() {
    local name=$1 t0=$SECONDS rc=0
    shift
    "$@" || rc=$?
    printf '%-34s %5d s%s\n' "$name" $((SECONDS - t0)) "$([ $rc -eq 0 ] || echo "  (exit $rc)")" >>"$steps"
    log "$name: $((SECONDS - t0)) s"
    return $rc
}

timed install-deps scripts/install-deps.sh
# The POSIX conformance suite and fsx, run on the host mount (tests/host/pjdfstest.rs,
# fsx.rs) in both tiers.
timed pjdfstest install_pjdfstest >/dev/null
timed fsx install_fsx >/dev/null
if [ $quick -eq 0 ]; then
    timed "guest kernel (bookworm-backports)" scripts/fetch-kernel.sh >/dev/null
    # A >= 6.13 kernel (fs.fuse.max_pages_limit) for the test of requests beyond 256 pages.
    GUEST_KERNEL_SUITE=trixie-backports timed "guest kernel (trixie-backports)" \
        scripts/fetch-kernel.sh >/dev/null
    timed "guest initramfs" scripts/build-initramfs.sh >/dev/null
    # The POSIX conformance suite, packed for the guest (tests/guest/pjdfstest.rs).
    timed "guest pjdfstest archive" scripts/build-pjdfstest-initrd.sh >/dev/null
    # flock, cp, sync, stat, xfs_io, ... for the guest (tests/guest/ops.rs and others).
    timed "guest tools archive" scripts/build-tools-initrd.sh >/dev/null
    # stress-ng for the guest (tests/guest/lock_waits.rs).
    timed "guest stress-ng archive" scripts/build-tools-initrd.sh stress >/dev/null
    # fio for the guest (tests/guest/upgrade.rs).
    timed "guest fio archive" scripts/build-tools-initrd.sh fio >/dev/null
    # fsx for the guest (tests/guest/integrity.rs).
    timed "guest fsx archive" scripts/build-tools-initrd.sh fsx >/dev/null
    # virtiofsd 1.14, the reference the guest tests hold the daemon to.
    UVFS_VIRTIOFSD=$(timed "virtiofsd 1.14" install_virtiofsd)
    export UVFS_VIRTIOFSD
    # The previous release's daemon, built from the clone's history (.ci/previous-release): the
    # guest tests move sessions between it and this build (tests/guest/upgrade.rs, migration.rs).
    UVFS_PREVIOUS_DAEMON=$(timed "previous release's daemon" scripts/build-previous.sh)
    export UVFS_PREVIOUS_DAEMON
    # A minimal Debian as the read-only base of the copy-on-write image test.
    timed "Debian base" scripts/build-debian-base.sh >/dev/null
    # The release build as it ships (static, whole-program LTO), checked for how it is linked;
    # the guest tests below run it (testkit's daemon_binary reads $UVFS_DAEMON).
    release=$(timed "release build + static check" scripts/check-static.sh)
    # The Debian package built from it, installed with dpkg -i, its unit's command line serving
    # a guest, then purged (scripts/check-package.sh).
    timed "package: build, install, boot, purge" scripts/check-package.sh >/dev/null
    # A short fixed-seed pass of each fuzz target; a crash fails the run (below, so that the
    # tests' summary stays the closing line).
    fuzz_rc=0
    timed "fuzz (10,000 runs per target)" scripts/fuzz.sh --runs 10000 || fuzz_rc=$?
fi

# cargo_test NAME ARGS...: one tier's `cargo test`, its output shown as it comes and kept for
# the summary. Through a file, not a pipe: a daemon a test leaves running with the test's
# stdout would keep a pipe open, and a reader waiting for its end would wait for ever.
cargo_test() {
    local name=$1 log rc=0
    shift
    log=$(mktemp)
    timed "$name" cargo test "$@" >"$log" 2>&1 &
    local pid=$!
    tail -n +1 --pid="$pid" -f "$log"
    wait "$pid" || rc=$?
    cat "$log" >>"$out"
    rm -f "$log"
    return "$rc"
}

rc=0
build=("${quick_targets[@]}")
[ $quick -eq 1 ] || build+=(--test guest)
timed "build the tests" cargo test --no-run "${build[@]}" || rc=$?
if [ $rc -eq 0 ]; then
    cargo_test "tests: quick tier" "${quick_targets[@]}" -- "$@" || rc=$?
    if [ $quick -eq 0 ]; then
        export UVFS_DAEMON=$release
        cargo_test "tests: guest tier (release build)" \
            "${guest_targets[@]}" -- "$@" || rc=$?
    fi
fi
[ $quick -eq 0 ] || log "the guest tier was not run (--quick): scripts/test.sh runs everything, cargo test --test guest the guest tests alone"
# Each binary's own summary, then the sum: cargo's own last line is that of the doc-tests.
grep -E '^ *Running |^test result: ' "$out" | sed 's/^ *//' >&2 || true
sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' "$out" |
    awk '{p += $1; f += $2} END {printf "%d passed, %d failed\n", p, f}'
echo "=== scripts/test.sh: time per step ===" >&2
cat "$steps" >&2
[ $quick -eq 1 ] || [ "$rc" -ne 0 ] || rc=$fuzz_rc
[ $quick -eq 1 ] || [ "$fuzz_rc" -eq 0 ] || log "the fuzz pass failed (above)"
exit "$rc"
