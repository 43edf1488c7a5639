#!/usr/bin/env bash
# Lookups against many branches (mergerfs pools have 10 to 30 disks): union-virtiofsd (release
# build) through vufs-bench at depth 1 with 1, 4, 16 and 32 branches, the entries on the last
# branch and every other branch an empty RO tmpfs directory, so that a found lookup (search
# policy ff) would miss on all the others first and a lookup of a missing name on all (the
# lookup memo, src/fs/lookup_memo.rs, skips the branches the directory is absent from).
# Prints a Markdown table: lookups per second, and the daemon's CPU microseconds per lookup
# (from its CPU seconds over the run), found and missing, and the CPU cost each extra branch
# adds (the slope between 1 and 32 branches).
#
#   scripts/bench-lookups.sh [--entries N]   (default 10,000: the creates hold their files open until all are made)
#
# Not part of the test suite: about a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. scripts/lib.sh

entries=10000
while [ $# -gt 0 ]; do
    case "$1" in
    --entries) entries=$2; shift 2 ;;
    *) die "unknown argument $1 (see the header of $0)" ;;
    esac
done
cargo build --quiet --release --bin union-virtiofsd -p union-virtiofsd >&2
cargo build --quiet --release --bin vufs-bench -p vufs-frontend >&2
bin=$(cargo_out release)
mnt=$(mktemp -d /tmp/uvfs-lookups.XXXXXX) empty=$(mktemp -d /tmp/uvfs-empty.XXXXXX)
cleanup() { umount "$mnt" "$empty" 2>/dev/null || true; rmdir "$mnt" "$empty" 2>/dev/null || true; }
trap cleanup EXIT
mount -t tmpfs -o size=1G tmpfs "$mnt"
mount -t tmpfs -o size=16M tmpfs "$empty"

echo "| branches | found lookups/s | µs CPU per found lookup | missing lookups/s | µs CPU per missing lookup |"
echo "|---|---|---|---|---|"
declare -A cost
for n in 1 4 16 32; do
    branches=""
    for i in $(seq 1 $((n - 1))); do
        mkdir -p "$empty/e$i"
        branches+=" --branch $empty/e$i=RO"
    done
    out=$("$bin/vufs-bench" 2>/dev/null --dir "$mnt" --depth 1 --entries "$entries" \
        --only lookup,lookup-missing \
        --backend "ours=$bin/union-virtiofsd --socket-path {socket}$branches --branch {dir} -o minfreespace=0")
    rm -rf "${mnt:?}"/*
    # "lookup  ops/s  native | rate x cpu"
    row() { echo "$out" | awk -v w="$1" -v e="$entries" -F'|' '
        index($0, w "  ") == 1 { split($2, b, " +"); printf "%.0f %.1f", b[2], b[4] * 1e6 / e }'; }
    read -r fr fc <<<"$(row lookup)"
    read -r mr mc <<<"$(row "lookup (missing)")"
    cost[$n]="$fc $mc"
    echo "| $n | $fr | $fc | $mr | $mc |"
done
read -r f1 m1 <<<"${cost[1]}"
read -r f32 m32 <<<"${cost[32]}"
awk -v f1="$f1" -v f32="$f32" -v m1="$m1" -v m32="$m32" 'BEGIN {
    printf "\nEach extra branch adds %.2f µs of daemon CPU to a found lookup and %.2f µs to a missing one.\n",
        (f32 - f1) / 31, (m32 - m1) / 31 }'
