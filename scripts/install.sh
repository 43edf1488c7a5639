#!/usr/bin/env bash
# Installs union-virtiofsd where QEMU, libvirt and Lima look for a vhost-user backend:
#   PREFIX/libexec/union-virtiofsd                          the daemon
#   PREFIX/bin/union-virtiofsd                              a symlink to it
#   PREFIX/share/qemu/vhost-user/50-union-virtiofsd.json    the vhost-user descriptor ("type": "fs")
#   PREFIX/share/man/man1/union-virtiofsd.1                 the man page
#   PREFIX/share/{bash-completion/completions,zsh/vendor-completions,fish/vendor_completions.d}
#
#   scripts/install.sh [--prefix /usr] [--destdir DIR] [--binary PATH] [--as-virtiofsd]
#
# --binary uses an already built daemon instead of `cargo build --release`. --as-virtiofsd also
# makes PREFIX/libexec/virtiofsd point at it (mkosi and virtme-ng look for that name), unless a
# real virtiofsd is installed there. The man page and completions are printed by the binary
# itself (`union-virtiofsd man`, `union-virtiofsd completions SHELL`).
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

prefix=/usr destdir="" binary="" as_virtiofsd=0
while [ $# -gt 0 ]; do
    case "$1" in
    --prefix) prefix=$2; shift 2 ;;
    --destdir) destdir=$2; shift 2 ;;
    --binary) binary=$2; shift 2 ;;
    --as-virtiofsd) as_virtiofsd=1; shift ;;
    *) die "unknown argument $1 (see the header of $0)" ;;
    esac
done

cd "$UVFS_ROOT"
if [ -z "$binary" ]; then
    cargo build --release --quiet --bin union-virtiofsd
    binary=$(cargo_out release)/union-virtiofsd
fi
[ -x "$binary" ] || die "$binary is not an executable"

root="$destdir$prefix"
docs=$(mktemp -d)
trap 'rm -rf "$docs"' EXIT
"$binary" man >"$docs/union-virtiofsd.1"
"$binary" completions bash >"$docs/union-virtiofsd.bash"
"$binary" completions zsh >"$docs/_union-virtiofsd"
"$binary" completions fish >"$docs/union-virtiofsd.fish"

install -D -m 755 "$binary" "$root/libexec/union-virtiofsd"
mkdir -p "$root/bin"
ln -sf "$prefix/libexec/union-virtiofsd" "$root/bin/union-virtiofsd"
mkdir -p "$root/share/qemu/vhost-user"
sed "s|\"binary\": \"[^\"]*\"|\"binary\": \"$prefix/libexec/union-virtiofsd\"|" \
    qemu/50-union-virtiofsd.json >"$root/share/qemu/vhost-user/50-union-virtiofsd.json"
install -D -m 644 "$docs/union-virtiofsd.1" "$root/share/man/man1/union-virtiofsd.1"
install -D -m 644 "$docs/union-virtiofsd.bash" \
    "$root/share/bash-completion/completions/union-virtiofsd"
install -D -m 644 "$docs/_union-virtiofsd" "$root/share/zsh/vendor-completions/_union-virtiofsd"
install -D -m 644 "$docs/union-virtiofsd.fish" \
    "$root/share/fish/vendor_completions.d/union-virtiofsd.fish"
if [ $as_virtiofsd = 1 ]; then
    if [ -e "$root/libexec/virtiofsd" ] && ! [ -L "$root/libexec/virtiofsd" ]; then
        log "a real virtiofsd is installed at $root/libexec/virtiofsd: left alone"
    else
        ln -sf "$prefix/libexec/union-virtiofsd" "$root/libexec/virtiofsd"
    fi
fi
log "installed into $root"
