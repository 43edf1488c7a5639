#!/usr/bin/env bash
# FUSE passthrough against the native filesystem, pair by pair (issue 46): one file on a
# branch (tmpfs, or ext4 on a loop device with --disk), the host mount of this daemon over it
# with passthrough.io=rw, and PAIRS runs of the same dd on the branch file directly and
# through the mount, back to back in alternating order, so both sides of a pair meet the same
# machine. Prints each pair's ratio (through the mount / directly, MiB/s; above 1: the mount
# was faster) as the median with its range and quartiles. Finer than bench-host.sh's rows for
# small blocks, where one dd takes milliseconds and the machine's noise from one minute to
# the next is larger than the difference.
#
#   scripts/bench-passthrough.sh [--pairs N] [--bs 4k] [--op read|write] [--mib M]
#                                [--disk] [--bin PATH] [--mergerfs PATH]
#
# --mergerfs: a mergerfs with FUSE passthrough (2.42 or later, built from its source; the
# Debian 2.33 has none) mounted over the same branch with passthrough.io=rw: each pair is
# then a triple (native, ours, mergerfs, in rotating order), and its ratio to native and its
# CPU seconds for the run are printed too.
#
# O_DIRECT on both sides (iflag=direct / oflag=direct conv=notrunc: no page cache of the
# FUSE file; on tmpfs the data is copied from the page cache either way). Needs root. Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

pairs=40 bs=4k op=read mib=64 disk=0 bin="" mergerfs=""
while [ $# -gt 0 ]; do
    case "$1" in
    --pairs) pairs=$2; shift 2 ;;
    --bs) bs=$2; shift 2 ;;
    --op) op=$2; shift 2 ;;
    --mib) mib=$2; shift 2 ;;
    --disk) disk=1; shift ;;
    --bin) bin=$2; shift 2 ;;
    --mergerfs) mergerfs=$2; shift 2 ;;
    *) die "unknown argument $1 (see the header of $0)" ;;
    esac
done
case "$op" in read | write) ;; *) die "--op is read or write, not $op" ;; esac
[ "$(id -u)" = 0 ] || die "needs root (mounts)"
[ -n "$bin" ] || bin=$(release_daemon)

