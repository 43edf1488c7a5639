#!/usr/bin/env bash
# Checks the release build of the daemon as it ships: statically linked (no program interpreter,
# no shared library needed; .cargo/config.toml) and calling no function that the static link
# left unresolved. A weak undefined function is address 0 in a static binary: the standard
# library's own weak ones check for that, but a call of ours merged into one by LTO does not
# (GETATTR's statx jumped to 0 until .cargo/config.toml made the linker take it from libc.a).
# Prints the binary's path on success.
#   scripts/check-static.sh
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$UVFS_ROOT"

cargo build --quiet --release --bin union-virtiofsd >&2
bin="$(cargo_out release)/union-virtiofsd"
headers=$(readelf -lW "$bin")
! grep -q 'Requesting program interpreter' <<<"$headers" || die "$bin has a program interpreter: not static"
! readelf -dW "$bin" | grep -q '(NEEDED)' || die "$bin needs shared libraries: not static"
# Weak undefined symbols that may stay so: glibc's internal hooks (a leading underscore) and the
# standard library's process-spawning functions of glibc 2.39+ (it checks them before use).
allowed='^(_.*|pidfd_getpid|pidfd_spawnp|posix_spawn_file_actions_addchdir)$'
left=$(nm "$bin" | awk 'NF == 2 && ($1 == "w" || $1 == "U") { print $2 }' | grep -Ev "$allowed" || true)
[ -z "$left" ] || die "unresolved in $bin (add --undefined=NAME to .cargo/config.toml): $(echo $left)"
echo "$bin"
