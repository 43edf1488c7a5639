#!/usr/bin/env bash
# Builds the Debian package (cargo-deb 3.8.0, cargo install'ed into $UVFS_TOOLS once) from the
# release build as it ships (static, whole-program LTO; scripts/check-static.sh) and prints its
# path (target/<triple>/debian/union-virtiofsd_VERSION-1_ARCH.deb). What goes where is
# Cargo.toml's [package.metadata.deb]: the daemon in /usr/libexec with a /usr/bin link, the
# man page and bash/zsh/fish completions (printed by the binary itself), the vhost-user
# descriptor QEMU and libvirt look for, the systemd template unit union-virtiofsd@.service, and
# the examples (a pool's config, a libvirt domain with a multi-branch pool).
#   scripts/package-deb.sh
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$UVFS_ROOT"

cargo_deb="$UVFS_TOOLS/cargo-deb/bin/cargo-deb"
if [ ! -x "$cargo_deb" ] || ! "$cargo_deb" --version | grep -qx 'cargo-deb 3.8.0'; then
    cargo install --quiet --locked cargo-deb --version 3.8.0 --root "$UVFS_TOOLS/cargo-deb" >&2
fi
bin=$(scripts/check-static.sh)
share="$(cargo_out release)/share"
mkdir -p "$share"
"$bin" man >"$share/union-virtiofsd.1"
"$bin" completions bash >"$share/union-virtiofsd.bash"
"$bin" completions zsh >"$share/_union-virtiofsd"
"$bin" completions fish >"$share/union-virtiofsd.fish"
triple=$(rustc -vV | sed -n 's/^host: //p')
out="$(cargo_out release)/../debian"
mkdir -p "$out"
"$cargo_deb" --no-build --no-strip --target "$triple" --output "$out" -p union-virtiofsd >&2
deb=$(ls -t "$out"/union-virtiofsd_*.deb | head -1)
log "built $deb"
echo "$deb"
