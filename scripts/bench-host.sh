#!/usr/bin/env bash
# Throughput of the host mount (`union-virtiofsd mount`) against the native filesystem and
# mergerfs (the Debian package), following mergerfs's benchmarking guide
# (mkdocs/docs/benchmarking.md): one branch; nullrw=true first (the transport alone), then a
# tmpfs branch, then a disk-backed one (ext4 on a loop device, direct-io=on, over an image
# file on the root filesystem); dd with O_DIRECT (oflag=direct, iflag=direct: no page cache
# on either side; on the disk branch the guide's nocache variant, see dd_run) at several
# block sizes. Ours runs with passthrough.io=off and =rw (FUSE passthrough; not with nullrw,
# which turns it off). Each round mounts every setup afresh, in alternating
# order; the table gives the median MiB/s of the rounds with their range, and the daemon's
# CPU seconds (user + system, /proc/PID/stat) per GiB moved.
#
#   scripts/bench-host.sh [--quick] [--rounds N] [--bin PATH] [--out DIR] [--table-only]
#
# --table-only: no runs, the table again from DIR/results.txt.
# --quick: 2 rounds of 8 to 128 MiB per dd (under a minute); the default, 5 rounds of 64 MiB
# (4 KiB blocks) to 1 GiB, takes about 3 to 5 minutes on 2 cores. --bin: the daemon to run (default: a release build of this tree).
# Prints a Markdown table to stdout and to DIR/bench-host.md. Needs root. Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. scripts/lib.sh

out="$root/.cache/bench-host"
rounds=5 quick=0 bin="" table_only=0
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1; rounds=2; shift ;;
    --rounds) rounds=$2; shift 2 ;;
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
[ -n "$bin" ] || bin=$(release_daemon)
command -v mergerfs >/dev/null || as_root apt-get install -y -qq --no-install-recommends mergerfs >&2

# Block sizes and the MiB each dd moves at that size.
if [ $quick -eq 1 ]; then
    sizes=("4k 8" "128k 64" "1M 128")
else
    sizes=("4k 64" "128k 512" "1M 1024")
fi

maxmib=$(printf '%s\n' "${sizes[@]}" | awk '$2 > m { m = $2 } END { print m }')
work=$(mktemp -d /tmp/uvfs-bench-host.XXXXXX)
tmpfs_dir="$work/tmpfs" disk_dir="$work/disk" pool="$work/pool"
mkdir -p "$tmpfs_dir" "$disk_dir" "$pool"
mount -t tmpfs -o size=1100M tmpfs "$tmpfs_dir"
truncate -s 1500M "$work/disk.img"
mkfs.ext4 -q -F "$work/disk.img"
# direct-io=on: the loop device reads and writes the image without the page cache of the
# root filesystem, so a read that misses the branch's cache goes to the disk.
loopdev=$(losetup -f --show --direct-io=on "$work/disk.img")
mount "$loopdev" "$disk_dir"
daemon_pid=""
cleanup() {
    [ -z "$daemon_pid" ] || { umount -l "$pool" 2>/dev/null || true; kill "$daemon_pid" 2>/dev/null || true; }
    umount "$tmpfs_dir" 2>/dev/null || true
    umount "$disk_dir" 2>/dev/null || true
    [ -z "${loopdev:-}" ] || losetup -d "$loopdev" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# mount_setup WHO BRANCH NULLRW: mounts WHO (mergerfs, ours-off, ours-pt) over BRANCH on
# $pool (native: none); sets daemon_pid.
mount_setup() {
    local who=$1 branch=$2 nullrw=$3
    case "$who" in
    native) daemon_pid=""; return ;;
    mergerfs)
        mergerfs -f -o "allow_other,minfreespace=0,nullrw=$nullrw" "$branch" "$pool" \
            >"$out/mergerfs.log" 2>&1 &
        ;;
    ours-*)
        local pt=off
        [ "$who" = ours-pt ] && pt=rw
        "$bin" mount "$pool" --branch "$branch" \
            -o "minfreespace=0,nullrw=$nullrw,passthrough.io=$pt" >"$out/$who.log" 2>&1 &
        ;;
    esac
    daemon_pid=$!
    wait_mount "$pool" "$daemon_pid" "$out/$who.log" "$who"
}

umount_setup() {
    [ -n "$daemon_pid" ] || return 0
    umount "$pool" 2>/dev/null || umount -l "$pool"
    for _ in $(seq 200); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.05; done
    wait "$daemon_pid" 2>/dev/null || true
    daemon_pid=""
}

