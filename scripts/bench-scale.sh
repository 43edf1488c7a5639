#!/usr/bin/env bash
# The scale benchmark: a guest that holds every node of a large tree. A host tree of FILES
# empty files (default 200,000) in 1,000-file directories, on one tmpfs branch and spread
# over 8 (every directory on each branch, the files dealt round-robin); the guest (QEMU TCG,
# Debian 6.12 kernel, 2 GiB, --cache always so that it keeps every inode) runs `find` and
# `ls -lR` over it, then `cp -a` of a subtree of a tenth of the files. For union-virtiofsd in
# each --inode-file-handles mode (release build) and virtiofsd 1.14 (one branch only; it serves
# one directory) it prints the walk times, whether the copy succeeded, the serving process's
# peak descriptors (sampled every 0.2 s), peak RSS, and RSS per 1,000 nodes the guest holds,
# as a Markdown table (also written to OUT/bench-scale.md). The machine's open file limit is
# whatever it is (20,000 here: the copy must succeed under it).
#
#   scripts/bench-scale.sh [--files N] [--out DIR] [--modes "never prefer mandatory"]
#                          [--branch-counts "1 8"] [--node-fds "64 4096"] [--no-virtiofsd]
#
# --node-fds adds, for each N, a run of the default mode with `-o node-fds=N` (the default is
# 512), to measure what the size of the node descriptor cache costs.
#
# Not part of the test suite: about 3 minutes per configuration at 200,000 files.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. scripts/lib.sh

files=200000 out="$root/.cache/bench-scale" modes="never prefer mandatory" counts="1 8" fds="" vfsd_too=1
while [ $# -gt 0 ]; do
    case "$1" in
    --files) files=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --branch-counts) counts=$2; shift 2 ;;
    --node-fds) fds=$2; shift 2 ;;
    --no-virtiofsd) vfsd_too=0; shift ;;
    *) die "unknown argument $1 (see the header of $0)" ;;
    esac
done
mkdir -p "$out"
bench_tools
kernel=$(scripts/fetch-kernel.sh)
initrd=$(scripts/build-initramfs.sh)
dirs=$(((files + 999) / 1000))
sub=$(((dirs + 9) / 10))

scenario="$out/scenario.sh"
cat >"$scenario" <<EOF
B=/opt/bench/bin
now() { \$B/date +%s.%N; }
secs() { awk "BEGIN {printf \"%.1f\", \$2 - \$1}"; }
t0=\$(now); n=\$(find /mnt | wc -l); t1=\$(now)
echo "RESULT entries \$n"
echo "RESULT find-s \$(secs \$t0 \$t1)"
t0=\$(now); ls -lR /mnt >/dev/null; t1=\$(now)
echo "RESULT ls-lR-s \$(secs \$t0 \$t1)"
mkdir /mnt/copy
t0=\$(now)
ok=yes; for d in \$(seq 0 $((sub - 1))); do cp -a /mnt/d\$d /mnt/copy/ || ok=no; done
t1=\$(now)
echo "RESULT copied \$(find /mnt/copy -type f | wc -l)"
echo "RESULT cp-a-ok \$ok"
echo "RESULT cp-a-s \$(secs \$t0 \$t1)"
EOF

# make_tree N_BRANCHES: mounts N tmpfs branches under $out/b* and deals the tree over them.
make_tree() {
    local n=$1 i
    for i in $(seq 0 $((n - 1))); do
        mkdir -p "$out/b$i"
        mountpoint -q "$out/b$i" || mount -t tmpfs -o size=2G tmpfs "$out/b$i"
    done
    python3 - "$out" "$n" "$dirs" "$files" <<'PY'
import os, sys
out, n, dirs, files = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for d in range(dirs):
    for b in range(n):
        os.makedirs(f"{out}/b{b}/d{d}", exist_ok=True)
    for f in range(min(1000, files - d * 1000)):
        open(f"{out}/b{f % n}/d{d}/f{f}", "w").close()
PY
}

