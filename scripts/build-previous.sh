#!/usr/bin/env bash
# Builds the daemon of the previous release (the commit .ci/previous-release names) from this
# clone's history, once, into $UVFS_CACHE/previous/<commit>/ (scripts/lib.sh), and prints the
# binary's path on stdout (logs go to stderr). The guest tests run it against this build
# (testkit::guest::previous_daemon_path; UVFS_PREVIOUS_DAEMON=PATH skips this script).
#
#   scripts/build-previous.sh        # a few minutes the first time (release build), then at once
#
# The commit's tree comes from `git archive` into the cache (no worktree, nothing written to the
# clone) and is built there with its own Cargo.lock (--locked) and a target directory of its
# own; only the binary and its key are kept. A shallow clone fetches the commit from its origin
# first; a clone that still lacks it fails with one line saying so.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

commit=$(grep -v '^[[:space:]]*\(#\|$\)' "$UVFS_ROOT/.ci/previous-release" | head -1 | tr -d '[:space:]')
[[ $commit =~ ^[0-9a-f]{40}$ ]] || die ".ci/previous-release names no 40-digit commit: '$commit'"
# What the binary is made of: the commit's tree and how it is built.
build=(cargo build --release --locked --bin union-virtiofsd)
dir="$UVFS_CACHE/previous/$commit"
out="$dir/union-virtiofsd"
key=$(cache_key "$commit" "${build[*]}")

mkdir -p "$dir"
# One build at a time (two test processes may ask at once); the second finds it cached.
exec 9>"$dir/.lock"
flock 9
if cache_fresh "$out" "$key"; then
    log "cached: $out"
    echo "$out"
    exit 0
fi

if ! git -C "$UVFS_ROOT" cat-file -e "$commit^{commit}" 2>/dev/null &&
    [ "$(git -C "$UVFS_ROOT" rev-parse --is-shallow-repository)" = true ]; then
    # A shallow clone: its origin has the history.
    log "fetching $commit into this shallow clone"
    git -C "$UVFS_ROOT" fetch --quiet origin "$commit" >&2 ||
        git -C "$UVFS_ROOT" fetch --quiet --unshallow origin >&2 || true
fi
git -C "$UVFS_ROOT" cat-file -e "$commit^{commit}" 2>/dev/null ||
    die "commit $commit (.ci/previous-release) is not in this clone (shallow?): git fetch --unshallow"
rm -rf "$dir/src"
mkdir -p "$dir/src"
git -C "$UVFS_ROOT" archive "$commit" | tar -x -C "$dir/src"
log "building the daemon of ${commit:0:7}: ${build[*]} (in $dir/src)"
t0=$SECONDS
(cd "$dir/src" && env -u CARGO_BUILD_TARGET CARGO_TARGET_DIR="$dir/target" "${build[@]}" >&2)
# Without a [build] target (1e60aa4 has no .cargo/config.toml) cargo writes target/release/;
# with one, target/<triple>/release/.
bin=$(find "$dir/target" -path '*/release/union-virtiofsd' -type f | head -1)
[ -n "$bin" ] || die "no release/union-virtiofsd under $dir/target after the build"
cp "$bin" "$out.tmp"
mv "$out.tmp" "$out"
cache_stamp "$out" "$key"
rm -rf "$dir/src" "$dir/target"
log "built in $((SECONDS - t0)) s: $out"
echo "$out"