# dd_run OP BS MIB DIR KIND BRANCH: one dd, writing or reading DIR/f; prints "MiB/s
# CPU-seconds". On the disk branch O_DIRECT does not go through mergerfs 2.33 (the kernel
# sends the daemon O_DIRECT, and the daemon's unaligned buffers ext4 refuses, EINVAL; ours
# places them on a page, tests/host/direct_io.rs), so there (kind disk) every side runs the
# guide's own dd lines: writes with oflag=nocache conv=fdatasync, reads with iflag=nocache
# after the branch file's page cache is dropped (dd count=0 oflag=nocache on it). Passthrough
# differs there: its nocache is posix_fadvise(DONTNEED) on the FUSE file, which FUSE does not
# pass to the backing file (no such request, and passthrough forwards no fadvise), so the
# writes stay dirty until the fdatasync where natively each block's writeback starts at once.
# Kind disk-direct runs the same branch with O_DIRECT, the same on every side (no mergerfs).
dd_run() {
    local op=$1 bs=$2 mib=$3 dir=$4 kind=$5 branch=$6 count c0 c1 line wflag=oflag=direct rflag=iflag=direct
    count=$(( mib * 1048576 / $(numfmt --from=iec "${bs^^}") ))
    if [ "$kind" = disk ]; then
        wflag=oflag=nocache rflag=iflag=nocache
        [ "$op" = read ] && dd of="$branch/f" oflag=nocache conv=notrunc,fdatasync count=0 status=none
    fi
    c0=$([ -n "$daemon_pid" ] && proc_cpu "$daemon_pid" || echo 0)
    if [ "$op" = write ]; then
        line=$(LC_ALL=C dd if=/dev/zero of="$dir/f" bs="$bs" count="$count" "$wflag" conv=notrunc,fdatasync 2>&1 | grep copied)
    else
        line=$(LC_ALL=C dd if="$dir/f" of=/dev/null bs="$bs" count="$count" "$rflag" 2>&1 | grep copied)
    fi
    c1=$([ -n "$daemon_pid" ] && proc_cpu "$daemon_pid" || echo 0)
    awk -v l="$line" -v c0="$c0" -v c1="$c1" 'BEGIN {
        n = split(l, f, " "); printf "%.0f %.3f\n", f[1] / f[n - 3] / 1048576, c1 - c0 }'
}

# Setups per branch kind: nullrw has no native run and no passthrough (nullrw turns it off);
# disk-direct no mergerfs (2.33 cannot pass O_DIRECT onto ext4, see dd_run).
setups_of() {
    case "$1" in
    nullrw) echo mergerfs ours-off ;;
    disk-direct) echo native ours-off ours-pt ;;
    *) echo native mergerfs ours-off ours-pt ;;
    esac
}

: >"$results"
start=$(date +%s)
for round in $(seq "$rounds"); do
    for kind in nullrw tmpfs disk disk-direct; do
        branch=$tmpfs_dir nullrw=false
        [ "$kind" = disk ] || [ "$kind" = disk-direct ] && branch=$disk_dir
        [ "$kind" = nullrw ] && nullrw=true
        read -ra setups <<<"$(setups_of "$kind")"
        if [ $((round % 2)) -eq 0 ]; then
            mapfile -t setups < <(printf '%s\n' "${setups[@]}" | tac)
        fi
        for who in "${setups[@]}"; do
            log "round $round/$rounds: $kind, $who"
            # nullrw reads nothing: the file the reads read has its size on the branch (the
            # kernel reads no further than that), and writes overwrite it (notrunc).
            [ "$kind" = nullrw ] && truncate -s "$maxmib"M "$branch/f"
            mount_setup "$who" "$branch" "$nullrw"
            dir=$pool
            [ "$who" = native ] && dir=$branch
            for s in "${sizes[@]}"; do
                read -r bs mib <<<"$s"
                for op in write read; do
                    read -r rate cpu <<<"$(dd_run "$op" "$bs" "$mib" "$dir" "$kind" "$branch")"
                    echo "$kind $bs $op $who $rate $cpu $mib $round" >>"$results"
                done
            done
            rm -f "$dir/f"
            umount_setup
        done
    done
done
log "done in $(( $(date +%s) - start )) s"
fi

# The table: per (branch, bs, op), each setup's median MiB/s [min-max], passthrough against
# native (the median of each round's ratio: both ran in the same round, minutes apart at
# most) and, for the daemons, CPU s/GiB (median).
{
    echo "| branch | bs | op | native MiB/s | mergerfs 2.33 MiB/s | ours MiB/s | ours passthrough MiB/s | passthrough / native | CPU s/GiB mergerfs / ours / ours passthrough |"
    echo "|---|---|---|---|---|---|---|---|---|"
    awk "$AWK_STATS"'
    function cell(k, w) { return (k SUBSEP w) in rate ? sprintf("%d [%s]", median(rate[k, w]), range(rate[k, w])) : "—" }
    function cpu(k, w) { return (k SUBSEP w) in per ? sprintf("%.2f", median(per[k, w])) : "—" }
    function ratio(k,   r, list) {
        for (r = 1; r <= rounds[k]; r++)
            if (((k, "native", r) in at) && ((k, "ours-pt", r) in at) && at[k, "native", r] > 0)
                list = list " " sprintf("%.2f", at[k, "ours-pt", r] / at[k, "native", r])
        return list == "" ? "—" : sprintf("%.2fx [%s]", median(list), range(list))
    }
    {
        k = $1 " | " $2 " | " $3
        rate[k, $4] = rate[k, $4] " " $5
        at[k, $4, $8] = $5
        if ($8 > rounds[k]) rounds[k] = $8
        if ($4 != "native") per[k, $4] = per[k, $4] " " ($6 * 1024 / $7)
        if (!(k in seen)) { seen[k] = 1; order[++n] = k }
    }
    END {
        for (i = 1; i <= n; i++) {
            k = order[i]
            printf "| %s | %s | %s | %s | %s | %s | %s / %s / %s |\n", k, cell(k, "native"), cell(k, "mergerfs"),
                cell(k, "ours-off"), cell(k, "ours-pt"), ratio(k), cpu(k, "mergerfs"), cpu(k, "ours-off"), cpu(k, "ours-pt")
        }
    }' "$results"
} | tee "$out/bench-host.md"
