#!/usr/bin/env bash
# Downloads the Debian cloud kernel used by the real-guest tests and caches its vmlinuz under
# $UVFS_GUEST_CACHE/kernel-SUITE/ (scripts/lib.sh). Prints the path of the cached vmlinuz on stdout (logs go to stderr).
#
#   scripts/fetch-kernel.sh                         # bookworm-backports (6.12)
#   GUEST_KERNEL_SUITE=trixie-backports scripts/fetch-kernel.sh
#
# GUEST_KERNEL_SUITE picks the Debian suite the linux-image-cloud-amd64 metapackage is resolved in;
# a suite not yet in the apt sources is added (plain "deb http://deb.debian.org/debian SUITE main";
# bookworm-backports (6.12) is what CI uses; trixie-backports (7.x, with fs.fuse.max_pages_limit)
# was tried once and fetched fine on bookworm).
# The kernel must have virtio-fs, FUSE and virtio-pci built in (no modules in our initramfs); this is
# checked against the package's config. Idempotent: once vmlinuz is cached nothing is downloaded.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

suite="${GUEST_KERNEL_SUITE:-bookworm-backports}"
dest="$UVFS_GUEST_CACHE/kernel-$suite"

if [ -s "$dest/vmlinuz" ] && [ -s "$dest/version" ]; then
    log "cached: $(cat "$dest/version")"
    echo "$dest/vmlinuz"
    exit 0
fi

command -v apt-get >/dev/null || die "apt-get not found: the guest kernel comes from a Debian package"
ensure_apt_suite "$suite"

# The metapackage depends on exactly one versioned image package, e.g.
# linux-image-6.12.95+deb12-cloud-amd64; its bookworm-backports build is not signed, others may be
# "-unsigned": take whichever linux-image-* the dependency names.
pkg=$(apt-cache depends "linux-image-cloud-amd64/$suite" 2>/dev/null |
    sed -n 's/^ *Depends: \(linux-image-[^ ]*cloud-amd64[^ ]*\)$/\1/p' | head -1)
[ -n "$pkg" ] || die "cannot resolve linux-image-cloud-amd64 in $suite (is the suite in apt sources?)"
log "resolved linux-image-cloud-amd64/$suite -> $pkg"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# apt drops privileges to _apt for downloads; let it write here to avoid a warning.
chmod 755 "$work"
if id _apt >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then chown _apt "$work"; fi
# Up to 6.x the image package holds /boot/vmlinuz-* and /boot/config-*; newer Debian kernels
# (trixie-backports 7.x) split them into linux-binary-REL (vmlinuz) and linux-base-REL (config).
rel=${pkg#linux-image-}
debs=("$pkg/$suite")
for extra in "linux-binary-$rel" "linux-base-$rel"; do
    if apt-cache show "$extra/$suite" >/dev/null 2>&1; then debs+=("$extra/$suite"); fi
done
(cd "$work" && apt-get download -qq "${debs[@]}" >&2)
for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/x"; done

vmlinuz=$(find "$work/x" -path '*/boot/vmlinuz*' -type f -o -path '*/modules/*/vmlinuz' -type f | head -1)
config=$(find "$work/x" -path '*/boot/config-*' -type f -o -path '*/modules/*/config' -type f | head -1)
{ [ -n "$vmlinuz" ] && [ -n "$config" ]; } || die "no vmlinuz/config in ${debs[*]}"
for opt in CONFIG_VIRTIO_FS CONFIG_FUSE_FS CONFIG_VIRTIO_PCI CONFIG_DEVTMPFS CONFIG_SERIAL_8250_CONSOLE \
    CONFIG_BLK_DEV_INITRD CONFIG_RD_GZIP; do
    grep -qx "$opt=y" "$config" || die "$pkg: $opt is not built in (need $opt=y)"
done

mkdir -p "$dest"
cp "$config" "$dest/config"
cp "$vmlinuz" "$dest/vmlinuz.tmp"
mv "$dest/vmlinuz.tmp" "$dest/vmlinuz"
apt-cache policy "$pkg" | sed -n 's/^ *Candidate: //p' | sed "s/^/$pkg /" >"$dest/version"
log "cached $(cat "$dest/version") in $dest"
echo "$dest/vmlinuz"