drop_tree() {
    local b
    for b in "$out"/b*; do
        umount "$b" 2>/dev/null || true
        rmdir "$b"
    done
}

# run_one LABEL COMMAND...: one guest run; appends "LABEL key value" lines to $results.
run_one() {
    local label=$1; shift
    local sock="$out/$label.sock" console="$out/$label.console.log" pid peak=0 n p
    rm -f "$sock"
    /usr/bin/time -f 'TIME %M' -o "$out/$label.time" "$@" --socket-path "$sock" >"$out/$label.daemon.log" 2>&1 &
    pid=$!
    for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
    [ -S "$sock" ] || die "$label: no socket"
    # The serving process is the deepest descendant; sample every process of the tree.
    (
        while kill -0 "$pid" 2>/dev/null; do
            for p in $(pgrep -P "$pid"; pgrep -P "$(pgrep -P "$pid" | head -1)" 2>/dev/null); do
                n=$(ls "/proc/$p/fd" 2>/dev/null | wc -l)
                [ "$n" -gt "$peak" ] && peak=$n && echo "$peak" >"$out/$label.fds"
            done
            sleep 0.2
        done
    ) &
    bash qemu/run-guest.sh --socket "$sock" --smp 2 --mem 2G --kernel "$kernel" --initrd "$initrd" \
        --extra-initrd "$bench_cpio" --script "$scenario" >"$console" 2>&1 || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    pkill -TERM -P "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    wait
    grep -a '^RESULT ' "$console" | tr -d '\r' | sed "s/^RESULT /$label /" >>"$results"
    echo "$label peak-fds $(cat "$out/$label.fds" 2>/dev/null || echo 0)" >>"$results"
    echo "$label peak-rss-mib $(awk '/^TIME/ {printf "%.1f", $2 / 1024}' "$out/$label.time")" >>"$results"
    grep -q '^=== SCENARIO EXIT 0' <(tr -d '\r' <"$console") || log "$label: scenario did not finish (see $console)"
    # The next configuration walks the same tree, without this one's copy.
    rm -rf "$out"/b*/copy
}

results="$out/results.txt"
: >"$results"
for n in $counts; do
    log "tree of $files files over $n branch(es)"
    make_tree "$n"
    branches=()
    for i in $(seq 0 $((n - 1))); do branches+=(--branch "$out/b$i"); done
    for m in $modes; do
        log "union-virtiofsd --inode-file-handles=$m, $n branch(es)"
        run_one "ours-$m-$n" "$ours" "${branches[@]}" --cache always -o minfreespace=0 --inode-file-handles="$m"
    done
    for nf in $fds; do
        log "union-virtiofsd -o node-fds=$nf, $n branch(es)"
        run_one "ours-prefer-fds$nf-$n" "$ours" "${branches[@]}" --cache always -o minfreespace=0,node-fds="$nf"
    done
    if [ "$n" = 1 ] && [ $vfsd_too = 1 ]; then
        log "virtiofsd 1.14"
        run_one "virtiofsd-1" "$vfsd" --shared-dir "$out/b0" --cache always
    fi
    drop_tree
done

awk '
{ v[$1, $2] = $3; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
END {
    print "| daemon, mode, branches | entries | find s | ls -lR s | cp -a | peak fds | peak RSS MiB | RSS MiB per 1,000 nodes |"
    print "|---|---|---|---|---|---|---|---|"
    for (k = 1; k <= n; k++) {
        c = order[k]; e = v[c, "entries"]
        printf "| %s | %s | %s | %s | %s (%s files, %s s) | %s | %s | %.2f |\n", c, e, v[c, "find-s"], v[c, "ls-lR-s"],
            v[c, "cp-a-ok"], v[c, "copied"], v[c, "cp-a-s"], v[c, "peak-fds"], v[c, "peak-rss-mib"],
            (e > 0 ? v[c, "peak-rss-mib"] * 1000 / e : 0)
    }
}' "$results" | tee "$out/bench-scale.md"
