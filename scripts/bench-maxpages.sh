#!/usr/bin/env bash
# The max_pages benchmark (issue 25): what larger FUSE requests (FUSE_MAX_PAGES) buy a real
# guest. union-virtiofsd (release build, --sandbox none, one tmpfs branch, default thread pool)
# serves a guest (QEMU TCG, 2 vCPUs, 1536 MiB, queue size 1024) with --max-pages N for each
# setting (kernel, N):
#   k6-32, k6-256            Debian bookworm-backports kernel (6.12: at most 256 pages)
#   k7-32, k7-256, k7-1020   Debian trixie-backports kernel (7.x), booted with
#                            uvfs.max_pages_limit=1020 (qemu/init raises fs.fuse.max_pages_limit
#                            before mounting), so that 1020 pages (~4 MiB) can be negotiated
# The settings are run in turn, RUNS times (default 5), the order reversed every other run,
# and each cell is the median with the spread (min-max) over the runs, next to the daemon's
# CPU seconds per GiB that crossed it (median). Ratio columns divide medians: 256/32 on each
# kernel, 1020/32 and 1020/256 on 7.x, throughput first (above 1: faster with larger requests) with a
# verdict, then CPU per GiB (below 1: the daemon spends less per byte with larger requests).
# The verdict is "faster" or "slower" only when every run of one setting beat every run of
# the other (with 5 runs each, noise alone does that once in 252 comparisons), "even" when
# the two ranges overlap: on this 2-core TCG host one run strays by up to ±10%.
#
#   scripts/bench-maxpages.sh [--runs N] [--out DIR] [--workloads a,b,...] [--settings s,...]
#                             [--size MIB] [--fio-seconds S] [--quick] [--count-requests]
#                             [-- extra daemon args]
#
# --quick is --size 64 --runs 1 --fio-seconds 0 (a smoke test, about 40 s per setting).
# --count-requests adds, after the timed runs, one untimed boot per setting with --log-level
# debug (fio rows then make a single pass) and a second table: how many READ and WRITE
# requests each workload sent, their mean and largest size. --settings and --workloads take
# comma-separated subsets of the names below. The table goes to stdout and to
# OUT/bench-maxpages.md (OUT defaults to .cache/bench-maxpages; it also keeps every console,
# daemon log and results.txt, one line per setting, workload and run).
#
# Workloads (the file is SIZE MiB, default 256, of random data written on the host tmpfs
# before each boot; the guest syncs and drops its caches, echo 3 > /proc/sys/vm/drop_caches,
# before every workload):
#   psync-read-1m, psync-read-4m, psync-write-1m, psync-write-4m
#                    fio --ioengine=psync --direct=1 --rw=read|write --bs=1m|4m over the file
#                    (writes overwrite it), passes for --fio-seconds S (default 3: one pass at
#                    2 GB/s is too short to time; 0: a single pass) --time_based; MiB/s is fio's
#                    bandwidth, the bytes moved fio's io_kbytes
#   aio4-read-1m, aio4-write-1m
#                    the same with --ioengine=libaio --iodepth=4 --bs=1m (io_uring if the
#                    guest's fio lacked libaio; the INFO line says which)
#   aio1-read-1m     the same at --iodepth=1 (issue 47's row: one 1 MiB READ in flight at a
#                    time at 256 pages, eight 128 KiB ones at once at 32)
#   cold-read-ra-default, cold-read-ra-4096
#                    dd if=FILE of=/dev/null bs=1M with the share's read_ahead_kb as mounted
#                    (/sys/class/bdi/MAJ:MIN/read_ahead_kb, the device from /proc/self/mountinfo)
#                    and raised to 4096
#   dd-write, dd-write-wb
#                    dd if=/dev/zero of=NEW bs=1M count=SIZE conv=fsync, the daemon without and
#                    with --writeback (dd-write-wb gets a boot of its own for that flag)
#   cp               busybox cp FILE NEW && sync (through the guest's page cache; coreutils cp
#                    would use copy_file_range, which never carries data over the queue)
#   cat-cold         busybox cat FILE > /dev/null (default read_ahead_kb)
#   never-read-1m, never-read-4m, never-write-1m
#                    the daemon with --cache never (a boot of its own: every file is opened with
#                    FOPEN_DIRECT_IO, as virtiofsd's --cache never and mergerfs's cache.files=off
#                    do): dd if=FILE of=/dev/null bs=1M|4M, and dd-write's command. A read() or
#                    write() then goes to the daemon as requests of at most max_pages, one after
#                    another (the guest sends them in parallel only for O_DIRECT's async I/O)
# Timed rows (all but fio's) divide the file size by the guest's wall time (coreutils date).
#
# Daemon CPU per workload: the guest prints "=== BMP BEGIN|END name ===" and then idles for a
# second; the host follows the console and, at each marker, sums the on-CPU time of every
# daemon thread (/proc/PID/task/*/schedstat, nanoseconds; utime+stime of /proc/PID/stat in
# clock ticks where schedstat is missing). CPU s/GiB = CPU between the markers / GiB that
# crossed the daemon (what fio moved; the file size for dd and cat; twice it for cp, which
# reads and writes it).
#
# Not part of the test suite. Each boot runs all of its workloads; the defaults (5 settings x
# 3 boots x 5 runs = 75 boots) take about 40 minutes on the 2-core machine, --count-requests 5
# more. --settings also takes k6-64, k6-128, k7-64, k7-128 and k7-512 (not run by default).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. scripts/lib.sh

