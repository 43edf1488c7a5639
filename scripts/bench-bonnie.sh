#!/usr/bin/env bash
# bonnie++ on the host mount (issue 46), native against FUSE as the ZFS-on-FUSE comparisons
# ran it: one tmpfs branch, and bonnie++ 2.00 (Debian) in its fast mode (-f: no per-character
# tests) on the branch itself (native), on mergerfs 2.33 (Debian) over it and on this daemon's
# mount over it, with passthrough off and on: block write, rewrite and block read (MiB/s),
# random seeks (/s), and the metadata rates, files created, stat()ed and deleted per second
# in sequential and random order. Rounds alternate the setups' order; the table gives each
# median [range] and the FUSE daemon's CPU seconds for the run (median; mergerfs' for it).
#
#   scripts/bench-bonnie.sh [--rounds N] [--size MIB] [--files K] [--bin PATH] [--out DIR]
#                           [--table-only]
#
# --size: the file size of the throughput tests (default 1024 MiB; bonnie++ is told the
# machine has half of it, -r, so that it runs). --files: thousands of files for the metadata
# tests (default 64: -n 64, in one directory; native tmpfs takes a few tenths of a second, and
# bonnie++ prints "+++++" for any test under half a second, shown as "—"). Default 3 rounds,
# about 6 minutes on 2 cores. Needs root. A benchmark, not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

rounds=3 size=1024 files=64 bin="" out="$PWD/.cache/bench-bonnie" table_only=0
while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --files) files=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --table-only) table_only=1; shift ;;
    *) die "unknown argument $1 (see the header of $0)" ;;
    esac
done
mkdir -p "$out"
results="$out/results.txt"

if [ "$table_only" = 0 ]; then
[ "$(id -u)" = 0 ] || die "needs root (mounts)"
command -v bonnie++ >/dev/null || as_root apt-get install -y -qq --no-install-recommends bonnie++ >&2
command -v mergerfs >/dev/null || as_root apt-get install -y -qq --no-install-recommends mergerfs >&2
[ -n "$bin" ] || bin=$(release_daemon)
work=$(mktemp -d /tmp/uvfs-bench-bonnie.XXXXXX)
branch="$work/branch" pool="$work/pool" daemon_pid=""
cleanup() {
    if [ -n "$daemon_pid" ]; then
        umount "$pool" 2>/dev/null || umount -l "$pool" 2>/dev/null || true
        wait "$daemon_pid" 2>/dev/null || true
    fi
    umount "$branch" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$branch" "$pool"
mount -t tmpfs -o size=$((size + 1024))M tmpfs "$branch"
chmod 1777 "$branch"

# mount_setup WHO: mounts WHO over the branch on the pool (native: nothing); sets daemon_pid.
mount_setup() {
    case "$1" in
    native) daemon_pid=""; return ;;
    mergerfs) mergerfs -f -o allow_other,minfreespace=0 "$branch" "$pool" >"$out/mergerfs.log" 2>&1 & ;;
    ours-off | ours-pt)
        local pt=off
        [ "$1" = ours-pt ] && pt=rw
        "$bin" mount "$pool" --branch "$branch" -o "minfreespace=0,passthrough.io=$pt" \
            >"$out/$1.log" 2>&1 &
        ;;
    esac
    daemon_pid=$!
    wait_mount "$pool" "$daemon_pid" "$out/$1.log" "$1"
}

umount_setup() {
    [ -n "$daemon_pid" ] || return 0
    umount "$pool" 2>/dev/null || umount -l "$pool"
    wait "$daemon_pid" 2>/dev/null || true
    daemon_pid=""
}

: >"$results"
setups=(native mergerfs ours-off ours-pt)
start=$(date +%s)
for round in $(seq "$rounds"); do
    order=("${setups[@]}")
    [ $((round % 2)) -eq 0 ] && mapfile -t order < <(printf '%s\n' "${setups[@]}" | tac)
    for who in "${order[@]}"; do
        log "round $round/$rounds: $who"
        mount_setup "$who"
        dir=$pool
        [ "$who" = native ] && dir=$branch
        c0=$([ -n "$daemon_pid" ] && proc_cpu "$daemon_pid" || echo 0)
        csv=$(bonnie++ -q -f -d "$dir" -s "$size" -r $((size / 2)) -n "$files" -u root -m "$who" 2>"$out/bonnie-$who.err" | tail -1)
        c1=$([ -n "$daemon_pid" ] && proc_cpu "$daemon_pid" || echo 0)
        umount_setup
        echo "$round $who $(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.2f", b - a }') $csv" >>"$results"
    done
done
log "done in $(( $(date +%s) - start )) s"
fi

# The table. A results line: ROUND WHO CPU CSV, CSV in bonnie++'s format (1.98): field 12
# block write KiB/s, 14 rewrite, 18 block read, 20 seeks/s, 27/29/31 sequential
# create/stat/delete per second, 33/35/37 random ones.
{
    echo "| test | native | mergerfs 2.33 | ours | ours passthrough |"
    echo "|---|---:|---:|---:|---:|"
    awk "$AWK_STATS"'
    function cell(t, w) {
        if (!((t SUBSEP w) in v) || v[t, w] ~ /\+/) return "—"
        return sprintf("%.0f [%s]", median(v[t, w]), range(v[t, w]))
    }
    BEGIN {
        n = split("block write MiB/s:12:1024,rewrite MiB/s:14:1024,block read MiB/s:18:1024,random seeks /s:20:1,sequential create /s:27:1,sequential stat /s:29:1,sequential delete /s:31:1,random create /s:33:1,random stat /s:35:1,random delete /s:37:1", tests, ",")
    }
    {
        split($4, f, ",")
        for (i = 1; i <= n; i++) {
            split(tests[i], t, ":")
            x = f[t[2]]
            if (x ~ /\+/ || x == "") { v[t[1], $2] = v[t[1], $2] "+"; continue }
            v[t[1], $2] = v[t[1], $2] " " sprintf("%.0f", x / t[3])
        }
        cpu[$2] = cpu[$2] " " $3
    }
    END {
        for (i = 1; i <= n; i++) {
            split(tests[i], t, ":")
            printf "| %s | %s | %s | %s | %s |\n", t[1], cell(t[1], "native"), cell(t[1], "mergerfs"), cell(t[1], "ours-off"), cell(t[1], "ours-pt")
        }
        printf "| daemon CPU s for the run | — | %.2f | %.2f | %.2f |\n", median(cpu["mergerfs"]), median(cpu["ours-off"]), median(cpu["ours-pt"])
    }' "$results"
} | tee "$out/bench-bonnie.md"
