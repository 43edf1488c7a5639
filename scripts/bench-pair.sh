#!/usr/bin/env bash
# Two or more configurations of this daemon side by side in one guest, one fio workload at a
# time, their order rotated round by round (issue 47, item 5). Separate boots on the shared 2-core
# machine move a row by ±30 % and more as other guests and builds come and go; two shares in
# one guest, measured seconds apart, see the same load. bench-maxpages.sh (one boot per
# setting) stays the full table; this is its narrowed A/B form for one or a few rows.
#
#   scripts/bench-pair.sh [--rounds N] [--seconds S] [--size MIB] [--workloads a,b,...]
#                         [--kernel k6|k7] [--nice N] [--out DIR]
#                         --side 'LABEL|BIN|DAEMON ARGS' --side 'LABEL|BIN|DAEMON ARGS' [--side ...]
#
# Each side is union-virtiofsd (BIN; empty: the tree's release build, copied) with --sandbox
# none -o minfreespace=0 and its own args (e.g. '--max-pages 32'), serving its own tmpfs holding
# the same SIZE MiB (default 256) file of random data. The guest (QEMU TCG, 2 vCPUs, 1536 MiB,
# queue size 1024; k6: Debian's 6.12, k7: 7.x booted with uvfs.max_pages_limit=1020) mounts
# side 1 on /mnt and side k on /mntk, then runs N rounds (default 8) of every workload on each
# side, the order rotated by one side every round (with two sides: 1 2, 2 1, 1 2, ...).
# Workloads, each fio --direct=1 over the file for S seconds (default 3) --time_based, after
# sync and drop_caches: psync-read-1m, psync-read-4m, psync-write-1m, aio1-read-1m,
# aio4-read-1m, aio4-write-1m (aioD: libaio at iodepth D). Default: aio1-read-1m.
#
# --nice N runs the daemons and QEMU at that niceness (e.g. -10: builds and guests of others
# on the shared machine then take less of the two cores from the measured guest, closer to a
# quiet host; the host's load is still printed).
#
# Output (stdout and OUT/bench-pair.md, OUT defaults to .cache/bench-pair): per workload and
# side, the median MiB/s with min–max over the rounds; fio's mean submission and completion
# latency in µs (slat: io_submit, which for a FUSE O_DIRECT read pins the pages and queues the
# requests; clat: from then to completion; psync has no slat), medians over the rounds; the
# daemon's CPU seconds per GiB (median; its threads' on-CPU time, sampled by the host at the
# guest's markers); and against side 1: the ratio of medians, the median and range of the
# per-round ratios (each round's side over side 1's, seconds apart) and in how many rounds the
# side was ahead. OUT/results.txt keeps "side workload round MiB/s bytes cpu-ns slat clat"
# lines, OUT/uptime.txt the host's 1-minute load at each workload. Not part of the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. scripts/lib.sh

nice_n=0 rounds=8 seconds=3 size_mib=256 workloads=aio1-read-1m kernel_id=k6 out="$root/.cache/bench-pair"
sides=()
while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --size) size_mib=$2; shift 2 ;;
    --workloads) workloads=${2//,/ }; shift 2 ;;
    --kernel) kernel_id=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --side) sides+=("$2"); shift 2 ;;
    --nice) nice_n=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see the header of $0)" ;;
    esac
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "--rounds: a positive number, not $rounds"
[[ $seconds =~ ^[1-9][0-9]*$ ]] || die "--seconds: whole seconds, not $seconds"
[[ $size_mib =~ ^[1-9][0-9]*$ ]] || die "--size: MiB, not $size_mib"
for w in $workloads; do
    case $w in
    psync-read-1m | psync-read-4m | psync-write-1m | aio1-read-1m | aio4-read-1m | aio4-write-1m) ;;
    *) die "unknown workload $w" ;;
    esac
done
[ "${#sides[@]}" -ge 2 ] || die "give two --side or more"
for sd in "${sides[@]}"; do [[ $sd == *"|"*"|"* ]] || die "--side: 'LABEL|BIN|ARGS', not $sd"; done
[ "$(id -u)" -eq 0 ] || die "run as root (it mounts tmpfs)"

mkdir -p "$out"
out=$(cd "$out" && pwd)
bench_tools
nsides=${#sides[@]}
labels=() bins=() sargs=()
for sd in "${sides[@]}"; do
    labels+=("${sd%%|*}")
    rest=${sd#*|}
    b=${rest%%|*}
    bins+=("${b:-$ours}")
    sargs+=("${rest#*|}")
done
initrd=$(scripts/build-initramfs.sh)
append=""
case $kernel_id in
k6) kernel=$(scripts/fetch-kernel.sh) ;;
k7) kernel=$(GUEST_KERNEL_SUITE=trixie-backports scripts/fetch-kernel.sh) append="uvfs.max_pages_limit=1020" ;;
*) die "--kernel: k6 or k7, not $kernel_id" ;;
esac

