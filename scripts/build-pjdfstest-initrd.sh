#!/usr/bin/env bash
# Installs the POSIX conformance suite pjdfstest (the Rust port, pinned, built by cargo into
# $UVFS_TOOLS/pjdfstest/) and packs it for the test guest: an uncompressed cpio archive with the
# binary, coreutils' sleep, the shared libraries they need (from ldd), /etc/passwd and /etc/group with the suite's
# dummy users, and /etc/pjdfstest.toml. Appended to the generic initramfs by the tests
# (qemu/run-guest.sh --extra-initrd). Prints the archive's path; rebuilt only when an input's
# contents change. Idempotent, no network once cached.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

out="$UVFS_GUEST_CACHE/pjdfstest.cpio"
conf="$UVFS_ROOT/qemu/pjdfstest"

bin=$(install_pjdfstest)

key=$(cache_key "$0" "$bin" /usr/bin/sleep "$conf"/*)
if cache_fresh "$out" "$key"; then
    log "cached: $out"
    echo "$out"
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
mkdir -p "$work/bin" "$work/etc"
install -m 755 "$bin" "$work/bin/pjdfstest"
# coreutils' sleep as /usr/bin/sleep (first in the guest's PATH for the suite): the ETXTBSY
# cases copy `which sleep` and run the copy, and busybox's sleep, copied under another name,
# is no longer "sleep" and exits at once.
mkdir -p "$work/usr/bin"
install -m 755 /usr/bin/sleep "$work/usr/bin/sleep"
# The dynamic loader and every library ldd names, at the same absolute paths.
copy_libs "$work" "$bin" /usr/bin/sleep
install -m 644 "$conf/passwd" "$work/etc/passwd"
install -m 644 "$conf/group" "$work/etc/group"
install -m 644 "$conf/pjdfstest.toml" "$work/etc/pjdfstest.toml"
mkdir -p "$UVFS_GUEST_CACHE"
pack_cpio "$work" "$out"
cache_stamp "$out" "$key"
log "built $out ($(stat -c %s "$out") bytes)"
echo "$out"
