#!/usr/bin/env bash
# The project's test command: installs host dependencies, prepares the guest kernel and initramfs
# (cached in .cache/guest/), then runs every test, the real-guest e2e tests included.
#   scripts/test.sh [extra cargo test args]
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$UVFS_ROOT"

timed() { local t0=$SECONDS; "$@"; log "$(basename "$1"): $((SECONDS - t0)) s"; }
timed scripts/install-deps.sh
timed scripts/fetch-kernel.sh >/dev/null
# A >= 6.13 kernel (fs.fuse.max_pages_limit) for the test of requests beyond 256 pages.
GUEST_KERNEL_SUITE=trixie-backports timed scripts/fetch-kernel.sh >/dev/null
timed scripts/build-initramfs.sh >/dev/null
# The POSIX conformance suite, packed for the guest (tests/e2e_pjdfstest.rs).
timed scripts/build-pjdfstest-initrd.sh >/dev/null
# flock, cp, sync, stat and xfs_io for the guest (tests/e2e_ops.rs).
timed scripts/build-tools-initrd.sh >/dev/null
# stress-ng for the guest (tests/e2e_lock_waits.rs).
timed scripts/build-tools-initrd.sh stress >/dev/null
# fsx for the guest (tests/e2e_integrity.rs).
timed scripts/build-tools-initrd.sh fsx >/dev/null
# virtiofsd 1.14, the reference the migration tests hold the daemon to (tests/e2e_migration.rs).
timed install_virtiofsd >/dev/null
# A minimal Debian as the read-only base of the copy-on-write image test (tests/e2e_cow_image.rs).
timed scripts/build-debian-base.sh >/dev/null
# The release build as it ships (static, whole-program LTO; the tests below build without LTO):
# linked as it should be, then the guest tests of the union and of file-handle nodes again
# against it (tests/support/guest.rs runs $UVFS_DAEMON).
release=$(timed scripts/check-static.sh)
# A short fixed-seed pass of each fuzz target (its nightly build cached in .cache/fuzz/build).
# Before the tests, so that their summary stays the closing line; a crash fails the run.
fuzz_rc=0
t0=$SECONDS
scripts/fuzz.sh --runs 10000 || fuzz_rc=$?
log "fuzz.sh: $((SECONDS - t0)) s"
# The closing line sums every test binary's result (cargo's own last line is that of the
# doc-tests, which hold none): "N passed, N failed".
out=$(mktemp)
trap 'rm -f "$out"' EXIT
set +e
cargo test --workspace --all-targets "$@" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
UVFS_DAEMON=$release cargo test --test e2e_guest --test e2e_nodes "$@" 2>&1 | tee -a "$out"
release_rc=${PIPESTATUS[0]}
[ "$rc" -ne 0 ] || rc=$release_rc
set -e
sed -n 's/^test result: [A-Za-z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' "$out" |
    awk '{p += $1; f += $2} END {printf "%d passed, %d failed\n", p, f}'
[ "$rc" -ne 0 ] || rc=$fuzz_rc
exit "$rc"
