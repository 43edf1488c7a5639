#!/usr/bin/env bash
# System calls and wakeups per request, union-virtiofsd against virtiofsd 1.14, in the test
# guest (QEMU TCG, Debian 6.12 kernel). Each daemon runs under `strace -f -c` (every thread,
# the sandboxed child too) while the guest runs one workload; the same boot with only the
# set-up (fio laying out the file) is subtracted, and the difference is divided by the
# workload's request count. epoll_wait calls are the daemon's wakeups.
#
#   scripts/bench-syscalls.sh [--out DIR]
#
# Workloads (fio, psync, O_DIRECT, so each I/O is one FUSE request): 4,096 writes of 4 KiB,
# 4,096 reads of 4 KiB, 256 reads of 1 MiB. Prints a Markdown table to stdout and to
# DIR/syscalls.md. Not part of the test suite (about 2 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. scripts/lib.sh

out="$root/.cache/bench-syscalls"
while [ $# -gt 0 ]; do
    case "$1" in
    --out) out=$2; shift 2 ;;
    *) die "unknown argument $1 (see the header of $0)" ;;
    esac
done
mkdir -p "$out"

command -v strace >/dev/null || as_root apt-get install -y -qq --no-install-recommends strace >&2
bench_tools
kernel=$(scripts/fetch-kernel.sh)
initrd=$(scripts/build-initramfs.sh)

# name  requests  fio arguments (empty: set-up only)
workloads=(
    "setup 0 "
    "write-4k 4096 --bs=4k --rw=write --size=16M"
    "read-4k 4096 --bs=4k --rw=read --size=16M"
    "read-1m 256 --bs=1m --rw=read --size=64M --loops=4"
)

# Runs the guest with workload $2 against daemon $1 under strace; leaves DIR/$1.$name.strace.
run_one() {
    local who=$1 name=$2 n=$3; shift 3
    local dir sock scenario cmd
    dir=$(mktemp -d /tmp/uvfs-sys.XXXXXX)
    mount -t tmpfs -o size=256M tmpfs "$dir"
    sock="$dir.sock" scenario="$out/$name.sh"
    {
        echo 'B=/opt/bench/bin'
        echo '$B/fio --name=lay --filename=/mnt/f --size=64M --rw=write --bs=1M --direct=1 --minimal >/dev/null'
        [ "$n" = 0 ] || echo "\$B/fio --name=w --filename=/mnt/f --direct=1 --ioengine=psync --minimal $* >/dev/null"
    } >"$scenario"
    if [ "$who" = ours ]; then
        cmd=("$ours" --socket-path "$sock" --shared-dir "$dir" -o minfreespace=0)
    else
        cmd=("$vfsd" --socket-path "$sock" --shared-dir "$dir")
    fi
    strace -f -c -o "$out/$who.$name.strace" "${cmd[@]}" >"$out/$who.$name.log" 2>&1 &
    local pid=$!
    for _ in $(seq 400); do [ -S "$sock" ] && break; sleep 0.05; done
    [ -S "$sock" ] || die "$who: no socket"
    bash qemu/run-guest.sh --socket "$sock" --smp 2 --mem 1G --kernel "$kernel" \
        --initrd "$initrd" --extra-initrd "$bench_cpio" --script "$scenario" \
        >"$out/$who.$name.console" 2>&1 || true
    for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    pkill -TERM -P "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    umount "$dir"; rmdir "$dir"; rm -f "$sock" "$sock.pid"
    tr -d '\r' <"$out/$who.$name.console" | grep -q '^=== SCENARIO EXIT 0' ||
        die "$who $name: the guest scenario failed (see $out/$who.$name.console)"
}

# "syscall calls" lines of an strace -c summary (errors counted in the calls).
calls() { awk '$1 ~ /^[0-9.]+$/ && NF >= 5 && $NF != "total" { print $NF, $4 }' "$1"; }

for who in ours theirs; do
    for w in "${workloads[@]}"; do
        # shellcheck disable=SC2086
        set -- $w
        log "$who: $1"
        run_one "$who" "$@"
    done
done

{
    echo "| workload | daemon | syscalls per request | epoll_wait (wakeups) | read+write (eventfd, log) | top calls per request |"
    echo "|---|---|---|---|---|---|"
    for w in "${workloads[@]:1}"; do
        # shellcheck disable=SC2086
        set -- $w
        for who in ours theirs; do
            label=union-virtiofsd
            [ "$who" = theirs ] && label="virtiofsd 1.14"
            join -a1 -e 0 -o 0,1.2,2.2 <(calls "$out/$who.$1.strace" | sort) \
                <(calls "$out/$who.setup.strace" | sort) |
                awk -v n="$2" -v w="$1" -v d="$label" '
                { per = ($2 - $3) / n; if (per < 0) per = 0; tot += per; c[$1] = per }
                END {
                    ep = c["epoll_wait"] + c["epoll_pwait"]
                    rw = c["read"] + c["write"]
                    top = ""
                    for (k = 0; k < 5; k++) {
                        best = ""; bv = 0.05
                        for (s in c) if (c[s] > bv) { best = s; bv = c[s] }
                        if (best == "") break
                        top = top sprintf("%s%s %.2f", top == "" ? "" : ", ", best, bv)
                        delete c[best]
                    }
                    printf "| %s | %s | %.2f | %.2f | %.2f | %s |\n", w, d, tot, ep, rw, top
                }'
        done
    done
} | tee "$out/syscalls.md"