work=$(mktemp -d /tmp/uvfs-bench-pt.XXXXXX)
branch="$work/branch" pool="$work/pool" mpool="$work/mpool" daemon_pid="" mergerfs_pid=""
loopdev=""
cleanup() {
    if [ -n "$daemon_pid" ]; then
        umount "$pool" 2>/dev/null || umount -l "$pool" 2>/dev/null || true
        wait "$daemon_pid" 2>/dev/null || true
    fi
    if [ -n "$mergerfs_pid" ]; then
        umount "$mpool" 2>/dev/null || umount -l "$mpool" 2>/dev/null || true
        wait "$mergerfs_pid" 2>/dev/null || true
    fi
    umount "$branch" 2>/dev/null || true
    [ -z "$loopdev" ] || losetup -d "$loopdev" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$branch" "$pool" "$mpool"
if [ "$disk" = 1 ]; then
    truncate -s $((mib + 256))M "$work/disk.img"
    mkfs.ext4 -q -F "$work/disk.img"
    loopdev=$(losetup -f --show --direct-io=on "$work/disk.img")
    mount "$loopdev" "$branch"
else
    mount -t tmpfs -o size=$((mib + 64))M tmpfs "$branch"
fi
dd if=/dev/zero of="$branch/f" bs=1M count="$mib" status=none
"$bin" mount "$pool" --branch "$branch" -o "minfreespace=0,passthrough.io=rw" --log-level debug \
    >"$work/daemon.log" 2>&1 &
daemon_pid=$!
wait_mount "$pool" "$daemon_pid" "$work/daemon.log" "the daemon"
if [ -n "$mergerfs" ]; then
    "$mergerfs" -f -o "allow_other,minfreespace=0,cache.files=auto-full,passthrough.io=rw" \
        "$branch" "$mpool" >"$work/mergerfs.log" 2>&1 &
    mergerfs_pid=$!
    wait_mount "$mpool" "$mergerfs_pid" "$work/mergerfs.log" mergerfs
    log "$("$mergerfs" --version 2>&1 | head -1)"
fi

# rate PATH: one dd of MIB MiB in BS blocks on PATH, its MiB/s.
rate() {
    local count line
    count=$((mib * 1048576 / $(numfmt --from=iec "${bs^^}")))
    if [ "$op" = read ]; then
        line=$(LC_ALL=C dd if="$1" of=/dev/null bs="$bs" count="$count" iflag=direct 2>&1 | grep copied)
    else
        line=$(LC_ALL=C dd if=/dev/zero of="$1" bs="$bs" count="$count" oflag=direct conv=notrunc 2>&1 | grep copied)
    fi
    awk -v l="$line" 'BEGIN { n = split(l, f, " "); printf "%.1f\n", f[1] / f[n - 3] / 1048576 }'
}

log "$pairs pairs of $op, $bs blocks, $mib MiB, on $([ "$disk" = 1 ] && echo "ext4 (loop)" || echo tmpfs)"
# One warm-up of each side, not counted.
rate "$branch/f" >/dev/null
rate "$pool/f" >/dev/null
[ -z "$mergerfs" ] || rate "$mpool/f" >/dev/null
m_cpu0=$([ -z "$mergerfs" ] || proc_cpu "$mergerfs_pid")
ratios=() natives=() mounts=() mratios=() merged=()
for i in $(seq "$pairs"); do
    sides=(n m)
    [ -z "$mergerfs" ] || sides=(n m g)
    # Rotate (and reverse every other time) the order of the sides.
    k=${#sides[@]}
    order=()
    for j in $(seq 0 $((k - 1))); do order+=("${sides[$(((i + j) % k))]}"); done
    [ $((i % 2)) -eq 0 ] && mapfile -t order < <(printf '%s\n' "${order[@]}" | tac)
    for side in "${order[@]}"; do
        case "$side" in
        n) n=$(rate "$branch/f") ;;
        m) m=$(rate "$pool/f") ;;
        g) g=$(rate "$mpool/f") ;;
        esac
    done
    natives+=("$n") mounts+=("$m")
    ratios+=("$(awk -v m="$m" -v n="$n" 'BEGIN { printf "%.3f", m / n }')")
    if [ -n "$mergerfs" ]; then
        merged+=("$g")
        mratios+=("$(awk -v m="$g" -v n="$n" 'BEGIN { printf "%.3f", m / n }')")
    fi
done
# Passthrough in use: the daemon's debug log has no READ (15) or WRITE (16) request.
rw=$(grep -cE " opcode=(15|16) " "$work/daemon.log" || true)
[ "$rw" = 0 ] || die "$rw READ/WRITE requests reached the daemon: passthrough was not in use (log: $work/daemon.log)"
summary() {
    printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END {
        printf "median %s [%s–%s], quartiles %s–%s", a[int((NR + 1) / 2)], a[1], a[NR],
            a[int((NR + 3) / 4)], a[int((3 * NR + 1) / 4)] }'
}
echo "native MiB/s: $(summary "${natives[@]}")"
echo "passthrough MiB/s: $(summary "${mounts[@]}")"
echo "passthrough / native, per pair: $(summary "${ratios[@]}")"
if [ -n "$mergerfs" ]; then
    echo "mergerfs passthrough MiB/s: $(summary "${merged[@]}")"
    echo "mergerfs passthrough / native, per triple: $(summary "${mratios[@]}")"
    echo "mergerfs CPU s for its runs: $(awk -v a="$m_cpu0" -v b="$(proc_cpu "$mergerfs_pid")" 'BEGIN { printf "%.2f", b - a }')"
fi