all_workloads="psync-read-1m psync-read-4m psync-write-1m psync-write-4m aio1-read-1m aio4-read-1m aio4-write-1m cold-read-ra-default cold-read-ra-4096 dd-write dd-write-wb cp cat-cold never-read-1m never-read-4m never-write-1m"
all_settings="k6-32 k6-256 k7-32 k7-256 k7-1020"
# Also accepted by --settings (not run by default): other page counts, for the defaults.
extra_settings="k6-64 k6-128 k7-64 k7-128 k7-512"
runs="" out="$root/.cache/bench-maxpages" size_mib=256 fio_seconds="" quick=0 count_requests=0 extra=()
workloads=$all_workloads settings=$all_settings mem=1536M queue_size=1024
while [ $# -gt 0 ]; do
    case "$1" in
    --runs) runs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --workloads) workloads=${2//,/ }; shift 2 ;;
    --settings) settings=${2//,/ }; shift 2 ;;
    --size) size_mib=$2; shift 2 ;;
    --fio-seconds) fio_seconds=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --count-requests) count_requests=1; shift ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see the header of $0)" ;;
    esac
done
if [ "$quick" = 1 ]; then
    size_mib=64
    runs=${runs:-1}
    fio_seconds=${fio_seconds:-0}
fi
runs=${runs:-5}
fio_seconds=${fio_seconds:-3}
[[ $fio_seconds =~ ^[0-9]+$ ]] || die "--fio-seconds: whole seconds, not $fio_seconds"
[[ $runs =~ ^[1-9][0-9]*$ ]] || die "--runs: a positive number, not $runs"
[[ $size_mib =~ ^[1-9][0-9]*$ ]] || die "--size: MiB, not $size_mib"
for w in $workloads; do [[ " $all_workloads " == *" $w "* ]] || die "unknown workload $w (one of: $all_workloads)"; done
for s in $settings; do [[ " $all_settings $extra_settings " == *" $s "* ]] || die "unknown setting $s (one of: $all_settings $extra_settings)"; done
# Keep the canonical orders whatever order the options gave.
sel_w="" sel_s=""
for w in $all_workloads; do [[ " $workloads " == *" $w "* ]] && sel_w+="$w "; done
for s in k6-32 k6-64 k6-128 k6-256 k7-32 k7-64 k7-128 k7-256 k7-512 k7-1020; do [[ " $settings " == *" $s "* ]] && sel_s+="$s "; done
workloads=${sel_w% } settings=${sel_s% }
[ -n "$workloads" ] || die "no workload selected"
[ -n "$settings" ] || die "no setting selected"
plain_w="" wb_w="" never_w=""
for w in $workloads; do
    case $w in
    dd-write-wb) wb_w=$w ;;
    never-*) never_w+="$w " ;;
    *) plain_w+="$w " ;;
    esac
done
plain_w=${plain_w% } never_w=${never_w% }

