#!/usr/bin/env bash
# Builds the generic test-guest initramfs (busybox-static + qemu/init, cpio newc, gzip) into
# .cache/guest/initramfs.cpio.gz and prints its path on stdout (logs go to stderr).
#
# One initramfs serves every scenario: a test appends a second, uncompressed cpio archive holding
# /scenario.sh to it (the kernel unpacks concatenated archives in order), see qemu/run-guest.sh and
# crates/testkit/src/guest.rs. Rebuilt only when qemu/init or busybox is newer than the cached image.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

out="$UVFS_GUEST_CACHE/initramfs.cpio.gz"
init="$UVFS_ROOT/qemu/init"
busybox=/bin/busybox

[ -x "$busybox" ] || die "$busybox missing: run scripts/install-deps.sh (package busybox-static)"
file -L "$busybox" 2>/dev/null | grep -q 'dynamically linked' &&
    die "$busybox is dynamically linked: install busybox-static"
command -v cpio >/dev/null || die "cpio missing: run scripts/install-deps.sh"

if [ -s "$out" ] && [ "$out" -nt "$init" ] && [ "$out" -nt "$busybox" ] && [ "$out" -nt "$0" ]; then
    log "cached: $out"
    echo "$out"
    exit 0
fi

work=$(mktemp -d)
# mktemp makes the directory 0700; it becomes the guest's /, which guest users must traverse.
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"/{bin,sbin,dev,proc,sys,tmp,mnt,etc}
cp "$busybox" "$work/bin/busybox"
install -m 755 "$init" "$work/init"
# The kernel opens /dev/console before running /init; devtmpfs is mounted only later.
mknod -m 600 "$work/dev/console" c 5 1 2>/dev/null || true
mkdir -p "$UVFS_GUEST_CACHE"
(cd "$work" && find . -print0 | LC_ALL=C sort -z |
    cpio --null -o -H newc --owner=0:0 --quiet | gzip -9n) >"$out.tmp"
mv "$out.tmp" "$out"
log "built $out ($(stat -c %s "$out") bytes)"
echo "$out"
