#!/usr/bin/env bash
# Packs host programs the guest's busybox lacks into an uncompressed cpio archive that tests
# append to the initramfs (crates/testkit/src/guest.rs, Guest::extra_initrd): util-linux's flock,
# coreutils' cp (copy_file_range, --reflink), sync (-f: syncfs) and stat (statx), xfs_io
# (statx), e2fsprogs' chattr and lsattr (inode flags), attr's getfattr and setfattr and acl's
# getfacl and setfacl, with the shared libraries they
# load, and the project's examples/guest_lock (fcntl record locks), examples/guest_lockmatrix
# (the lock-lifetime matrix of tests/guest/locks.rs), examples/guest_idmap
# (idmapped mounts, running a command as a bare uid/gid) and examples/guest_readdir (a
# directory read in two parts, across a migration). In the guest they are
# under /opt/tools/bin (so that busybox's applets in /bin keep their names). Prints the
# archive's path: $UVFS_GUEST_CACHE/tools.cpio. Rebuilt when the contents of this script or of
# a program it packs change.
#   scripts/build-tools-initrd.sh stress
# packs stress-ng (its lock stressors: tests/guest/lock_waits.rs) the same way, on its own
# (30 MB): stress.cpio.
#   scripts/build-tools-initrd.sh fio
# packs fio (with --verify: the I/O load of tests/guest/upgrade.rs) the same way:
# fio.cpio.
#   scripts/build-tools-initrd.sh fsx
# packs the fsx data-integrity exerciser (cargo install'ed into $UVFS_TOOLS/fsx if absent),
# qemu/fsx-all.toml, a mix with every operation it has, and qemu/fsx-odirect.c built as
# /opt/tools/lib/fsx-odirect.so (LD_PRELOAD'ed, it opens fsx's file with O_DIRECT)
# (tests/guest/integrity.rs): fsx.cpio.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

# Files besides the programs whose contents go into the archive.
inputs=()
if [ "${1:-}" = stress ]; then
    out="$UVFS_GUEST_CACHE/stress.cpio"
    progs=(/usr/bin/stress-ng)
elif [ "${1:-}" = fio ]; then
    out="$UVFS_GUEST_CACHE/fio.cpio"
    progs=(/usr/bin/fio)
elif [ "${1:-}" = fsx ]; then
    out="$UVFS_GUEST_CACHE/fsx.cpio"
    fsx=$(install_fsx)
    progs=("$fsx")
    inputs+=("$UVFS_ROOT/qemu/fsx-all.toml" "$UVFS_ROOT/qemu/fsx-odirect.c")
else
    out="$UVFS_GUEST_CACHE/tools.cpio"
    # fcntl record locks, idmapped mounts and a directory read in two parts: the project's
    # examples/guest_lock.rs, guest_idmap.rs and guest_readdir.rs.
    cargo build --quiet --example guest_lock --example guest_lockmatrix --example guest_idmap \
        --example guest_readdir --manifest-path "$UVFS_ROOT/Cargo.toml" >&2
    examples="$(cargo_out debug)/examples"
    progs=("$examples/guest_lock" "$examples/guest_lockmatrix" "$examples/guest_idmap"
        "$examples/guest_readdir" /usr/bin/flock /usr/bin/cp /usr/bin/sync /usr/bin/stat /usr/sbin/xfs_io /usr/bin/chattr /usr/bin/lsattr
        /usr/bin/getfattr /usr/bin/setfattr /usr/bin/getfacl /usr/bin/setfacl)
fi
for p in "${progs[@]}"; do
    [ -x "$p" ] || die "$p missing: run scripts/install-deps.sh"
done
key=$(cache_key "$0" "${progs[@]}" "${inputs[@]}")
if cache_fresh "$out" "$key"; then
    log "cached: $out"
    echo "$out"
    exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
mkdir -p "$work/opt/tools/bin"
for p in "${progs[@]}"; do
    install -m 755 "$p" "$work/opt/tools/bin/$(basename "$p")"
done
if [ "${1:-}" = fsx ]; then
    install -m 644 "$UVFS_ROOT/qemu/fsx-all.toml" "$work/opt/tools/fsx-all.toml"
    mkdir -p "$work/opt/tools/lib"
    cc -shared -fPIC -O2 -Wall -o "$work/opt/tools/lib/fsx-odirect.so" \
        "$UVFS_ROOT/qemu/fsx-odirect.c"
    progs+=("$work/opt/tools/lib/fsx-odirect.so")
fi
copy_libs "$work" "${progs[@]}"
mkdir -p "$UVFS_GUEST_CACHE"
pack_cpio "$work" "$out"
cache_stamp "$out" "$key"
log "built $out ($(stat -c %s "$out") bytes)"
echo "$out"