[ "$(id -u)" -eq 0 ] || die "run as root (it mounts tmpfs)"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found: run scripts/install-deps.sh"
# The host holds the branch tmpfs (the file, a copy, dd's output) and the master copy of the
# file, the guest its 1536 MiB.
need_mib=$((5 * size_mib + 1536 + 512))
avail_mib=$(awk '/^MemAvailable:/ {print int($2 / 1024)}' /proc/meminfo)
[ "$avail_mib" -ge "$need_mib" ] || die "need about $need_mib MiB of available memory, have $avail_mib"

mkdir -p "$out"
out=$(cd "$out" && pwd)
bench_tools
initrd=$(scripts/build-initramfs.sh)
k6="" k7=""
[[ " $settings " == *" k6-"* ]] && k6=$(scripts/fetch-kernel.sh)
[[ " $settings " == *" k7-"* ]] && k7=$(GUEST_KERNEL_SUITE=trixie-backports scripts/fetch-kernel.sh)
# "6.12" from "linux-image-6.12.95+deb12-cloud-amd64 6.12.95-1~bpo12+1".
kver() { sed -n 's/^linux-image-\([0-9]*\.[0-9]*\).*/\1/p' "$(dirname "$1")/version"; }
k6v=6.12 k7v=7.x
[ -z "$k6" ] || k6v=$(kver "$k6")
[ -z "$k7" ] || k7v=$(kver "$k7")

# setting_* ID: the kernel, its version, the guest's extra command line, max_pages.
setting_kernel() { case $1 in k6-*) echo "$k6" ;; *) echo "$k7" ;; esac; }
setting_label() { case $1 in k6-*) echo "$k6v · ${1#k6-}" ;; *) echo "$k7v · ${1#k7-}" ;; esac; }
setting_append() { case $1 in k7-*) echo "uvfs.max_pages_limit=1020" ;; *) echo "" ;; esac; }
setting_pages() { echo "${1#k?-}"; }

