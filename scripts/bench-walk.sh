#!/usr/bin/env bash
# Walking a source tree (issue 47, the measurement): a real tree of about 16,000 entries (the
# first crates, by name, of the cargo registry's sources under ~/.cargo/registry/src, until
# 16,000 entries) in the test guest (QEMU TCG, Debian 6.12 kernel, 2 vCPUs, 2 GiB), served by
#   ours-N           union-virtiofsd on N tmpfs branches (the crates dealt round-robin, by name,
#                    over the branches, each branch holding tree/ and its share of the crates),
#   ours-N-always    the same with --cache always,
#   ours-static      union-virtiofsd on an empty RW upper over the whole tree on one RO base
#                    declared static (`--branch UP=RW --branch BASE=RO,static`), default cache,
#   virtiofsd        virtiofsd 1.14 on one tmpfs directory (its default cache, auto),
#   virtiofsd-always virtiofsd 1.14 with --cache always,
#   mergerfs-3       mergerfs (the apt package) pooling the 3 branches of ours-3 on the host, and
#                    virtiofsd 1.14 sharing that pool,
#   ext4             the local-disk reference: the same tree in an ext4 image (mke2fs -d, on the
#                    host's tmpfs) on virtio-blk in the same guest (the guest loads virtio_blk
#                    from the kernel package's modules, fetched once with apt-get download),
# each in its own boot, with fresh branches (or image) per boot. The steps (busybox, the guest's
# page cache dropped before each cold one), each timed in seconds in the guest:
#   find-cold        find tree
#   ls-lR-cold       ls -lR tree, then ls-lR-2 and ls-lR-3 again without dropping
#   stat-cold        stat of every file (one stat with every name, the list made on the host)
#   cat-cold         cat of every file
#   untar            tar -xf of a tarball of the first crates (about 3,000 entries) into the
#                    share, then sync
#   cp-a             cp -a of those crates' directories in tree/ to a new directory, then sync
#   rm-rf            rm -rf of that copy, then sync
#   build            cat of the same 20 source files, 200 times (a build's repeated opens of
#                    the same few headers)
# and the daemon's CPU seconds for the boot (virtiofsd's and mergerfs' summed for mergerfs-3,
# whose mergerfs-cpu-s row is mergerfs' alone).
#
#   scripts/bench-walk.sh [--runs N] [--out DIR] [--quick] [--configs 'ext4 ours-1 ...']
#                         [--count-requests] [--table-only]
#
# --table-only: no boots, the tables again from OUT/results.txt (e.g. of an interrupted run).
# --runs N rounds (default 3), each one boot per configuration, the order reversed every
# other round. --quick: one round of ext4, ours-1, ours-3, ours-1-always and mergerfs-3.
# --count-requests: one more boot per configuration of this daemon, untimed, with
# --log-level debug, and a table of the FUSE requests each step sent (opcode: count; the
# guest pauses a second before each step, in which the host marks the daemon's log; a cold
# step's count includes the FORGETs of its drop) in OUT/requests.md.
#
# Output in OUT (default .cache/bench-walk): results.txt ("CONFIG ROW VALUE" per boot),
# walk.md (medians with min-max over the rounds, and each configuration's median against
# ext4's: ext4's time / its time, so above 1 is ahead of the local disk), vs-ext4/CONFIG.md
# (median_table and run_ratios of that configuration against ext4), the consoles and daemon
# logs. A benchmark, not a test: about 21 minutes per round of the nine configurations on the
# 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. scripts/lib.sh

runs=3 out="$root/.cache/bench-walk" quick=0 configs="" count_requests=0 table_only=0
all_configs="ext4 ours-1 ours-3 ours-8 ours-1-always ours-3-always ours-static virtiofsd virtiofsd-always mergerfs-3"
while [ $# -gt 0 ]; do
    case "$1" in
    --runs) runs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --configs) configs=$2; shift 2 ;;
    --count-requests) count_requests=1; shift ;;
    --table-only) table_only=1; shift ;;
    *) die "unknown argument $1 (see the header of $0)" ;;
    esac
