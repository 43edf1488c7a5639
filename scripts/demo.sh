#!/usr/bin/env bash
# Demo: builds union-virtiofsd, serves a union of two temporary branches (a RW, b RO) to a QEMU
# guest, and shows the guest's view: ls -la /mnt, a merged file, df /mnt, the virtiofs mount.
#
#   scripts/demo.sh                       # our daemon
#   DEMO_QUEUE_SIZE=256 scripts/demo.sh   # another virtio queue size
#   UVFS_DAEMON=/path/to/binary scripts/demo.sh   # a prebuilt daemon (same CLI), no cargo build
# Installs what it needs (scripts/install-deps.sh); cleans up the branches and the daemon.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$UVFS_ROOT"

"$UVFS_ROOT/scripts/install-deps.sh"
kernel=$("$UVFS_ROOT/scripts/fetch-kernel.sh")
initrd=$("$UVFS_ROOT/scripts/build-initramfs.sh")
daemon="${UVFS_DAEMON:-}"
if [ -z "$daemon" ]; then
    log "cargo build --release"
    cargo build --release --quiet
    daemon="$(cargo_out release)/union-virtiofsd"
fi

work=$(mktemp -d --tmpdir uvfs-demo.XXXXXX)
daemon_pid=""
cleanup() {
    if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
        kill "$daemon_pid" 2>/dev/null || true
        wait "$daemon_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/a/docs" "$work/b/docs" "$work/b/archive"
echo "hello from branch a (RW, first: wins)" >"$work/a/greeting.txt"
echo "hello from branch b (RO, hidden by a)" >"$work/b/greeting.txt"
echo "only in a" >"$work/a/docs/a-notes.txt"
echo "only in b" >"$work/b/docs/b-notes.txt"
echo "old stuff, read-only" >"$work/b/archive/2019.txt"

cat >"$work/scenario.sh" <<'SCENARIO'
echo '$ ls -la /mnt /mnt/docs'; ls -la /mnt /mnt/docs
echo '$ cat /mnt/greeting.txt'; cat /mnt/greeting.txt
echo '$ df /mnt'; df /mnt
echo '$ mount | grep virtiofs'; mount | grep virtiofs
echo '$ echo new > /mnt/docs/new.txt'; echo new > /mnt/docs/new.txt && echo ok
echo '$ echo x >> /mnt/archive/2019.txt'; echo x >> /mnt/archive/2019.txt || true
SCENARIO

log "starting $daemon (log: $work/daemon.log)"
# mergerfs-style options work as in mergerfs; minfreespace=0 because the demo's branches live
# in /tmp and mergerfs's 4G default floor would refuse new files on a nearly full disk.
"$daemon" --socket-path "$work/fs.sock" --branch "$work/a=RW" --branch "$work/b=RO" \
    -o minfreespace=0 >"$work/daemon.log" 2>&1 &
daemon_pid=$!
wait_socket "$work/fs.sock" "$daemon_pid" "$work/daemon.log"

"$UVFS_ROOT/qemu/run-guest.sh" --socket "$work/fs.sock" --kernel "$kernel" --initrd "$initrd" \
    --queue-size "${DEMO_QUEUE_SIZE:-1024}" --script "$work/scenario.sh" </dev/null
echo "--- host: branch a after the guest ran ---"
find "$work/a" -type f | sed "s|$work/||" | sort