# Processes and mounts the trap cleans up (only ours, by pid).
dpid="" qpid="" branch="" master=""
cleanup() {
    local p
    for p in "$qpid" "$dpid"; do
        [ -n "$p" ] && kill -0 "$p" 2>/dev/null && kill -TERM "$p" 2>/dev/null
    done
    for p in "$qpid" "$dpid"; do [ -z "$p" ] || wait "$p" 2>/dev/null || true; done
    if [ -n "$branch" ]; then
        umount "$branch" 2>/dev/null || true
        rmdir "$branch" 2>/dev/null || true
        rm -f "$branch.sock" "$branch.sock.pid"
    fi
    [ -z "$master" ] || { umount "$master" 2>/dev/null || true; rmdir "$master" 2>/dev/null || true; }
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The master copy of the file, on a tmpfs of its own; each boot's branch gets a fresh copy.
master=$(mktemp -d /tmp/uvfs-bmp-master.XXXXXX)
mount -t tmpfs -o "size=$((size_mib + 16))M" tmpfs "$master"
head -c "$((size_mib * 1048576))" /dev/urandom >"$master/big.dat"

# The guest scenario; SIZE_MIB, WORKLOADS and LOGMARK are prepended per boot.
body="$out/scenario-body.sh"
cat >"$body" <<'EOF'
set -e
B=/opt/bench/bin
F=/mnt/big.dat
size=$((SIZE_MIB * 1048576))
now() { $B/date +%s.%N; }
# The host samples the daemon's CPU when it sees a marker; idling a second after it keeps the
# sample between workloads. With LOGMARK=1 a mkdir on the share marks the daemon's debug log.
mark() {
    if [ "$LOGMARK" = 1 ]; then mkdir /mnt/.bmp-mark; rmdir /mnt/.bmp-mark; fi
    echo "=== BMP $1 $2 ==="
    sleep 1
}
cold() { sync; echo 3 >/proc/sys/vm/drop_caches; }
mibs() { awk -v b="$1" -v t0="$2" -v t1="$3" 'BEGIN {printf "%.1f", b / 1048576 / (t1 - t0)}'; }
bdi=$(awk '$5 == "/mnt" {print $3}' /proc/self/mountinfo)
ra=/sys/class/bdi/$bdi/read_ahead_kb
ra0=$(cat "$ra")
engine=libaio
$B/fio --enghelp 2>/dev/null | grep -qw libaio || engine=io_uring
echo "=== BMP INFO kernel=$(uname -r) bdi=$bdi read_ahead_kb=$ra0 max_pages_limit=$(cat /proc/sys/fs/fuse/max_pages_limit 2>/dev/null || echo none) aio_engine=$engine ==="
[ "$(stat -c %s $F)" = "$size" ] || { echo "$F is not $size bytes"; exit 1; }

# fio_wl NAME RW BS ENGINE DEPTH: passes over the file for FIO_SECONDS (one pass if 0); fio's
# bandwidth in MiB/s and the bytes it moved.
fio_wl() {
    timing=""
    [ "$FIO_SECONDS" = 0 ] || timing="--time_based --runtime=$FIO_SECONDS"
    cold
    mark BEGIN "$1"
    # shellcheck disable=SC2086 # $timing is two words or none
    r=$($B/fio --name=b --filename=$F --size=${SIZE_MIB}M --direct=1 --ioengine="$4" \
        --iodepth="$5" --bs="$3" --rw="$2" $timing --minimal | tail -1)
    mark END "$1"
    case $2 in
    read) kb=$(echo "$r" | cut -d';' -f7) io=$(echo "$r" | cut -d';' -f6) ;;
    *) kb=$(echo "$r" | cut -d';' -f48) io=$(echo "$r" | cut -d';' -f47) ;;
    esac
    case "$kb$io" in '' | *[!0-9]*) echo "fio failed: $r"; exit 1 ;; esac
    echo "RESULT $1 $(awk -v k="$kb" 'BEGIN {printf "%.1f", k / 1024}') $((io * 1024))"
}
# timed NAME MOVED CMD...: the file size over CMD's wall time.
timed() {
    n=$1 moved=$2
    shift 2
    cold
    mark BEGIN "$n"
    t0=$(now)
    "$@"
    t1=$(now)
    mark END "$n"
    echo "RESULT $n $(mibs $size $t0 $t1) $moved"
}
read_dd() { dd if=$F of=/dev/null bs=1M 2>/dev/null; }
read_dd4() { dd if=$F of=/dev/null bs=4M 2>/dev/null; }
write_dd() { dd if=/dev/zero of=/mnt/dd.dat bs=1M count=$SIZE_MIB conv=fsync 2>/dev/null; }
copy() { cp $F /mnt/copy.dat && sync; }
cat_file() { cat $F >/dev/null; }

for w in $WORKLOADS; do
    case $w in
    psync-read-1m) fio_wl $w read 1m psync 1 ;;
    psync-read-4m) fio_wl $w read 4m psync 1 ;;
    psync-write-1m) fio_wl $w write 1m psync 1 ;;
    psync-write-4m) fio_wl $w write 4m psync 1 ;;
    aio1-read-1m) fio_wl $w read 1m $engine 1 ;;
    aio4-read-1m) fio_wl $w read 1m $engine 4 ;;
    aio4-write-1m) fio_wl $w write 1m $engine 4 ;;
    cold-read-ra-default) timed $w $size read_dd ;;
    cold-read-ra-4096)
        echo 4096 >"$ra"
        timed $w $size read_dd
        echo "$ra0" >"$ra" ;;
    dd-write | dd-write-wb)
        timed $w $size write_dd
        rm /mnt/dd.dat ;;
    cp)
        timed $w $((2 * size)) copy
        rm /mnt/copy.dat ;;
    cat-cold) timed $w $size cat_file ;;
    never-read-1m) timed $w $size read_dd ;;
    never-read-4m) timed $w $size read_dd4 ;;
    never-write-1m)
        timed $w $size write_dd
        rm /mnt/dd.dat ;;
    *) echo "unknown workload $w"; exit 1 ;;
    esac
done
EOF

# cpu_ns PID: on-CPU nanoseconds of every thread of PID.
clk_tck=$(getconf CLK_TCK)
cpu_ns() {
    if [ -r "/proc/$1/schedstat" ]; then
        cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f\n", s}'
    else
        awk -v t="$clk_tck" '{sub(/.*\) /, ""); printf "%.0f\n", ($12 + $13) * 1e9 / t}' "/proc/$1/stat"
    fi
}

