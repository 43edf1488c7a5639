#!/usr/bin/env bash
# Validates the real-guest harness (tests/support/guest.rs) end to end against the reference
# virtiofsd, independently of our daemon: runs examples/guest_backend.rs with it. Not part of CI.
#
#   VIRTIOFSD=/path/to/virtiofsd scripts/check-harness.sh
# virtiofsd defaults to the one on PATH; install it with
#   cargo install virtiofsd --root .cache/tools   (needs libseccomp-dev libcap-ng-dev pkg-config)
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

virtiofsd="${VIRTIOFSD:-$(command -v virtiofsd || true)}"
[ -x "$virtiofsd" ] || die "virtiofsd not found: set VIRTIOFSD or install it (see the header)"
"$UVFS_ROOT/scripts/install-deps.sh"
cd "$UVFS_ROOT"
cargo run --quiet --example guest_backend -- \
    "$virtiofsd" --socket-path '{socket}' --shared-dir '{dir}' --cache never
