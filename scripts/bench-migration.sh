#!/usr/bin/env bash
# What the session adds to a live migration: a guest (TCG, 1 GiB) looks up every file of a tree
# of N files (so the daemon holds N nodes), keeps one file open, then QEMU 10 migrates it to a
# second QEMU (-incoming, same host) served by a second daemon over the same branch. Prints a
# Markdown table per N: the device state's size, the source's time to save it, the
# destination's time to load it (finding every node again and checking it), and the downtime
# QEMU reports (query-migrate), with N = 0 as the baseline the session adds to.
#
#   scripts/bench-migration.sh [--nodes "0 1000 10000 100000"] [--mode find-paths|file-handles]
#
# Not part of the test suite: a few minutes (the guest's 100,000 lookups under TCG dominate).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. scripts/lib.sh

counts="0 1000 10000 100000" mode=find-paths
while [ $# -gt 0 ]; do
    case "$1" in
    --nodes) counts=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    *) die "unknown argument $1 (see the header of $0)" ;;
    esac
done
cargo build --quiet --release --bin union-virtiofsd >&2
daemon=$(cargo_out release)/union-virtiofsd
kernel=$(scripts/fetch-kernel.sh)
initrd=$(scripts/build-initramfs.sh)
work=$(mktemp -d /tmp/uvfs-migbench.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    umount "$work/b" 2>/dev/null || true
    [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

cat >"$work/scenario.sh" <<'EOF'
set -eu
cd /mnt
find t -type f | while read -r f; do :; done
ls -lR t >/dev/null
exec 3<>/mnt/held
echo "=== MIGRATE NOW ==="
i=0
while [ ! -e /mnt/.migrated ]; do i=$((i + 1)); [ $i -lt 3000 ] || exit 1; sleep 0.1; done
echo after >&3
ls -lR t | wc -l
EOF

# qmp.py SOURCE-QMP DEST-QMP URI: migrates (return-path on, as for --migration-on-error=abort)
# and prints "status downtime-ms total-ms".
cat >"$work/qmp.py" <<'EOF'
import json, socket, sys, time
def connect(path):
    s = socket.socket(socket.AF_UNIX); s.connect(path); f = s.makefile("rw")
    json.loads(f.readline())
    def cmd(c, **a):
        f.write(json.dumps({"execute": c, "arguments": a} if a else {"execute": c}) + "\n"); f.flush()
        while True:
            r = json.loads(f.readline())
            if "return" in r or "error" in r:
                return r
    cmd("qmp_capabilities")
    return cmd
src, dst = connect(sys.argv[1]), connect(sys.argv[2])
caps = [{"capability": "return-path", "state": True}]
src("migrate-set-capabilities", capabilities=caps); dst("migrate-set-capabilities", capabilities=caps)
src("migrate", uri=sys.argv[3])
deadline = time.time() + 600
while time.time() < deadline:
    r = src("query-migrate")["return"]
    if r.get("status") in ("completed", "failed", "cancelled"):
        print(r["status"], r.get("downtime", "-"), r.get("total-time", "-"))
        sys.exit(0)
    time.sleep(0.05)
print("timeout - -")
EOF

mkdir "$work/b"
mount -t tmpfs -o size=2G tmpfs "$work/b"
echo "| nodes held | device state | save | load | QEMU downtime | total migration |"
echo "|---|---|---|---|---|---|"
for n in $counts; do
    find "$work/b" -mindepth 1 -delete
    rm -f "$work"/*.sock "$work"/*.qmp "$work"/*.log
    mkdir -p "$work/b/t"
    # N files, 100 per directory.
    python3 - "$work/b/t" "$n" <<'EOF'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, "d%d" % (i // 100))
    if i % 100 == 0:
        os.mkdir(d)
    open(os.path.join(d, "f%d" % i), "w").close()
EOF
    echo data >"$work/b/held"
    for side in src dst; do
        "$daemon" --socket-path "$work/$side.sock" --branch "$work/b=RW" --log-level info \
            --migration-mode "$mode" >"$work/$side-daemon.log" 2>&1 &
        pids+=($!)
    done
    for side in src dst; do
        for _ in $(seq 100); do [ -S "$work/$side.sock" ] && break; sleep 0.1; done
    done
    common=(--kernel "$kernel" --initrd "$initrd" --script "$work/scenario.sh" --mem 1G)
    bash qemu/run-guest.sh --socket "$work/src.sock" "${common[@]}" --qmp "$work/src.qmp" \
        >"$work/src-console.log" 2>&1 &
    pids+=($!)
    bash qemu/run-guest.sh --socket "$work/dst.sock" "${common[@]}" --qmp "$work/dst.qmp" \
        --incoming "unix:$work/incoming.sock" >"$work/dst-console.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 6000); do
        grep -q "=== MIGRATE NOW ===" "$work/src-console.log" && break
        sleep 0.1
    done
    grep -q "=== MIGRATE NOW ===" "$work/src-console.log" || die "guest never got ready ($n nodes)"
    read -r status downtime total < <(python3 "$work/qmp.py" "$work/src.qmp" "$work/dst.qmp" \
        "unix:$work/incoming.sock")
    touch "$work/b/.migrated"
    for _ in $(seq 600); do grep -q "UVFS POWEROFF" "$work/dst-console.log" && break; sleep 0.1; done
    [ "$status" = completed ] || die "migration $status with $n nodes: $(tail -3 "$work/dst-daemon.log")"
    grep -q "=== SCENARIO EXIT 0 ===" "$work/dst-console.log" ||
        die "the guest failed after the migration ($n nodes): $(tail -5 "$work/dst-console.log")"
    saved=$(grep -o 'device state saved: [0-9]* bytes in [0-9.]* ms' "$work/src-daemon.log" | tail -1)
    loaded=$(grep -o 'device state loaded: [0-9]* bytes in [0-9.]* ms: [0-9]* nodes' "$work/dst-daemon.log" | tail -1)
    bytes=$(echo "$saved" | awk '{print $4}')
    save_ms=$(echo "$saved" | awk '{print $7}')
    load_ms=$(echo "$loaded" | awk '{print $7}')
    nodes=$(echo "$loaded" | grep -o '[0-9]* nodes' | awk '{print $1}')
    printf '| %s | %s bytes | %s ms | %s ms | %s ms | %s ms |\n' \
        "$nodes" "$bytes" "$save_ms" "$load_ms" "$downtime" "$total"
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    pids=()
done