# boot SETTING GROUP RUN [debug]: one guest boot running GROUP's workloads (plain: every
# selected one but dd-write-wb and never-*; wb: dd-write-wb with --writeback; never: never-*
# with --cache never); appends
# "setting workload run MiB/s bytes cpu-ns" lines to $results (with debug: request counts,
# "setting workload reads read-bytes writes write-bytes", to $requests).
boot() {
    local s=$1 group=$2 run=$3 debug=${4:-} wl daemon_args=() tag scen console dlog samples line
    local event name
    local kernel pages
    kernel=$(setting_kernel "$s") pages=$(setting_pages "$s")
    case $group in
    wb) wl=$wb_w daemon_args=(--writeback) ;;
    never) wl=$never_w daemon_args=(--cache never) ;;
    *) wl=$plain_w ;;
    esac
    [ -n "$wl" ] || return 0
    [ -z "$debug" ] || daemon_args+=(--log-level debug)
    tag="$s.$group.${debug:+debug}$run"
    scen="$out/$tag.scenario.sh" console="$out/$tag.console.log" dlog="$out/$tag.daemon.log"
    samples="$out/$tag.samples"
    local fio_s=$fio_seconds
    [ -z "$debug" ] || fio_s=0
    {
        echo "SIZE_MIB=$size_mib FIO_SECONDS=$fio_s LOGMARK=${debug:+1}"
        echo "WORKLOADS='$wl'"
        cat "$body"
    } >"$scen"
    : >"$samples"
    : >"$console"

    branch=$(mktemp -d /tmp/uvfs-bmp.XXXXXX)
    mount -t tmpfs -o "size=$((4 * size_mib + 64))M" tmpfs "$branch"
    cp "$master/big.dat" "$branch/big.dat"
    "$ours" --socket-path "$branch.sock" --shared-dir "$branch" --sandbox none -o minfreespace=0 \
        --max-pages "$pages" "${daemon_args[@]}" "${extra[@]}" >"$dlog" 2>&1 &
    dpid=$!
    for _ in $(seq 200); do [ -S "$branch.sock" ] && break; sleep 0.05; done
    [ -S "$branch.sock" ] || die "$tag: the daemon made no socket (see $dlog)"
    timeout 3600 bash qemu/run-guest.sh --socket "$branch.sock" --queue-size "$queue_size" \
        --smp 2 --mem "$mem" --kernel "$kernel" --initrd "$initrd" --extra-initrd "$bench_cpio" \
        --script "$scen" --append "$(setting_append "$s")" </dev/null >"$console" 2>&1 &
    qpid=$!
    # Follow the console; sample the daemon's CPU at each marker.
    while IFS= read -r line; do
        line=${line%$'\r'}
        case $line in
        *"=== BMP BEGIN "* | *"=== BMP END "*)
            read -r _ event name _ <<<"${line#*=== }"
            echo "$event $name $(cpu_ns "$dpid")" >>"$samples"
            ;;
        esac
    done < <(tail -s 0.1 -n +1 -f --pid="$qpid" "$console")
    wait "$qpid" || true
    qpid=""
    # The daemon exits when QEMU goes; if not, stop it.
    for _ in $(seq 100); do kill -0 "$dpid" 2>/dev/null || break; sleep 0.05; done
    kill -TERM "$dpid" 2>/dev/null || true
    wait "$dpid" 2>/dev/null || true
    dpid=""
    umount "$branch"
    rmdir "$branch"
    rm -f "$branch.sock" "$branch.sock.pid"
    branch=""

    tr -d '\r' <"$console" >"$console.tmp" && mv "$console.tmp" "$console"
    grep -q '=== SCENARIO EXIT 0 ===' "$console" || die "$tag: the scenario failed (see $console)"
    local negotiated
    negotiated=$(sed -n 's/.*negotiated max_pages=\([0-9]*\).*/\1/p' "$dlog" | tail -1)
    [ "$negotiated" = "$pages" ] || die "$tag: negotiated max_pages=${negotiated:-none}, wanted $pages (see $dlog)"
    if [[ $s == k7-* ]] && ! grep -q '=== UVFS MAX_PAGES_LIMIT 1020 ===' "$console"; then
        die "$tag: the guest did not raise fs.fuse.max_pages_limit (see $console)"
    fi
    grep -m1 '=== BMP INFO ' "$console" | sed "s/.*=== BMP INFO /$s: /; s/ ===\$//" >>"$out/info.txt"
    if [ -z "$debug" ]; then
        # RESULT name MiB/s bytes + BEGIN/END samples -> one line per workload.
        awk -v s="$s" -v run="$run" '
            FILENAME == ARGV[1] { if ($1 == "BEGIN") b[$2] = $3; else e[$2] = $3; next }
            /RESULT / {
                sub(/.*RESULT /, "")
                if (!($1 in b) || !($1 in e)) { print "no CPU samples for " $1 > "/dev/stderr"; exit 1 }
                printf "%s %s %s %s %s %d\n", s, $1, run, $2, $3, e[$1] - b[$1]
            }
        ' "$samples" "$console" >>"$results"
    else
        # The debug log between the two mkdir marks (opcode 9) around each workload.
        sed -n 's/.*=== BMP BEGIN \([^ ]*\) ===.*/\1/p' "$console" >"$out/$tag.order"
        awk -v s="$s" '
            FILENAME == ARGV[1] { name[++k] = $1; next }
            / opcode=9 / { m++; next }
            m % 2 == 1 && / READ nodeid=/ {
                w = name[(m + 1) / 2]; sub(/.*size=/, ""); r[w]++; rb[w] += $0; if ($0 + 0 > rm[w]) rm[w] = $0 + 0
            }
            m % 2 == 1 && / WRITE nodeid=/ {
                w = name[(m + 1) / 2]; sub(/.*size=/, ""); wr[w]++; wbytes[w] += $0; if ($0 + 0 > wm[w]) wm[w] = $0 + 0
            }
            END {
                for (i = 1; i <= k; i++) {
                    w = name[i]
                    printf "%s %s %d %d %d %d %d %d\n", s, w, r[w], rb[w], rm[w], wr[w], wbytes[w], wm[w]
                }
            }
        ' "$out/$tag.order" "$dlog" >>"$requests"
    fi
}

