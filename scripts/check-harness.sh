#!/usr/bin/env bash
# Validates the real-guest harness (crates/testkit/src/guest.rs) end to end against the reference
# virtiofsd, independently of our daemon: runs examples/guest_backend.rs with it (a smoke scenario
# on a plain directory, then the e2e union scenario on mergerfs, which checks that the e2e test's
# expectations are mergerfs's behaviour). Not part of CI; needs root and /dev/fuse for mergerfs.
#
#   VIRTIOFSD=/path/to/virtiofsd scripts/check-harness.sh
# virtiofsd defaults to the one on PATH; install it with
#   cargo install virtiofsd --root ~/.cache/union-virtiofsd/tools/virtiofsd   (needs libseccomp-dev libcap-ng-dev pkg-config)
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

virtiofsd="${VIRTIOFSD:-$(command -v virtiofsd || true)}"
[ -x "$virtiofsd" ] || die "virtiofsd not found: set VIRTIOFSD or install it (see the header)"
"$UVFS_ROOT/scripts/install-deps.sh"
cd "$UVFS_ROOT"
args=("$virtiofsd" --socket-path '{socket}' --shared-dir '{dir}' --cache never)
cargo build --quiet --example guest_backend
example="$(cargo_out debug)/examples/guest_backend"
"$example" "${args[@]}"
"$example" --mergerfs "${args[@]}"
