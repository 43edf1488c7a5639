#!/usr/bin/env bash
# The guest benchmark: boots the test guest (QEMU TCG, Debian 6.12 kernel, 2 vCPUs) against
# union-virtiofsd (release build) and against virtiofsd 1.14 (cargo install'ed into
# $UVFS_TOOLS if absent), each serving a fresh tmpfs, alternating the two for N runs, and
# prints one table of medians and ratios (ours / virtiofsd; higher is better for us on every
# row: throughput rows are MB/s or ops/s, time rows are inverted) with the number of runs each
# row had ours ahead, and one of each run's ratio (runs.md). Writes the table to
# bench-guest.md and a plot of the ratios to bench-guest.png (gnuplot) in OUT.
#
#   scripts/bench-guest.sh [--runs N] [--out DIR] [--queues Q] [--versus virtiofsd|one-queue]
#                          [--fio-only | --meta-only | --buffered] [--writeback]
#                          [--kernel-suite SUITE] [--count-requests] [--with-mergerfs]
#                          [--same-guest [--boots B] [--phases]] [-- extra daemon args]
#
# --same-guest: one boot for all runs with both daemons side by side in it (two virtio-fs
# devices, each daemon serving its own tmpfs; virtiofsd's share is mounted on /mnt2) and the
# scenario run N rounds on each share in turn, the order swapped every round. Rows of rates
# are medians over the rounds; CPU and memory are each daemon's for the whole boot (memory
# after the last round). The guest, its kernel's state and the host's load are then the same
# for both daemons, where separate boots differ from boot to boot. --boots B repeats that boot
# B times (default 1): every row is then the median over all boots (and rounds), memory too.
# --phases also counts the guest memory each daemon has mapped (KiB, its shared pages as in the
# session-shmem row) before the rounds and after each part of the scenario (the fio
# rows, the metadata rows, the tree), the guest waiting while the host reads both daemons, and
# prints what each part added to the daemon that ran it (also in OUT/phases.txt).
#
# --with-mergerfs (separate boots, versus virtiofsd): a third boot per run, virtiofsd 1.14
# sharing a mergerfs pool (the apt package, scripts/lib.sh's mergerfs_mount) of that boot's
# tmpfs, the way a mergerfs user serves a union to a guest today, and a second table of ours
# against it in OUT/bench-guest-mergerfs.md (with its runs in OUT/runs-mergerfs.md); its
# daemon-cpu-s is virtiofsd's and mergerfs' together (mergerfs-cpu-s: mergerfs' alone), its
# memory rows virtiofsd's alone.
#
# --fio-only runs the fio rows alone, --meta-only all but them (the metadata and tree rows).
#
# --count-requests (separate boots, versus virtiofsd): one more boot per daemon, untimed, both
# with --log-level debug, and a table of the FUSE requests each received (opcode: count) from
# their logs, in OUT/requests.md: whether the guest asks both daemons the same.
#
# --buffered runs the buffered-write rows instead (the writeback cache's: 25,000 dd writes of
# 4 KiB then sync, 1,600 of 64 KiB then sync, in MB/s; the source tree untarred then synced
# and a build-like loop writing 1,000 objects in four pieces each then sync, in files/s), and
# --writeback gives both daemons --writeback. docs/src/writeback.md's table is
#   scripts/bench-guest.sh --buffered --writeback --out .cache/bench-wb
#   scripts/bench-guest.sh --buffered --out .cache/bench-nowb
#
# --queues Q gives the device and union-virtiofsd Q request queues (a 6.11+ guest kernel uses
# them: --kernel-suite trixie-backports). --versus one-queue compares union-virtiofsd with Q
# queues against itself with one, instead of against virtiofsd (which serves one).
#
# Rows: fio (psync, O_DIRECT, 64 MiB file, 4 s each) seq read/write at 128 KiB, 1 MiB and
# 4 MiB, rand read/write 4 KiB at depth 1 and with --numjobs=4; create, stat, readdir and
# unlink of 5,000 files; a source tree (about 2,000 real headers from /usr/include) untarred,
# found, grepped and removed; the daemon's CPU seconds for the whole guest run; its memory
# (KiB, summed over its processes: the sandbox's supervisor and the serving child) right after
# start, after the scenario with the guest still connected (VmRSS, and split into anonymous,
# file-backed and shared pages, the last being guest memory it touched), and the peak (VmHWM).
# Not part of the test suite: it takes about 3 minutes per run on the 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. scripts/lib.sh