done
if [ "$quick" = 1 ]; then
    runs=1
    [ -n "$configs" ] || configs="ext4 ours-1 ours-3 ours-1-always mergerfs-3"
fi
[ -n "$configs" ] || configs=$all_configs
for c in $configs; do
    case " $all_configs " in *" $c "*) ;; *) die "unknown configuration $c (one of: $all_configs)" ;; esac
done
[ "$(id -u)" -eq 0 ] || die "run as root (tmpfs and mergerfs mounts)"
mkdir -p "$out"
out=$(cd "$out" && pwd)

if [ "$table_only" = 0 ]; then
# Everything this run mounts or starts, undone on exit (also on error or interrupt).
work=$(mktemp -d /tmp/uvfs-walk.XXXXXX)
mount -t tmpfs -o size=8G tmpfs "$work"
started=() pools=()
cleanup() {
    local p
    for p in "${pools[@]}"; do umount "$p" 2>/dev/null || umount -l "$p" 2>/dev/null || true; done
    for p in "${started[@]}"; do
        pkill -TERM -P "$p" 2>/dev/null || true
        kill "$p" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    umount "$work" 2>/dev/null || umount -l "$work" 2>/dev/null || true
    rmdir "$work" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bench_tools
kernel=$(scripts/fetch-kernel.sh)
initrd=$(scripts/build-initramfs.sh)
command -v mke2fs >/dev/null || die "mke2fs missing (e2fsprogs)"

# blk_module: an archive with /opt/walk/virtio_blk.ko for the guest kernel (built as a module in
# Debian's cloud kernel), taken from the kernel's package (apt-get download, once); prints its path.
blk_module() {
    local cpio="$UVFS_GUEST_CACHE/walk-blk.cpio" pkg w ko
    pkg=$(cut -d' ' -f1 "${kernel%/*}/version")
    if ! cache_fresh "$cpio" "$pkg"; then
        w=$(mktemp -d)
        chmod 755 "$w"
        if id _apt >/dev/null 2>&1; then chown _apt "$w"; fi
        (cd "$w" && apt-get download -qq "$pkg/bookworm-backports" >&2 2>/dev/null ||
            apt-get download -qq "$pkg" >&2)
        ko=$(dpkg-deb --fsys-tarfile "$w"/*.deb | tar -t | grep '/virtio_blk\.ko' | head -1)
        (cd "$w" && dpkg-deb --fsys-tarfile ./*.deb | tar -x "$ko")
        mkdir -p "$w/root/opt/walk"
        case $ko in
        *.xz) xz -dc "$w/$ko" >"$w/root/opt/walk/virtio_blk.ko" ;;
        *.zst) zstd -qdc "$w/$ko" >"$w/root/opt/walk/virtio_blk.ko" ;;
        *) cp "$w/$ko" "$w/root/opt/walk/virtio_blk.ko" ;;
        esac
        pack_cpio "$w/root" "$cpio"
        cache_stamp "$cpio" "$pkg"
        rm -rf "$w"
    fi
    echo "$cpio"
}
blk_cpio=$(blk_module)

# The tree: the first crates by name until 16,000 entries; the untar and cp -a part: the
# first crates until 3,000 entries; the build step's 20 files: the first .rs file of each of
# 20 crates spread over the tree (so over every branch).
src=$(ls -d ~/.cargo/registry/src/*/ | head -1)
[ -d "$src" ] || die "no cargo registry sources under ~/.cargo/registry/src"
mkdir -p "$work/tree" "$work/walk/opt/walk"
crates=() part=() n=0
for d in $(cd "$src" && ls | LC_ALL=C sort); do
    [ -d "$src/$d" ] || continue
    crates+=("$d")
    n=$((n + $(find "$src/$d" | wc -l)))
    [ "$n" -lt 3000 ] && part+=("$d")
    [ "$n" -lt 16000 ] || break
done
(cd "$src" && cp -a "${crates[@]}" "$work/tree/")
entries=$(find "$work/tree" | wc -l)
bytes=$(du -sb "$work/tree" | cut -f1)
log "tree: ${#crates[@]} crates, $entries entries, $bytes bytes; untar/cp part: ${#part[@]} crates"
tar -C "$work" -cf "$work/walk/opt/walk/part.tar" "${part[@]/#/tree/}"
printf 'tree/%s\n' "${part[@]}" >"$work/walk/opt/walk/part.list"
# The files for stat and cat, one a line, given to one stat and one cat as arguments (about
# 650 KB of them, under the 2 MB limit): busybox's xargs (with -0 or without) garbled about
# one name in a thousand in the guest. So no name may have a blank or a glob character.
(cd "$work" && find tree -type f | LC_ALL=C sort) >"$work/walk/opt/walk/files"
! grep -q '[[:space:]*?[]' "$work/walk/opt/walk/files" || die "a file name in the tree needs quoting"
step=$((${#crates[@]} / 20))
for i in $(seq 0 19); do
    (cd "$work" && find "tree/${crates[$((i * step))]}" -name '*.rs' -type f | LC_ALL=C sort | head -1)
done | grep . >"$work/walk/opt/walk/build.list"
walk_cpio="$out/walk.cpio"
pack_cpio "$work/walk" "$walk_cpio"
echo "tree ${#crates[@]} crates $entries entries $bytes bytes" >"$out/tree.txt"

# The guest's steps (see the header). DISK=1: the tree is on /dev/vda (ext4), not the share.
# COUNT=1: before each step (and before its drop), "=== STEP NAME ===" and a second's pause, in
# which the host, the daemon idle, marks its log.
cat >"$out/scenario.body" <<'EOF'
B=/opt/bench/bin
now() { $B/date +%s.%N; }
mark() {
    [ "$COUNT" = 1 ] || return 0
    echo "=== STEP $1 ==="
    sleep 1
}
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
# timed NAME CMD...: runs CMD, prints "RESULT NAME SECONDS"; cold NAME CMD...: the same after
# dropping the guest's caches.
DROP=0
timed() {
    name=$1
    shift
    mark "$name"
    [ "$DROP" = 0 ] || drop
    DROP=0
    t0=$(now)
    "$@"
    t1=$(now)
    echo "RESULT $name $(awk "BEGIN {printf \"%.3f\", $t1 - $t0}")"
}
cold() { DROP=1; timed "$@"; }
if [ "$DISK" = 1 ]; then
    insmod /opt/walk/virtio_blk.ko || exit 1
    i=0
    while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    mkdir -p /disk && mount -t ext4 /dev/vda /disk || exit 1
    M=/disk
else
    M=/mnt
fi
cd $M || exit 1
q() { "$@" >/dev/null; }
cold find-cold q find tree
cold ls-lR-cold q ls -lR tree
timed ls-lR-2 q ls -lR tree
timed ls-lR-3 q ls -lR tree
cold stat-cold sh -c 'set -f; stat -c %s $(cat /opt/walk/files) >/dev/null'
cold cat-cold sh -c 'set -f; cat $(cat /opt/walk/files) >/dev/null'
untar() { mkdir untar && tar -C untar -xf /opt/walk/part.tar && sync; }
timed untar untar
copy() { mkdir copy && cp -a $(cat /opt/walk/part.list) copy/ && sync; }
timed cp-a copy
timed rm-rf sh -c 'rm -rf copy && sync'
rm -rf untar
build() {
    files=$(cat /opt/walk/build.list)
    i=0
    while [ $i -lt 200 ]; do cat $files >/dev/null; i=$((i + 1)); done
}
timed build build
mark end
sync
EOF

# make_branches N: N fresh branches $work/bN/0..N-1 (one tmpfs) with the crates dealt
# round-robin; prints them.
make_branches() {
    local n=$1 i=0 c
    rm -rf "$work/b"
    for c in $(seq 0 $((n - 1))); do mkdir -p "$work/b/$c/tree"; done
    for c in "${crates[@]}"; do
        cp -a "$work/tree/$c" "$work/b/$((i % n))/tree/"
        i=$((i + 1))
    done
    for c in $(seq 0 $((n - 1))); do echo "$work/b/$c"; done
}

# wait_gone PID: waits (5 s) for PID to exit (daemons do once QEMU is gone), then stops it.
wait_gone() {
    for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.05; done
    pkill -TERM -P "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

# run_config CONFIG LABEL [DEBUG]: one boot of CONFIG; appends "CONFIG ROW VALUE" lines to
# $results (unless DEBUG=1: then the daemon logs at debug level and the steps' request
# counts go to $counts).
run_config() {
    local config=$1 label=$2 debug=${3:-0} sock="$work/sock"
    local dlog="$out/$label.daemon.log" console="$out/$label.console.log" branches=() disk=0 pool="" cmd=() cache=() dbg=()
    local pid watcher="" t0 t1 mcpu=0
    rm -f "$sock" "$sock.pid"
    [ "$debug" = 0 ] || dbg=(--log-level debug)
    case $config in *-always) cache=(--cache always) ;; esac
    case $config in
    ext4)
        disk=1
        make_branches 1 >/dev/null
        rm -f "$work/disk.img"
        mke2fs -q -t ext4 -d "$work/b/0" "$work/disk.img" $((bytes * 3 / 1024 / 1024 + 512))M
        rm -rf "$work/b" && mkdir -p "$work/b/0"
        # The share /init mounts, empty: the steps run on /dev/vda.
        cmd=("$ours" --socket-path "$sock" --shared-dir "$work/b/0" -o minfreespace=0)
        ;;
    ours-static)
        mapfile -t branches < <(make_branches 1)
        mkdir -p "$work/b/up"
        cmd=("$ours" --socket-path "$sock" -o minfreespace=0 "${dbg[@]}"
            --branch "$work/b/up=RW" --branch "${branches[0]}=RO,static")
        ;;
    ours-*)
        local nb=${config#ours-}
        nb=${nb%-always}
        mapfile -t branches < <(make_branches "$nb")
        cmd=("$ours" --socket-path "$sock" -o minfreespace=0 "${cache[@]}" "${dbg[@]}")
        for b in "${branches[@]}"; do cmd+=(--branch "$b=RW"); done
        ;;
    virtiofsd*)
        mapfile -t branches < <(make_branches 1)
        cmd=("$vfsd" --socket-path "$sock" --shared-dir "${branches[0]}" "${cache[@]}" "${dbg[@]}")
        ;;
    mergerfs-*)
        mapfile -t branches < <(make_branches "${config#mergerfs-}")
        pool="$work/pool"
        pools+=("$pool")
        mergerfs_mount "$pool" "${branches[@]}"
        started+=("$MERGERFS_PID")
        cmd=("$vfsd" --socket-path "$sock" --shared-dir "$pool" "${dbg[@]}")
        ;;
    esac
    /usr/bin/time -f 'TIME %U %S' -o "$out/$label.time" "${cmd[@]}" >"$dlog" 2>&1 &
    pid=$!
    started+=("$pid")
    wait_socket "$sock" "$pid" "$dlog"
    : >"$console"
    if [ "$debug" = 1 ]; then
        step_watcher "$console" "$pid" "$dlog" "$out/$label.marks" &
        watcher=$!
    fi
    {
        echo "DISK=$disk COUNT=$debug"
        cat "$out/scenario.body"
    } >"$out/scenario.sh"
    local drive=()
    [ "$disk" = 0 ] || drive=(--drive "$work/disk.img")
    t0=$(date +%s.%N)
    bash qemu/run-guest.sh --socket "$sock" --smp 2 --mem 2G --kernel "$kernel" --initrd "$initrd" \
        --extra-initrd "$bench_cpio" --extra-initrd "$walk_cpio" --extra-initrd "$blk_cpio" \
        "${drive[@]}" --script "$out/scenario.sh" >"$console" 2>&1 || true
    t1=$(date +%s.%N)
    [ -z "$watcher" ] || wait "$watcher" 2>/dev/null || true
    wait_gone "$pid"
    if [ -n "$pool" ]; then
        mergerfs_umount "$pool"
        mcpu=$MERGERFS_CPU
        unset 'pools[-1]'
    fi
    grep -q '^=== SCENARIO EXIT 0' <(tr -d '\r' <"$console") || log "$label: scenario did not finish (see $console)"
    log "$label: boot took $(awk "BEGIN {printf \"%.0f\", $t1 - $t0}") s"
    if [ "$debug" = 1 ]; then
        request_counts "$dlog" "$out/$label.marks" | sed "s/^/$config /" >>"$counts"
        return
    fi
    { grep -a '^RESULT ' "$console" || true; } | tr -d '\r' | sed "s/^RESULT /$config /" >>"$results"
    if [ "$disk" = 0 ]; then
        echo "$config daemon-cpu-s $(awk -v m="$mcpu" '/^TIME/ {print $2 + $3 + m}' "$out/$label.time")" >>"$results"
    fi
    [ -z "$pool" ] || echo "$config mergerfs-cpu-s $mcpu" >>"$results"
    echo "$config boot-s $(awk "BEGIN {printf \"%.1f\", $t1 - $t0}")" >>"$results"
}

# step_watcher CONSOLE PID LOG MARKS: for each "=== STEP NAME" the guest prints (and then
# pauses for a second), the line "NAME LINES" (LOG's length then) in MARKS.
step_watcher() {
    local console=$1 pid=$2 dlog=$3 marks=$4 seen=0 lines n s
    : >"$marks"
    while kill -0 "$pid" 2>/dev/null; do
        lines=$(tr -d '\r' <"$console" 2>/dev/null | sed -n 's/^=== STEP \([^ ]*\) ===$/\1/p' || true)
        n=$(printf '%s' "$lines" | grep -c '^' || true)
        while [ "$seen" -lt "$n" ]; do
            seen=$((seen + 1))
            s=$(printf '%s\n' "$lines" | sed -n "${seen}p")
            echo "$s $(wc -l <"$dlog")" >>"$marks"
        done
        sleep 0.1
    done
}

# request_counts LOG MARKS: "STEP OPCODE COUNT" for each step's stretch of LOG.
request_counts() {
    local dlog=$1 marks=$2 name from to
    while read -r name from; do
        to=$(awk -v n="$name" 'f {print $2; exit} $1 == n {f = 1}' "$marks")
        [ -n "$to" ] || continue
        sed -n "$((from + 1)),${to}p" "$dlog" >"$work/stretch.log"
        opcodes "$work/stretch.log" | sed "s/^/$name /"
    done <"$marks"
}

results="$out/results.txt" counts="$out/requests.txt"
: >"$results"
round_start=$(date +%s)
for r in $(seq "$runs"); do
    order=$configs
    [ $((r % 2)) -eq 1 ] || order=$(printf '%s\n' $configs | tac | tr '\n' ' ')
    for c in $order; do
        log "round $r/$runs: $c"
        run_config "$c" "$c"
    done
    log "round $r took $(($(date +%s) - round_start)) s"
    round_start=$(date +%s)
done
if [ "$count_requests" = 1 ]; then
    : >"$counts"
    for c in $configs; do
        case $c in ours-*) log "request counts: $c"; run_config "$c" "$c.debug" 1 ;; esac
    done
