#!/usr/bin/env bash
# fsx as a new user would run it: boots the test guest (QEMU TCG, Debian 6.12 kernel, 2 vCPUs,
# 1 GiB) against union-virtiofsd (release build, default sandbox and seccomp) and against
# virtiofsd 1.14 (cargo install'ed into $UVFS_TOOLS if absent; its default --cache auto), each
# serving a fresh 1 GiB tmpfs, and runs fsx (cargo install fsx 0.3.2, packed by
# scripts/build-tools-initrd.sh fsx) with 20,000 operations and a fixed seed: its default mix
# (reads, writes, truncates, mmap reads and writes) and qemu/fsx-all.toml (every operation it
# has, each as likely: close/reopen, invalidation, fsync, fallocate, punch hole, sendfile,
# fadvise, copy_file_range too). One guest boot per mix and daemon, alternating the two
# daemons for N runs; prints the medians: fsx's run time in the guest (seconds) and the
# daemon's CPU seconds for the boot (GNU time: user + system, the sandboxed child included),
# and the ratio (virtiofsd / ours, so above 1 is ours faster or leaner), with the runs each
# row had ours ahead; then each run's ratio, their geometric mean and its standard error
# (OUT/runs.md).
#
#   scripts/bench-fsx.sh [--runs N] [--ops N] [--out DIR] [--xattr] [--same-guest]
#                        [--mixes default,all,OP,...] [--count-requests]
#                        [-- extra union-virtiofsd args]
#
# --same-guest: one boot for all runs, both daemons side by side in it (two virtio-fs devices,
# each daemon serving its own tmpfs), fsx run on each in turn, N rounds, the order swapped
# every round: the guest, its kernel's state and the host's load are the same for both, where
# separate boots differ by up to 15% in fsx's time for the same daemon. The CPU row is then
# each daemon's CPU seconds for the whole boot (each worked only while fsx ran on its share).
#
# --mixes picks the mixes (default: default,all); any other name is one of fsx's operations
# (fsync, punch_hole, close_open, ...): the default mix with that operation added at twice
# the weight of each of the others (fsx gives those 10 each), to find which one costs a daemon the time;
# no-OP is the default mix without that operation (mapread, mapwrite, read, write or truncate).
#
# --count-requests: one more boot per mix and daemon, untimed, both daemons with --log-level
# debug, and a table of the FUSE requests each received (opcode: count), from their logs.
#
# Neither daemon serves extended attributes by default (both answer the guest's first GETXATTR
# ENOSYS, and it asks no more). --xattr gives both --xattr: a guest then asks for
# security.capability before a truncate, fallocate or copy whenever it refreshed the file's
# attributes since the last one (FUSE clears S_NOSEC on every refresh).
#
# Not part of the test suite: about 6 minutes per run on the 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. scripts/lib.sh

runs=3 ops=20000 out="$root/.cache/bench-fsx" extra=() theirs_extra=() mixes=default,all count_requests=0 same_guest=0
while [ $# -gt 0 ]; do
    case "$1" in
    --runs) runs=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --xattr) theirs_extra=(--xattr); extra+=(--xattr); shift ;;
    --mixes) mixes=$2; shift 2 ;;
    --count-requests) count_requests=1; shift ;;
    --same-guest) same_guest=1; shift ;;
    --) shift; extra+=("$@"); break ;;
    *) die "unknown argument $1 (see the header of $0)" ;;
    esac
done
mkdir -p "$out"
bench_tools
kernel=$(scripts/fetch-kernel.sh)
initrd=$(scripts/build-initramfs.sh)
fsx_cpio=$(scripts/build-tools-initrd.sh fsx)

# scenario MIX [DIR LABEL]: fsx with that mix in DIR (default: the share on /mnt, where the
# scenario starts), timed with coreutils' date, must end "A-OK"; prints "RESULT [LABEL ]fsx-MIX-s T".
scenario() {
    local cfg="" where=${2:-.} label=${3:+$3 }
    case "$1" in
    default) ;;
    all) cfg="-f /opt/tools/fsx-all.toml" ;;
    *) cfg="-f /tmp/mix.toml" ;;
    esac
    # no-OP: the default mix without that operation.
    local weights="$1 = 20.0"
    case "$1" in
    no-*) weights="${1#no-} = 0.0" ;;
    esac
    cat <<EOF
export PATH=/opt/tools/bin:\$PATH
printf '[weights]\n$weights\n' > /tmp/mix.toml
t0=\$(/opt/bench/bin/date +%s.%N)
fsx -N $ops -S 7 -q $cfg -P /tmp $where/fsx-file > /tmp/out 2>&1
rc=\$?
t1=\$(/opt/bench/bin/date +%s.%N)
rm -f $where/fsx-file
if [ \$rc = 0 ] && grep -q 'A-OK' /tmp/out; then
    echo "RESULT ${label}fsx-$1-s \$(awk "BEGIN {printf \\"%.2f\\", \$t1 - \$t0}")"
else
    echo "FSX FAILED"; tail -20 /tmp/out
fi
EOF
}

