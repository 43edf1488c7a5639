#!/usr/bin/env bash
# A minimal Debian (bookworm, debootstrap --variant=minbase) as a tar archive, the read-only
# base layer of tests/guest/cow_image.rs, and a small local package to install on it
# (uvfs-hello, built with dpkg-deb). Cached in $UVFS_CACHE/debian-base/ (rebuilt when this
# script changes); prints the directory.
# Needs root and deb.debian.org (a package registry). About 30 s the first time.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

out="$UVFS_CACHE/debian-base"
key=$(cache_key "$0")
if cache_fresh "$out/base.tar" "$key" && [ -s "$out/uvfs-hello_1.0_all.deb" ]; then
    log "cached: $out"
    echo "$out"
    exit 0
fi
command -v debootstrap >/dev/null || as_root apt-get install -y -qq --no-install-recommends debootstrap >&2
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log "debootstrap --variant=minbase bookworm"
as_root debootstrap --variant=minbase bookworm "$work/root" http://deb.debian.org/debian >&2
# The downloaded packages are not part of the system.
rm -f "$work/root/var/cache/apt/archives/"*.deb
tar -C "$work/root" --numeric-owner -cf "$out/base.tar.tmp" .
mv "$out/base.tar.tmp" "$out/base.tar"

pkg="$work/pkg"
mkdir -p "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/usr/share/doc/uvfs-hello"
cat >"$pkg/DEBIAN/control" <<'CONTROL'
Package: uvfs-hello
Version: 1.0
Architecture: all
Maintainer: union-virtiofsd tests <tests@invalid>
Description: a package installed onto a copy-on-write layer in the tests
CONTROL
cat >"$pkg/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    update-alternatives --install /usr/bin/uvfs-greet uvfs-greet /usr/bin/uvfs-hello 50
fi
POSTINST
printf '#!/bin/sh\necho "hello from a copy-on-write layer"\n' >"$pkg/usr/bin/uvfs-hello"
echo "Public domain." >"$pkg/usr/share/doc/uvfs-hello/copyright"
chmod 755 "$pkg/DEBIAN/postinst" "$pkg/usr/bin/uvfs-hello"
dpkg-deb --root-owner-group --build "$pkg" "$out/uvfs-hello_1.0_all.deb" >&2
cache_stamp "$out/base.tar" "$key"
log "built $out"
echo "$out"