dirs=() pids=() qpid=""
cleanup() {
    local p d
    for p in "$qpid" "${pids[@]}"; do [ -n "$p" ] && kill -TERM "$p" 2>/dev/null || true; done
    for p in "$qpid" "${pids[@]}"; do [ -z "$p" ] || wait "$p" 2>/dev/null || true; done
    for d in "${dirs[@]}"; do
        umount "$d" 2>/dev/null || true
        rmdir "$d" 2>/dev/null || true
        rm -f "$d.sock" "$d.sock.pid"
    done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# One tmpfs per side, the same file on each.
for ((i = 0; i < nsides; i++)); do
    d=$(mktemp -d /tmp/uvfs-pair.XXXXXX)
    dirs+=("$d")
    mount -t tmpfs -o "size=$((2 * size_mib + 64))M" tmpfs "$d"
    if [ "$i" = 0 ]; then
        head -c "$((size_mib * 1048576))" /dev/urandom >"$d/big.dat"
    else
        cp "${dirs[0]}/big.dat" "$d/big.dat"
    fi
done

scen="$out/scenario.sh"
{
    echo "ROUNDS=$rounds SECONDS_=$seconds SIZE_MIB=$size_mib WORKLOADS='$workloads' NSIDES=$nsides"
    cat <<'EOF'
set -e
B=/opt/bench/bin
for k in $(seq 2 $NSIDES); do
    mkdir -p /mnt$k && mount -t virtiofs side$k /mnt$k || { echo "=== MOUNT FAILED side$k"; exit 1; }
done
engine=libaio
$B/fio --enghelp 2>/dev/null | grep -qw libaio || engine=io_uring
echo "=== PAIR INFO kernel=$(uname -r) aio_engine=$engine ==="
mark() { echo "=== PAIR $1 $2 $3 $4 ==="; sleep 1; }
fio_wl() { # SIDE ROUND NAME RW BS ENGINE DEPTH
    m=/mnt; [ "$1" = 1 ] || m=/mnt$1
    sync; echo 3 >/proc/sys/vm/drop_caches
    mark BEGIN "$1" "$3" "$2"
    out=$($B/fio --name=p --filename=$m/big.dat --size=${SIZE_MIB}M --direct=1 --ioengine="$6" \
        --iodepth="$7" --bs="$5" --rw="$4" --time_based --runtime=$SECONDS_ --minimal | tail -1)
    mark END "$1" "$3" "$2"
    case $4 in
    read) f=6 ;;
    *) f=47 ;;
    esac
    # io_kbytes, bw KiB/s, then slat mean and clat mean (µs), from fio's terse format.
    set -- "$@" $(echo "$out" | cut -d';' -f$f,$((f + 1)),$((f + 6)),$((f + 10)) | tr ';' ' ')
    case "$8$9" in '' | *[!0-9]*) echo "fio failed: $out"; exit 1 ;; esac
    echo "RESULT $1 $3 $2 $(awk -v k="$9" 'BEGIN {printf "%.1f", k / 1024}') $(($8 * 1024)) ${10%.*} ${11%.*}"
}
for round in $(seq $ROUNDS); do
    # Rotated by one side every round.
    order=""
    for k in $(seq 0 $((NSIDES - 1))); do order="$order $(((k + round - 1) % NSIDES + 1))"; done
    for w in $WORKLOADS; do
        for s in $order; do
            case $w in
            psync-read-1m) fio_wl $s $round $w read 1m psync 1 ;;
            psync-read-4m) fio_wl $s $round $w read 4m psync 1 ;;
            psync-write-1m) fio_wl $s $round $w write 1m psync 1 ;;
            aio1-read-1m) fio_wl $s $round $w read 1m $engine 1 ;;
            aio4-read-1m) fio_wl $s $round $w read 1m $engine 4 ;;
            aio4-write-1m) fio_wl $s $round $w write 1m $engine 4 ;;
            esac
        done
    done
done
EOF
} >"$scen"

# cpu_ns PID: on-CPU nanoseconds of every thread of PID.
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f\n", s}'; }

devices=()
for ((i = 0; i < nsides; i++)); do
    # shellcheck disable=SC2086 # the side's args are words
    nice -n "$nice_n" "${bins[i]}" --socket-path "${dirs[i]}.sock" --shared-dir "${dirs[i]}" --sandbox none \
        -o minfreespace=0 ${sargs[i]} >"$out/$((i + 1)).daemon.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 200); do [ -S "${dirs[i]}.sock" ] && break; sleep 0.05; done
    [ -S "${dirs[i]}.sock" ] || die "side $((i + 1)) made no socket (see $out/$((i + 1)).daemon.log)"
    [ "$i" = 0 ] || devices+=(--device "${dirs[i]}.sock:side$((i + 1))")
    log "side $((i + 1)): ${labels[i]} (${bins[i]} ${sargs[i]})"