runs=3 out="$root/.cache/bench-guest" queues=1 suite="" versus=virtiofsd fio_only=0 extra=()
buffered=0 wb=() same_guest=0 boots=1 phases=0 meta_only=0 count_requests=0 with_mergerfs=0
while [ $# -gt 0 ]; do
    case "$1" in
    --runs) runs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --queues) queues=$2; shift 2 ;;
    --versus) versus=$2; shift 2 ;;
    --fio-only) fio_only=1; shift ;;
    --meta-only) meta_only=1; shift ;;
    --count-requests) count_requests=1; shift ;;
    --with-mergerfs) with_mergerfs=1; shift ;;
    --buffered) buffered=1; shift ;;
    --writeback) wb=(--writeback); shift ;;
    --kernel-suite) suite=$2; shift 2 ;;
    --same-guest) same_guest=1; shift ;;
    --boots) boots=$2; shift 2 ;;
    --phases) phases=1; shift ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown argument $1 (see the header of $0)" ;;
    esac
done
[ "$fio_only$meta_only" != 11 ] || die "--fio-only or --meta-only, not both"
mkdir -p "$out"
case $versus in
virtiofsd) head_ours=union-virtiofsd head_theirs="virtiofsd 1.14" ;;
one-queue) head_ours="union-virtiofsd, $queues queues" head_theirs="union-virtiofsd, 1 queue" ;;
*) die "--versus: virtiofsd or one-queue, not $versus" ;;
esac

bench_tools
command -v gnuplot >/dev/null || as_root apt-get install -y -qq --no-install-recommends gnuplot-nox >&2
if [ -n "$suite" ]; then
    kernel=$(GUEST_KERNEL_SUITE=$suite scripts/fetch-kernel.sh)
else
    kernel=$(scripts/fetch-kernel.sh)
fi
initrd=$(scripts/build-initramfs.sh)

scenario="$out/scenario.sh"
if [ "$buffered" = 1 ]; then
cat >"$scenario" <<'EOF'
M=${M:-/mnt}
B=/opt/bench/bin
now() { $B/date +%s.%N; }
rate() { awk "BEGIN {printf \"%.1f\", $1 / ($3 - $2)}" ; }
mbs() { awk "BEGIN {printf \"%.2f\", $1 / ($3 - $2) / 1000000}" ; }
t0=$(now); dd if=/dev/zero of=$M/w4k bs=4k count=25000 2>/dev/null; sync; t1=$(now)
echo "RESULT dd-4k-sync-MBps $(mbs 102400000 $t0 $t1)"
rm $M/w4k
t0=$(now); dd if=/dev/zero of=$M/w64k bs=64k count=1600 2>/dev/null; sync; t1=$(now)
echo "RESULT dd-64k-sync-MBps $(mbs 104857600 $t0 $t1)"
rm $M/w64k
files=$(tar -tf /opt/bench/tree.tar | wc -l)
t0=$(now); mkdir $M/src && tar -C $M/src -xf /opt/bench/tree.tar; sync; t1=$(now)
echo "RESULT untar-sync-files-per-s $(rate $files $t0 $t1)"
rm -rf $M/src
mkdir $M/obj
t0=$(now)
i=0
while [ $i -lt 1000 ]; do
    o=$M/obj/o$i.o
    head -c 3000 /opt/bench/tree.tar > $o
    head -c 5000 /opt/bench/tree.tar >> $o
    head -c 7000 /opt/bench/tree.tar >> $o
    head -c 1000 /opt/bench/tree.tar >> $o
    i=$((i+1))