results="$out/results.txt" requests="$out/requests.txt"
: >"$results"
: >"$out/info.txt"
t_start=$(date +%s)
read -ra order <<<"$settings"
for run in $(seq "$runs"); do
    list=("${order[@]}")
    if [ $((run % 2)) -eq 0 ]; then
        list=()
        for ((i = ${#order[@]} - 1; i >= 0; i--)); do list+=("${order[i]}"); done
    fi
    for s in "${list[@]}"; do
        for group in plain wb never; do
            log "run $run/$runs: $s ($group) [$(($(date +%s) - t_start)) s]"
            boot "$s" "$group" "$run"
        done
    done
done
if [ "$count_requests" = 1 ]; then
    : >"$requests"
    for s in "${order[@]}"; do
        for group in plain wb never; do
            log "request counts: $s ($group)"
            boot "$s" "$group" 1 debug
        done
    done
fi
log "all boots done in $(($(date +%s) - t_start)) s"

# The table: rows = workloads, columns = settings, then the ratio columns.
labels=""
for s in $settings; do labels+="$s=$(setting_label "$s");"; done
table() {
    awk -v settings="$settings" -v workloads="$workloads" -v labels="$labels" -v runs="$runs" \
        -v size="$size_mib" -v k6v="$k6v" -v k7v="$k7v" '
    function sort(list, a,   n, i, j, t) {
        n = split(list, a, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n
    }
    function median(list,   a, n) {
        n = sort(list, a)
        if (n == 0) return ""
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function lo(list,   a, n) { n = sort(list, a); return a[1] }
    function hi(list,   a, n) { n = sort(list, a); return a[n] }
    # faster / slower only when every run of one setting beat every run of the other (the
    # ranges do not overlap: with 5 runs each, 1 chance in 252 of happening by noise alone);
    # even otherwise.
    function verdict(w, num, den) {
        if (lo(thr[num, w]) > hi(thr[den, w])) return "faster"
        if (hi(thr[num, w]) < lo(thr[den, w])) return "slower"
        return "even"
    }
    function ratio(w, num, den,   a, b, c, d) {
        a = median(thr[num, w]); b = median(thr[den, w]); c = median(cpu[num, w]); d = median(cpu[den, w])
        if (a == "" || b == "" || b == 0) return "–"
        return sprintf("%.2f× %s · CPU %s", a / b, verdict(w, num, den), (c != "" && d > 0) ? sprintf("%.2f×", c / d) : "–")
    }
    {
        thr[$1, $2] = thr[$1, $2] " " $4
        cpu[$1, $2] = cpu[$1, $2] " " sprintf("%.3f", $6 / 1e9 / ($5 / 1073741824))
    }
    END {
        ns = split(settings, S, " "); nw = split(workloads, W, " "); split(labels, L, ";")
        for (i in L) { split(L[i], kv, "="); label[kv[1]] = kv[2] }
        for (i = 1; i <= ns; i++) has[S[i]] = 1
        head = "| workload |"; rule = "|---|"
        for (i = 1; i <= ns; i++) { head = head " " label[S[i]] " |"; rule = rule "---|" }
        nr = 0
        if (has["k6-32"] && has["k6-256"]) { R[++nr] = "k6-256 k6-32"; head = head " 256/32 (" k6v ") |"; rule = rule "---|" }
        if (has["k7-32"] && has["k7-256"]) { R[++nr] = "k7-256 k7-32"; head = head " 256/32 (" k7v ") |"; rule = rule "---|" }
        if (has["k7-32"] && has["k7-1020"]) { R[++nr] = "k7-1020 k7-32"; head = head " 1020/32 (" k7v ") |"; rule = rule "---|" }
        if (has["k7-256"] && has["k7-1020"]) { R[++nr] = "k7-1020 k7-256"; head = head " 1020/256 (" k7v ") |"; rule = rule "---|" }
        printf "%s MiB file, %d run(s); cells: MiB/s median (min–max) · daemon CPU s/GiB (median); columns: kernel · max_pages; ratios: faster/slower when the two ranges do not overlap, even when they do\n\n", size, runs
        print head; print rule
        for (j = 1; j <= nw; j++) {
            w = W[j]; row = "| " w " |"
            for (i = 1; i <= ns; i++) {
                t = thr[S[i], w]
                if (t == "") { row = row " – |"; continue }
                row = row sprintf(" %.0f (%.0f–%.0f) · %.2f |", median(t), lo(t), hi(t), median(cpu[S[i], w]))
            }
            for (i = 1; i <= nr; i++) { split(R[i], p, " "); row = row " " ratio(w, p[1], p[2]) " |" }
            print row
        }
    }' "$results"
}
req_table() {
    awk -v settings="$settings" -v workloads="$workloads" -v labels="$labels" '
    { k = $1 SUBSEP $2; r[k] = $3; rb[k] = $4; rm[k] = $5; wr[k] = $6; wb[k] = $7; wm[k] = $8 }
    END {
        ns = split(settings, S, " "); nw = split(workloads, W, " "); split(labels, L, ";")
        for (i in L) { split(L[i], kv, "="); label[kv[1]] = kv[2] }
        printf "\nFUSE READ / WRITE requests per workload: count × mean KiB (largest KiB), from one --log-level debug boot per setting\n\n"
        head = "| workload |"; rule = "|---|"
        for (i = 1; i <= ns; i++) { head = head " " label[S[i]] " |"; rule = rule "---|" }
        print head; print rule
        for (j = 1; j <= nw; j++) {
            w = W[j]; row = "| " w " |"
            for (i = 1; i <= ns; i++) {
                k = S[i] SUBSEP w; c = ""
                if (r[k] > 0) c = sprintf("R %d × %.0f (max %.0f)", r[k], rb[k] / r[k] / 1024, rm[k] / 1024)
                if (wr[k] > 0) c = c (c == "" ? "" : ", ") sprintf("W %d × %.0f (max %.0f)", wr[k], wb[k] / wr[k] / 1024, wm[k] / 1024)
                row = row " " (c == "" ? "–" : c) " |"
            }
            print row
        }
    }' "$requests"
}
{
    table
    echo
    echo "Guests (first boot of each setting):"
    sort -u "$out/info.txt" | sed 's/^/- /'
    [ "$count_requests" = 0 ] || req_table
} | tee "$out/bench-maxpages.md"
log "table: $out/bench-maxpages.md"