done
console="$out/console.log" samples="$out/samples" results="$out/results.txt"
: >"$console"
: >"$samples"
: >"$out/uptime.txt"
log "$rounds rounds of: $workloads"
timeout 7200 nice -n "$nice_n" bash qemu/run-guest.sh --socket "${dirs[0]}.sock" "${devices[@]}" \
    --queue-size 1024 --smp 2 --mem 1536M --kernel "$kernel" --initrd "$initrd" \
    --extra-initrd "$bench_cpio" --script "$scen" --append "$append" </dev/null >"$console" 2>&1 &
qpid=$!
while IFS= read -r line; do
    line=${line%$'\r'}
    case $line in
    *"=== PAIR BEGIN "* | *"=== PAIR END "*)
        read -r _ event side name round _ <<<"${line#*=== }"
        p=${pids[side - 1]}
        echo "$event $side $name $round $(cpu_ns "$p")" >>"$samples"
        [ "$event" = END ] || echo "$side $name $round $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/uptime.txt"
        ;;
    *"=== PAIR INFO "*) log "${line#*=== PAIR INFO }" ;;
    *"RESULT "*) log "${line#*RESULT }" ;;
    *"fio failed"*) log "$line" ;;
    esac
done < <(tail -s 0.1 -n +1 -f --pid="$qpid" "$console")
wait "$qpid" || true
qpid=""
grep -q '=== SCENARIO EXIT 0 ===' <(tr -d '\r' <"$console") || die "the scenario failed (see $console)"
for ((i = 1; i <= nsides; i++)); do
    log "side $i: $(sed -n 's/.*\(negotiated max_pages=[0-9]*\).*/\1/p' "$out/$i.daemon.log" | tail -1)"
done
tr -d '\r' <"$console" | awk '
    FILENAME == ARGV[1] { k = $2 " " $3 " " $4; if ($1 == "BEGIN") b[k] = $5; else e[k] = $5; next }
    /RESULT / { sub(/.*RESULT /, "RESULT "); k = $2 " " $3 " " $4; printf "%s %s %s %s %s %d %s %s\n", $2, $3, $4, $5, $6, e[k] - b[k], $7, $8 }
' "$samples" - >"$results"

{
    echo "$rounds rounds of ${seconds} s, ${size_mib} MiB file, kernel $kernel_id, nice $nice_n, host load (1-min) $(sort -n -k4 "$out/uptime.txt" | sed -n '1p;$p' | cut -d' ' -f4 | paste -sd' ' | sed 's/ / to /')"
    echo
    for ((i = 0; i < nsides; i++)); do echo "- side $((i + 1)): ${labels[i]}: \`${sargs[i]:-(defaults)}\`${bins[i]:+ ($(basename "${bins[i]}"))}"; done
    echo
    echo "| workload | side | MiB/s median (min–max) | slat µs | clat µs | CPU s/GiB | / side 1: medians | per round, median (min–max) | ahead |"
    echo "|---|---|---|---|---|---|---|---|---|"
    for w in $workloads; do
        awk -v w="$w" -v n="$nsides" -v labels="$(printf '%s\n' "${labels[@]}" | paste -sd'|')" '
        function med(a, k,   i, j, t) {
            for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
            return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
        }
        $2 == w { t[$1, $3] = $4; c[$1, $3] = $6 / 1e9 / ($5 / 1073741824); sl[$1, $3] = $7; cl[$1, $3] = $8; if ($3 > rounds) rounds = $3 }
        END {
            split(labels, L, "|")
            for (s = 1; s <= n; s++) {
                k = 0; lo = 1e18; hi = 0
                for (r = 1; r <= rounds; r++) if ((s, r) in t) {
                    k++; x[k] = t[s, r]; y[k] = c[s, r]; u[k] = sl[s, r]; v[k] = cl[s, r]
                    if (x[k] < lo) lo = x[k]; if (x[k] > hi) hi = x[k]
                }
                m[s] = med(x, k); cm = med(y, k); um = med(u, k); vm = med(v, k)
                cmp = "– | – | –"
                if (s > 1) {
                    k = 0; ahead = 0; qlo = 1e18; qhi = 0
                    for (r = 1; r <= rounds; r++) if ((1, r) in t && (s, r) in t) {
                        k++; q[k] = t[s, r] / t[1, r]; if (q[k] > 1) ahead++
                        if (q[k] < qlo) qlo = q[k]; if (q[k] > qhi) qhi = q[k]
                    }
                    cmp = sprintf("%.2f× | %.2f× (%.2f–%.2f) | %d/%d", m[s] / m[1], med(q, k), qlo, qhi, ahead, k)
                }
                printf "| %s | %d: %s | %.0f (%.0f–%.0f) | %.0f | %.0f | %.3f | %s |\n", w, s, L[s], m[s], lo, hi, um, vm, cm, cmp
            }
        }' "$results"
    done
} | tee "$out/bench-pair.md"