done
sync
t1=$(now)
echo "RESULT build-1000-objects-per-s $(rate 1000 $t0 $t1)"
rm -rf $M/obj
EOF
else
echo "FIO_ONLY=$fio_only META_ONLY=$meta_only" >"$scenario"
cat >>"$scenario" <<'EOF'
M=${M:-/mnt}
B=/opt/bench/bin
now() { $B/date +%s.%N; }
# fio BS RW [JOBS]: prints MB/s (sum over jobs) from the terse output.
fio_row() {
    name=$1 bs=$2 rw=$3 jobs=${4:-1}
    r=$($B/fio --name=b --filename=$M/fio.dat --size=64M --direct=1 --ioengine=psync \
        --bs="$bs" --rw="$rw" --numjobs="$jobs" --group_reporting --runtime=4 --time_based \
        --minimal)
    case $rw in *read*) kb=$(echo "$r" | cut -d';' -f7) ;; *) kb=$(echo "$r" | cut -d';' -f48) ;; esac
    echo "RESULT $name $(awk "BEGIN {printf \"%.2f\", $kb / 1024}")"
}
if [ "$META_ONLY" = 0 ]; then
# Lay the file out once, so reads read data and writes overwrite.
$B/fio --name=lay --filename=$M/fio.dat --size=64M --rw=write --bs=1M --direct=1 --minimal >/dev/null
fio_row seq-read-128k 128k read
fio_row seq-read-1m 1m read
fio_row seq-read-4m 4m read
fio_row seq-write-128k 128k write
fio_row seq-write-1m 1m write
fio_row seq-write-4m 4m write
fio_row rand-read-4k 4k randread
fio_row rand-write-4k 4k randwrite
fio_row rand-read-4k-x4 4k randread 4
fio_row rand-write-4k-x4 4k randwrite 4
rm -f $M/fio.dat
fi
phase fio
[ "$FIO_ONLY" = 0 ] || exit 0
# ops/s of a timed shell step over N items.
rate() { awk "BEGIN {printf \"%.1f\", $2 / ($4 - $3)}" ; }
mkdir $M/m && cd $M/m
t0=$(now); i=0; while [ $i -lt 5000 ]; do : > f$i; i=$((i+1)); done; t1=$(now)
echo "RESULT create-5000 $(rate x 5000 $t0 $t1)"
t0=$(now); i=0; while [ $i -lt 5000 ]; do [ -e f$i ]; i=$((i+1)); done; t1=$(now)
echo "RESULT stat-5000 $(rate x 5000 $t0 $t1)"
t0=$(now); for k in 1 2 3; do find . -maxdepth 1 >/dev/null; done; t1=$(now)
echo "RESULT readdir-5000 $(rate x 15000 $t0 $t1)"
t0=$(now); i=0; while [ $i -lt 5000 ]; do rm f$i; i=$((i+1)); done; t1=$(now)
echo "RESULT unlink-5000 $(rate x 5000 $t0 $t1)"
cd $M && rmdir $M/m
phase meta
files=$(tar -tf /opt/bench/tree.tar | wc -l)
t0=$(now); mkdir src && tar -C src -xf /opt/bench/tree.tar; t1=$(now)
echo "RESULT tree-untar $(rate x $files $t0 $t1)"
t0=$(now); find src -type f | wc -l >/dev/null; t1=$(now)
echo "RESULT tree-find $(rate x $files $t0 $t1)"
t0=$(now); grep -r -l EINVAL src | wc -l >/dev/null; t1=$(now)
echo "RESULT tree-grep $(rate x $files $t0 $t1)"
t0=$(now); rm -rf src; t1=$(now)
echo "RESULT tree-rm $(rate x $files $t0 $t1)"
phase tree
EOF
fi
# The memory sample after the session: the scenario asks for it and waits (up to 60 s) until
# the host has read the daemon's memory and created .measured in the shared directory.
cat >"$scenario.full" <<'EOF'
phase() { :; }
measure() {
    echo "=== MEASURE ==="
    i=0
    while [ ! -e /mnt/.measured ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
}
trap measure EXIT
EOF
if [ "$same_guest" = 1 ]; then
    # The rounds are added per boot (same_guest_scenario).
    mv "$scenario" "$out/body.sh"
else
    cat "$scenario" >>"$scenario.full"
fi
mv "$scenario.full" "$scenario"

# mem_tree PID: "rss anon file shmem hwm" in KiB, summed over PID and its descendants (the
# sandbox's supervisor and the serving child).
mem_tree() {
    local p
    tree() { local c; echo "$1"; for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do tree "$c"; done; }
    for p in $(tree "$1"); do cat /proc/"$p"/status 2>/dev/null; done |
        awk '/^VmRSS:/ {r += $2} /^RssAnon:/ {a += $2} /^RssFile:/ {f += $2}
             /^RssShmem:/ {s += $2} /^VmHWM:/ {h += $2} END {print r + 0, a + 0, f + 0, s + 0, h + 0}'
}

# One guest run against backend command "$@" ({socket} and {dir} replaced); appends
# "name value" lines to $results. Label mergerfs: {dir} is a mergerfs pool of the tmpfs.
run_one() {
    local label=$1 rq=$2; shift 2
    local dir sock log console pid a shared mcpu=""
    dir=$(mktemp -d /tmp/uvfs-bench.XXXXXX)
    mount -t tmpfs -o size=1G tmpfs "$dir"
    sock="$dir.sock" log="$out/$label.daemon.log" console="$out/$label.console.log" shared=$dir
    if [ "$label" = mergerfs ]; then
        shared="$dir.pool"
        mergerfs_mount "$shared" "$dir"
    fi
    local args=()
    for a in "$@"; do a=${a//\{socket\}/$sock}; args+=("${a//\{dir\}/$shared}"); done
    # GNU time reports the daemon's CPU seconds once it exits (when the guest
    # powers off): wait4's usage includes the sandboxed child the daemon waited for.
    /usr/bin/time -f 'TIME %U %S' -o "$out/$label.time" "${args[@]}" >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
    [ -S "$sock" ] || die "$label: no socket"
    # The daemon is GNU time's child; its memory now, and once the scenario asks (see above).
    local daemon idle session watcher
    daemon=$(cat /proc/"$pid"/task/*/children | awk '{print $1; exit}')
    idle=$(mem_tree "$daemon")
    rm -f "$out/$label.session-mem"
    # The watcher below must not find the last run's console.
    : >"$console"
    (
        while ! tr -d '\r' <"$console" 2>/dev/null | grep -q '^=== MEASURE'; do
            kill -0 "$daemon" 2>/dev/null || exit 0
            sleep 0.1
        done
        mem_tree "$daemon" >"$out/$label.session-mem"
        for p in $daemon $(cat /proc/"$daemon"/task/*/children 2>/dev/null); do
            cat /proc/"$p"/smaps >"$out/$label.session-smaps.$p" 2>/dev/null || true
        done
        touch "$dir/.measured"
    ) &
    watcher=$!
    bash qemu/run-guest.sh --socket "$sock" --request-queues "$rq" --smp 2 --mem 1G --kernel "$kernel" \
        --initrd "$initrd" --extra-initrd "$bench_cpio" --script "$scenario" >"$console" 2>&1 || true
    wait "$watcher" 2>/dev/null || true
    session=$(cat "$out/$label.session-mem" 2>/dev/null || echo "0 0 0 0 0")
    # The daemon exits when the guest's QEMU goes; if not, stop it.
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    pkill -TERM -P "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    if [ "$label" = mergerfs ]; then
        mergerfs_umount "$shared"
        mcpu=$MERGERFS_CPU
    fi
    local cpu
    cpu=$(awk -v m="${mcpu:-0}" '/^TIME/ {print $2 + $3 + m}' "$out/$label.time")
    umount "$dir"; rmdir "$dir"; rm -f "$sock" "$sock.pid"
    { grep -a '^RESULT ' "$console" || true; } | tr -d '\r' | sed "s/^RESULT /$label /" >>"$results"
    echo "$label daemon-cpu-s ${cpu:-0}" >>"$results"
    [ -z "$mcpu" ] || echo "$label mergerfs-cpu-s $mcpu" >>"$results"
    # The daemon's memory (KiB, see the header): after start, after the scenario, the peak.
    mem_lines "$label" "$idle" "$session" >>"$results"
    grep -q '^=== SCENARIO EXIT 0' <(tr -d '\r' <"$console") || log "$label: scenario did not finish (see $console)"
}

# mem_lines LABEL IDLE SESSION: the memory rows (KiB, see the header) of one daemon, from
# mem_tree's "rss anon file shmem hwm" right after start (IDLE) and after the scenario (SESSION).
mem_lines() {
    local label=$1
    set -- $2 $3
    echo "$label idle-rss-kib $1"
    echo "$label idle-anon-kib $2"
    echo "$label session-rss-kib $6"
    echo "$label session-anon-kib $7"
    echo "$label session-file-kib $8"
    echo "$label session-shmem-kib $9"
    echo "$label peak-rss-kib ${10}"
}

# same_guest_scenario BOOT: the scenario of boot BOOT with both shares in it: virtiofsd's (tag
# "theirs") on /mnt2, then N rounds of the scenario's body on each share, each in a subshell
# from the share's root; the order swaps every round, counting on from the boots before (with
# one round per boot, every other boot starts with virtiofsd).
same_guest_scenario() {
    local i who m
    cat "$scenario"
    echo 'mkdir -p /mnt2 && mount -t virtiofs theirs /mnt2 || { echo "=== MOUNT FAILED theirs"; exit 1; }'
    if [ "$phases" = 1 ]; then
        # phase NAME: tell the host (see phase_watcher; on stderr, which goes to the console
        # at once, where the body's stdout goes through sed's buffer) and wait (up to 60 s)
        # until it has read both daemons' guest memory and created .phase-WHO-NAME-ROUND on
        # virtiofsd's share (which lets the guest cache no missing name).
        cat <<'EOF'
phase() {
    echo "=== PHASE $WHO $1 $ROUND ===" >&2
    i=0
    while [ ! -e "/mnt2/.phase-$WHO-$1-$ROUND" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
}
WHO=none ROUND=0 phase start
EOF
    fi
    echo 'body() {'
    cat "$out/body.sh"
    echo '}'
    for i in $(seq $((($1 - 1) * runs + 1)) $(($1 * runs))); do
        for who in $(round_order "$i"); do
            m=/mnt; [ "$who" = theirs ] && m=/mnt2
            echo "echo 'round $i: $who'"
            echo "(cd $m && M=$m WHO=$who ROUND=$i body) | sed 's/^RESULT /RESULT $who /'"
        done
    done
}

# phase_watcher BOOT CONSOLE: for each "=== PHASE WHO NAME ROUND" line the guest prints, one
# "BOOT WHO NAME ROUND OURS_KIB THEIRS_KIB" line in OUT/phases.raw (the guest memory each daemon
# has mapped: its shared pages, mem_tree's RssShmem), then the file the guest waits for; ends
# with this daemon.
phase_watcher() {
    local boot=$1 console=$2 seen=0 lines n
    while kill -0 "${SIDE_DAEMONS[0]}" 2>/dev/null; do
        lines=$(tr -d '\r' <"$console" 2>/dev/null | grep -a '^=== PHASE ' || true)
        n=$(printf '%s' "$lines" | grep -c '^' || true)
        while [ "$seen" -lt "$n" ]; do
            seen=$((seen + 1))
            set -- $(printf '%s\n' "$lines" | sed -n "${seen}p")
            echo "$boot $3 $4 $5 $(mem_tree "${SIDE_DAEMONS[0]}" | cut -d' ' -f4)" \
                "$(mem_tree "${SIDE_DAEMONS[1]}" | cut -d' ' -f4)" >>"$out/phases.raw"
            touch "${SIDE_DIRS[1]}/.phase-$3-$4-$5"
        done
        sleep 0.1
    done
}

# run_same BOOT: one boot, both daemons side by side (see --same-guest in the header).
run_same() {
    local console="$out/same-guest.console.log" idle=() watcher who i p
    side_by_side_start "$out" -o minfreespace=0 "${wb[@]}" "${extra[@]}" -- "${wb[@]}"
    for i in 0 1; do idle+=("$(mem_tree "${SIDE_DAEMONS[$i]}")"); done
    rm -f "$out/ours.session-mem" "$out/theirs.session-mem"
    # The watcher below must not find the last boot's console.
    : >"$console"
    (
        while ! tr -d '\r' <"$console" 2>/dev/null | grep -q '^=== MEASURE'; do
            kill -0 "${SIDE_DAEMONS[0]}" 2>/dev/null || exit 0
            sleep 0.1
        done
        i=0
        for who in ours theirs; do
            mem_tree "${SIDE_DAEMONS[$i]}" >"$out/$who.session-mem"
            for p in ${SIDE_DAEMONS[$i]} $(cat /proc/"${SIDE_DAEMONS[$i]}"/task/*/children 2>/dev/null); do
                cat /proc/"$p"/smaps >"$out/$who.session-smaps.$p" 2>/dev/null || true
            done
            i=$((i + 1))
        done
        touch "${SIDE_DIRS[0]}/.measured"
    ) &
    watcher=$!
    local phaser=""
    if [ "$phases" = 1 ]; then
        phase_watcher "$1" "$console" &
        phaser=$!
    fi
    same_guest_scenario "$1" >"$out/same-guest.sh"
    side_by_side_guest --kernel "$kernel" --initrd "$initrd" --extra-initrd "$bench_cpio" \
        --script "$out/same-guest.sh" >"$console" 2>&1 || true
    wait "$watcher" 2>/dev/null || true
    side_by_side_stop
    [ -z "$phaser" ] || wait "$phaser" 2>/dev/null || true
    grep -a '^RESULT ' "$console" | tr -d '\r' | sed 's/^RESULT //' >>"$results"
    i=0
    for who in ours theirs; do
        echo "$who daemon-cpu-s $(awk '/^TIME/ {print $2 + $3}' "$out/$who.time")" >>"$results"
        mem_lines "$who" "${idle[$i]}" "$(cat "$out/$who.session-mem" 2>/dev/null || echo 0 0 0 0 0)" >>"$results"
        i=$((i + 1))
    done
    grep -q '^=== SCENARIO EXIT 0' <(tr -d '\r' <"$console") || log "scenario did not finish (see $console)"
}

results="$out/results.txt"
: >"$results"
qargs=()
[ "$queues" -gt 1 ] && qargs=(--num-request-queues "$queues")
if [ "$phases" = 1 ] && { [ "$same_guest" = 0 ] || [ "$buffered" = 1 ]; }; then
    die "--phases: with --same-guest, not --buffered"
fi
rm -f "$out/phases.raw"
if [ "$count_requests" = 1 ] && { [ "$same_guest" = 1 ] || [ "$versus" != virtiofsd ]; }; then
    die "--count-requests: separate boots, versus virtiofsd"
fi
if [ "$with_mergerfs" = 1 ] && { [ "$same_guest" = 1 ] || [ "$versus" != virtiofsd ]; }; then
    die "--with-mergerfs: separate boots, versus virtiofsd"
fi
if [ "$same_guest" = 1 ]; then
    [ "$versus" = virtiofsd ] && [ "$queues" = 1 ] || die "--same-guest: one queue, versus virtiofsd"
    for b in $(seq "$boots"); do
        log "boot $b/$boots: both daemons, $runs rounds"
        run_same "$b"
    done
    runs=0
fi
for i in $(seq "$runs"); do
    for who in $(round_order "$i"); do
        log "run $i/$runs: $who"
        if [ "$who" = ours ]; then
            run_one ours "$queues" "$ours" --socket-path '{socket}' --shared-dir '{dir}' -o minfreespace=0 "${wb[@]}" "${qargs[@]}" "${extra[@]}"
        elif [ "$versus" = one-queue ]; then
            run_one theirs 1 "$ours" --socket-path '{socket}' --shared-dir '{dir}' -o minfreespace=0 "${wb[@]}" "${extra[@]}"
        else
            run_one theirs 1 "$vfsd" --socket-path '{socket}' --shared-dir '{dir}' "${wb[@]}"
        fi
    done
    if [ "$with_mergerfs" = 1 ]; then
        log "run $i/$runs: mergerfs + virtiofsd"
        run_one mergerfs 1 "$vfsd" --socket-path '{socket}' --shared-dir '{dir}' "${wb[@]}"
    fi
done

if [ "$count_requests" = 1 ]; then
    timed=$results results="$out/untimed.txt" counts="$out/requests.txt" set=full
    [ "$fio_only" = 0 ] || set=fio-only
    [ "$meta_only" = 0 ] || set=meta-only
    [ "$buffered" = 0 ] || set=buffered
    : >"$results"
    : >"$counts"
    for who in ours theirs; do
        log "request counts: $who"
        if [ "$who" = ours ]; then
            run_one ours "$queues" "$ours" --socket-path '{socket}' --shared-dir '{dir}' -o minfreespace=0 "${wb[@]}" "${qargs[@]}" --log-level debug "${extra[@]}"
        else
            run_one theirs 1 "$vfsd" --socket-path '{socket}' --shared-dir '{dir}' "${wb[@]}" --log-level debug
        fi
        opcodes "$out/$who.daemon.log" | sed "s/^/$set $who /" >>"$counts"
    done
    results=$timed
fi

# Medians and ratios; rows where less is better (CPU, memory) are inverted so that > 1 is ours ahead.
grep -v '^mergerfs ' "$results" >"$out/pair.txt" || true
median_table "$head_ours" "$head_theirs" 'cpu|rss|anon|file|shmem' "$out/pair.txt" 2>"$out/ratios.dat" | tee "$out/bench-guest.md"
# Each run's ratio, their geometric mean and its standard error (OUT/runs.md).
run_ratios 'cpu|rss|anon|file|shmem' "$out/pair.txt" | tee "$out/runs.md"
if [ "$with_mergerfs" = 1 ]; then
    # Ours against mergerfs + virtiofsd: its lines as "theirs".
    awk '($1 == "ours" || $1 == "mergerfs") && $2 != "mergerfs-cpu-s" {print ($1 == "ours" ? "ours" : "theirs"), $2, $3}' \
        "$results" >"$out/pair.txt"
    median_table "$head_ours" "mergerfs + virtiofsd 1.14" 'cpu|rss|anon|file|shmem' "$out/pair.txt" \
        2>/dev/null | tee "$out/bench-guest-mergerfs.md"
    run_ratios 'cpu|rss|anon|file|shmem' "$out/pair.txt" | tee "$out/runs-mergerfs.md"
fi

gnuplot <<EOF
set terminal png size 1000,500
set output "$out/bench-guest.png"
set style data histograms
set style fill solid
set yrange [0:*]
set ylabel "$head_ours / $head_theirs (higher is better)"
set xtics rotate by -45
set arrow from graph 0, first 1.1 to graph 1, first 1.1 nohead dt 2
plot "$out/ratios.dat" using 2:xtic(1) title "ratio (dashed: 1.10)"
EOF
log "table: $out/bench-guest.md, plot: $out/bench-guest.png"
if [ "$count_requests" = 1 ]; then
    request_table "$head_ours" "$head_theirs" "$counts" | tee "$out/requests.md"
fi
if [ "$phases" = 1 ]; then
    # Each line's count for the daemon that ran the part, less its count at the line before.
    awk 'BEGIN {
             print "| boot | round | ran | part | ours: guest KiB | virtiofsd: guest KiB | added |"
             print "|---|---|---|---|---:|---:|---:|"
         }
         $1 != b { b = $1; o = 0; t = 0 }
         { add = $2 == "ours" ? $5 - o : $2 == "theirs" ? $6 - t : ""
           printf "| %s | %s | %s | %s | %s | %s | %s |\n", $1, $4, $2, $3, $5, $6, add
           o = $5; t = $6 }' "$out/phases.raw" | tee "$out/phases.txt"
fi
