#!/usr/bin/env bash
# Builds the Debian package (scripts/package-deb.sh), installs it with dpkg -i on this machine,
# checks what dpkg -L lists, starts the systemd unit's own command line by hand (ExecStart of
# union-virtiofsd@.service with %i = a test pool, whose /etc/union-virtiofsd/NAME.conf names
# two branches, one read-only) and boots the test guest against that installed daemon: the guest
# must see both branches merged, write into the RW one and be refused by the RO one. Then
# removes the package (dpkg --purge) and everything it made. Exit 0 only if every check held;
# the last line says how many checks passed.
#   scripts/check-package.sh [DEB]      (DEB: an already built package)
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$UVFS_ROOT"

deb=${1:-$(scripts/package-deb.sh)}
kernel=$(scripts/fetch-kernel.sh)
initrd=$(scripts/build-initramfs.sh)
name="uvfs-check-$$"
work=$(mktemp -d --tmpdir uvfs-package.XXXXXX)
conf="/etc/union-virtiofsd/$name.conf"
daemon_pid=""
checks=0
cleanup() {
    if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
        kill "$daemon_pid" 2>/dev/null || true
        wait "$daemon_pid" 2>/dev/null || true
    fi
    rm -f "$conf"
    rmdir /etc/union-virtiofsd 2>/dev/null || true
    as_root dpkg --purge union-virtiofsd >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
check() {
    local what=$1
    shift
    if "$@"; then
        checks=$((checks + 1))
        log "ok: $what"
    else
        die "$what"
    fi
}

[ ! -e /usr/libexec/union-virtiofsd ] || dpkg -S /usr/libexec/union-virtiofsd >/dev/null 2>&1 ||
    die "/usr/libexec/union-virtiofsd exists and belongs to no package: not overwriting it"
as_root dpkg -i "$deb" >&2
listed=$(dpkg -L union-virtiofsd)
for f in /usr/libexec/union-virtiofsd /usr/bin/union-virtiofsd \
    /usr/share/man/man1/union-virtiofsd.1 \
    /usr/share/bash-completion/completions/union-virtiofsd \
    /usr/share/zsh/vendor-completions/_union-virtiofsd \
    /usr/share/fish/vendor_completions.d/union-virtiofsd.fish \
    /usr/share/qemu/vhost-user/50-union-virtiofsd.json \
    /lib/systemd/system/union-virtiofsd@.service \
    /usr/share/doc/union-virtiofsd/examples/pool.conf \
    /usr/share/doc/union-virtiofsd/examples/libvirt-pool.xml \
    /usr/share/doc/union-virtiofsd/CHANGELOG.md; do
    check "dpkg -L lists $f, and it is there" \
        bash -c 'grep -qx "$1" <<<"$2" && [ -e "$1" ]' _ "$f" "$listed"
done
check "/usr/bin/union-virtiofsd runs the installed daemon" \
    bash -c '[ "$(readlink -f /usr/bin/union-virtiofsd)" = /usr/libexec/union-virtiofsd ]'
check "the installed daemon is static" \
    bash -c '! readelf -lW /usr/libexec/union-virtiofsd | grep -q "program interpreter"'
check "the descriptor names the installed daemon" \
    grep -q '"binary": "/usr/libexec/union-virtiofsd"' /usr/share/qemu/vhost-user/50-union-virtiofsd.json
check "the descriptor's capabilities come from the daemon" \
    bash -c '/usr/libexec/union-virtiofsd --print-capabilities | grep -q "\"type\": \"fs\""'
check "the man page is the daemon's" \
    bash -c 'grep -q "^.TH union-virtiofsd 1" /usr/share/man/man1/union-virtiofsd.1'
check "the package version is the crate's" \
    bash -c '[ "$(dpkg-query -W -f="\${Version}" union-virtiofsd)" = "$(sed -n "s/^version = \"\(.*\)\"/\1/p" Cargo.toml | head -1)-1" ]'

# The unit's command line, as systemd would run it for instance $name (RuntimeDirectory made).
unit=/lib/systemd/system/union-virtiofsd@.service
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
check "the unit has one ExecStart" test -n "$exec_start"
exec_start=${exec_start//%i/$name}
mkdir -p "$work/rw" "$work/ro" /run/union-virtiofsd /etc/union-virtiofsd
echo "from the read-only branch" >"$work/ro/base.txt"
echo "from the writable branch" >"$work/rw/top.txt"
# The example config with this test's branches (mergerfs's format), as a user would make it.
sed "s|^branches=.*|branches=$work/rw=RW:$work/ro=RO|; s|^minfreespace=.*|minfreespace=0|" \
    /usr/share/doc/union-virtiofsd/examples/pool.conf >"$conf"
socket="/run/union-virtiofsd/$name.sock"
log "starting the unit's command line: $exec_start"
# shellcheck disable=SC2086 # ExecStart is split into words as systemd does (no quotes in it).
$exec_start >"$work/daemon.log" 2>&1 &
daemon_pid=$!
wait_socket "$socket" "$daemon_pid" "$work/daemon.log"

cat >"$work/scenario.sh" <<'SCENARIO'
set -eu
cat /mnt/base.txt /mnt/top.txt
echo "written by the guest" > /mnt/new.txt
if echo x >> /mnt/base.txt 2>/dev/null; then echo "RO branch was written"; exit 1; fi
echo "guest checks done"
SCENARIO
qemu/run-guest.sh --socket "$socket" --kernel "$kernel" --initrd "$initrd" \
    --script "$work/scenario.sh" </dev/null >"$work/console.log" 2>&1 || true
check "the guest saw both branches through the installed daemon" \
    grep -q "from the read-only branch" "$work/console.log"
check "the guest's scenario passed" grep -q "=== SCENARIO EXIT 0 ===" "$work/console.log"
check "the guest's new file is on the RW branch" grep -qx "written by the guest" "$work/rw/new.txt"
check "the RO branch is unchanged" grep -qx "from the read-only branch" "$work/ro/base.txt"
if wait "$daemon_pid"; then rc=0; else rc=$?; fi
daemon_pid=""
check "the daemon exited 0 when the guest went away (systemd restarts it)" test "$rc" -eq 0
check "its socket is gone" test ! -e "$socket"

as_root dpkg --purge union-virtiofsd >&2
check "dpkg --purge removes the daemon" test ! -e /usr/libexec/union-virtiofsd
echo "package checks: $checks passed"