# same_guest_scenario: mounts virtiofsd's share (tag "theirs") on /mnt2, then N rounds of every
# mix on each share, the order swapped every round.
same_guest_scenario() {
    local i mix who
    echo 'mkdir -p /mnt2 && mount -t virtiofs theirs /mnt2 || { echo "FSX FAILED: cannot mount theirs"; exit 1; }'
    for i in $(seq "$runs"); do
        for mix in ${mixes//,/ }; do
            for who in $(round_order "$i"); do
                echo "echo 'round $i: $mix on $who'"
                if [ "$who" = ours ]; then scenario "$mix" /mnt ours; else scenario "$mix" /mnt2 theirs; fi
            done
        done
    done
    echo 'umount /mnt2'
}

# run_one LABEL MIX CMD...: one guest boot against backend CMD ({socket} and {dir} replaced).
run_one() {
    local label=$1 mix=$2; shift 2
    local dir sock console pid a cpu
    dir=$(mktemp -d /tmp/uvfs-fsx.XXXXXX)
    mount -t tmpfs -o size=1G tmpfs "$dir"
    sock="$dir.sock" console="$out/$label-$mix.console.log"
    scenario "$mix" >"$out/$mix.sh"
    local args=()
    for a in "$@"; do a=${a//\{socket\}/$sock}; args+=("${a//\{dir\}/$dir}"); done
    # GNU time: user and system seconds, minor page faults, voluntary and involuntary context
    # switches; one line per boot in LABEL-MIX.time.
    /usr/bin/time -a -f 'TIME %U %S %R %w %c' -o "$out/$label-$mix.time" "${args[@]}" \
        >"$out/$label.daemon.log" 2>&1 &
    pid=$!
    for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
    [ -S "$sock" ] || die "$label: no socket"
    bash qemu/run-guest.sh --socket "$sock" --smp 2 --mem 1G --kernel "$kernel" --initrd "$initrd" \
        --extra-initrd "$bench_cpio" --extra-initrd "$fsx_cpio" --script "$out/$mix.sh" \
        >"$console" 2>&1 || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    pkill -TERM -P "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    cpu=$(awk '/^TIME/ {c = $2 + $3} END {print c}' "$out/$label-$mix.time")
    umount "$dir"; rmdir "$dir"; rm -f "$sock" "$sock.pid"
    grep -q '^RESULT ' <(tr -d '\r' <"$console") || die "$label $mix: fsx failed (see $console)"
    grep -a '^RESULT ' "$console" | tr -d '\r' | sed "s/^RESULT /$label /" >>"$results"
    echo "$label cpu-$mix-s ${cpu:-0}" >>"$results"
}

# run_same: one boot, both daemons side by side (ours on tag "share", virtiofsd on "theirs").
run_same() {
    local console="$out/same-guest.console.log" who
    same_guest_scenario >"$out/same-guest.sh"
    side_by_side_start "$out" -o minfreespace=0 "${extra[@]}" -- "${theirs_extra[@]}"
    side_by_side_guest --kernel "$kernel" --initrd "$initrd" --extra-initrd "$bench_cpio" \
        --extra-initrd "$fsx_cpio" --script "$out/same-guest.sh" >"$console" 2>&1 || true
    side_by_side_stop
    tr -d '\r' <"$console" | grep -q '^FSX FAILED' && die "fsx failed (see $console)"
    [ "$(tr -d '\r' <"$console" | grep -c '^RESULT ')" -eq $((2 * runs * $(wc -w <<<"${mixes//,/ }"))) ] ||
        die "fsx did not finish every round (see $console)"
    tr -d '\r' <"$console" | sed -n 's/^RESULT //p' >>"$results"
    for who in ours theirs; do
        awk -v w="$who" '/^TIME/ {print w, "cpu-boot-s", $2 + $3}' "$out/$who.time" >>"$results"
    done
}

results="$out/results.txt"
: >"$results"
if [ "$same_guest" = 1 ]; then
    log "one boot, both daemons, $runs rounds of $mixes"
    run_same
    runs=0
fi
for i in $(seq "$runs"); do
    for mix in ${mixes//,/ }; do
        for who in $(round_order "$i"); do
            log "run $i/$runs: $mix, $who"
            if [ "$who" = ours ]; then
                run_one ours "$mix" "$ours" --socket-path '{socket}' --shared-dir '{dir}' -o minfreespace=0 "${extra[@]}"
            else
                run_one theirs "$mix" "$vfsd" --socket-path '{socket}' --shared-dir '{dir}' "${theirs_extra[@]}"
            fi
        done
    done
done

if [ "$count_requests" = 1 ]; then
    counts="$out/requests.txt"
    : >"$counts"
    for mix in ${mixes//,/ }; do
        for who in ours theirs; do
            log "request counts: $mix, $who"
            results="$out/untimed.txt"
            if [ "$who" = ours ]; then
                run_one ours "$mix" "$ours" --socket-path '{socket}' --shared-dir '{dir}' -o minfreespace=0 --log-level debug "${extra[@]}"
            else
                run_one theirs "$mix" "$vfsd" --socket-path '{socket}' --shared-dir '{dir}' --log-level debug "${theirs_extra[@]}"
            fi
            opcodes "$out/$who.daemon.log" | sed "s/^/$mix $who /" >>"$counts"
        done
    done
    results="$out/results.txt"
    request_table union-virtiofsd "virtiofsd 1.14" "$counts" | tee "$out/requests.md"
fi

# Medians; every row is seconds, so the ratio is virtiofsd's / ours (above 1: ours ahead).
median_table union-virtiofsd "virtiofsd 1.14" . "$results" 2>/dev/null | tee "$out/bench-fsx.md"
run_ratios . "$results" | tee "$out/runs.md"
log "table: $out/bench-fsx.md"
