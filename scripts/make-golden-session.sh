#!/usr/bin/env bash
# Writes the golden session images of tests/golden/ with any daemon binary: the current tree's
# examples/session_peers.rs (the vufs-frontend driver, no VM) makes a busy session on BIN and
# saves it four ways: device-state-TAG.bin (SET_DEVICE_STATE_FD), upgrade-handover-TAG.bin
# (what BIN hands a new daemon), upgrade-refused-TAG.bin (its refusal of an unknown channel
# version), upgrade-hello-TAG.bin (what BIN says when started with --upgrade).
#
#   scripts/make-golden-session.sh BIN TAG [--v2 | --flags | --edit] [OUTDIR]
#
#   # version 1, by the daemon of commit 1e60aa4 (the last to write it):
#   git worktree add /tmp/uvfs-1e60aa4 1e60aa4
#   (cd /tmp/uvfs-1e60aa4 && cargo build --bin union-virtiofsd)
#   scripts/make-golden-session.sh /tmp/uvfs-1e60aa4/target/debug/union-virtiofsd v1
#   # version 2, by this tree's daemon, with POSIX ACLs, security contexts, idmap and a
#   # branch edit in the session:
#   cargo build --bin union-virtiofsd
#   scripts/make-golden-session.sh "$(. scripts/lib.sh; cargo_out debug)/union-virtiofsd" v2 --v2
#
# A released golden is never replaced: the tests pin it byte for byte (tests/golden/README.md). Runs as root (cow=true keeps overlayfs xattrs, trusted.*).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

[ $# -ge 2 ] || { sed -n '2,20p' "$0" >&2; exit 2; }
bin=$(realpath "$1") tag=$2
shift 2
opts=() out=tests/golden
for a in "$@"; do
    case "$a" in
    --*) opts+=("$a") ;;
    *) out=$a ;;
    esac
done
mkdir -p "$out"
cargo build --quiet --example session_peers
"$(cargo_out debug)/examples/session_peers" golden "$bin" "$out" "$tag" "${opts[@]}"