fi
else
    results="$out/results.txt" counts="$out/requests.txt" work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    runs=$(awk '$2 == "find-cold" {n[$1]++} END {for (c in n) if (n[c] > m) m = n[c]; print m + 0}' "$results")
fi

# walk.md: per row, each configuration's median and min-max, then the ratios to ext4.
steps="find-cold ls-lR-cold ls-lR-2 ls-lR-3 stat-cold cat-cold untar cp-a rm-rf build"
{
    echo "Tree: $(cat "$out/tree.txt"); $runs round(s); seconds, median (min-max) over the rounds."
    echo
    awk -v configs="$configs" -v steps="$steps daemon-cpu-s mergerfs-cpu-s boot-s" '
    function median(list,   n, a, i, j, t) {
        n = split(list, a, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function cell(list,   n, a, i, lo, hi) {
        if (list == "") return "-"
        n = split(list, a, " "); lo = hi = a[1]
        for (i = 2; i <= n; i++) { if (a[i] + 0 < lo + 0) lo = a[i]; if (a[i] + 0 > hi + 0) hi = a[i] }
        return n > 1 ? sprintf("%.2f (%.2f-%.2f)", median(list), lo, hi) : sprintf("%.2f", median(list))
    }
    { v[$1, $2] = v[$1, $2] " " $3 }
    END {
        nc = split(configs, c, " "); ns = split(steps, s, " ")
        printf "| step |"; for (i = 1; i <= nc; i++) printf " %s |", c[i]; print ""
        printf "|---|"; for (i = 1; i <= nc; i++) printf "---:|"; print ""
        for (k = 1; k <= ns; k++) {
            any = 0; for (i = 1; i <= nc; i++) if (v[c[i], s[k]] != "") any = 1
            if (!any) continue
            printf "| %s |", s[k]; for (i = 1; i <= nc; i++) printf " %s |", cell(v[c[i], s[k]]); print ""
        }
        if (v["ext4", "find-cold"] == "") exit
        print ""
        print "Against the ext4 image: ext4 median / this median (above 1: ahead of the local disk)."
        print ""
        printf "| step |"; for (i = 1; i <= nc; i++) if (c[i] != "ext4") printf " %s |", c[i]; print ""
        printf "|---|"; for (i = 1; i <= nc; i++) if (c[i] != "ext4") printf "---:|"; print ""
        for (k = 1; k <= ns; k++) {
            if (v["ext4", s[k]] == "" || s[k] == "boot-s") continue
            printf "| %s |", s[k]
            for (i = 1; i <= nc; i++) if (c[i] != "ext4") {
                m = median(v[c[i], s[k]]); printf " %s |", (m > 0 ? sprintf("%.2fx", median(v["ext4", s[k]]) / m) : "-")
            }
            print ""
        }
    }' "$results"
} | tee "$out/walk.md"

# Each configuration against ext4 (and each of ours against mergerfs-3), as the guest
# benchmarks' tables: OUT/vs-ext4/CONFIG.md, OUT/vs-mergerfs/CONFIG.md.
mkdir -p "$out/vs-ext4" "$out/vs-mergerfs"
for c in $configs; do
    for ref in ext4 mergerfs-3; do
        [ "$c" != "$ref" ] || continue
        case " $configs " in *" $ref "*) ;; *) continue ;; esac
        d=$out/vs-ext4
        [ "$ref" = ext4 ] || d=$out/vs-mergerfs
        awk -v c="$c" -v r="$ref" -v steps=" $steps " \
            'index(steps, " " $2 " ") { if ($1 == c) print "ours", $2, $3; else if ($1 == r) print "theirs", $2, $3 }' \
            "$results" >"$work/pair.txt"
        {
            median_table "$c" "$ref" '.' "$work/pair.txt" 2>/dev/null
            echo
            run_ratios '.' "$work/pair.txt"
        } >"$d/$c.md"
    done
done
if [ "$count_requests" = 1 ]; then
    {
        echo "| configuration | step | opcode | requests |"
        echo "|---|---|---:|---:|"
        awk 'BEGIN {
                 n = split("LOOKUP FORGET GETATTR SETATTR READLINK SYMLINK - MKNOD MKDIR UNLINK RMDIR RENAME LINK OPEN READ WRITE STATFS RELEASE - FSYNC SETXATTR GETXATTR LISTXATTR REMOVEXATTR FLUSH INIT OPENDIR READDIR RELEASEDIR FSYNCDIR GETLK SETLK SETLKW ACCESS CREATE INTERRUPT BMAP DESTROY IOCTL POLL NOTIFY_REPLY BATCH_FORGET FALLOCATE READDIRPLUS RENAME2 LSEEK COPY_FILE_RANGE SETUPMAPPING REMOVEMAPPING SYNCFS TMPFILE STATX", op, " ")
             }
             {printf "| %s | %s | %s (%s) | %s |\n", $1, $2, ($3 in op ? op[$3] : "?"), $3, $4}' "$counts"
    } | tee "$out/requests.md"
fi
log "tables: $out/walk.md, $out/vs-ext4/, $out/vs-mergerfs/"
