#!/usr/bin/env bash
# The reboot soak at its full size: one daemon serves 100 guest resets in a row
# (tests/guest/reboot_soak.rs; the test suite runs 24). Prints the descriptors and RssAnon by
# boot. About ten minutes.
#   scripts/soak.sh [RESETS]
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$UVFS_ROOT"
scripts/install-deps.sh
UVFS_SOAK_RESETS=${1:-100} cargo test --test guest reboot_soak:: -- --nocapture
