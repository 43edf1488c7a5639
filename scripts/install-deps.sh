#!/usr/bin/env bash
# Installs the host packages the real-guest tests and the demo need: QEMU 10 from bookworm-backports
# (vhost-user-fs with memfd shared memory), busybox-static and cpio for the guest initramfs, and the
# build dependencies of the reference virtiofsd, libvirt 11 (bookworm-backports) for the launcher
# test, python3 (the tests' inherited-socket wrapper) and uidmap (newuidmap/newgidmap for the
# unprivileged daemon's --uid-map), stress-ng (the guest's lock stressors) and fio (the guest's
# I/O load during an upgrade in place), attr and acl (getfattr/setfattr, getfacl/setfacl for
# the guest's xattr and ACL tests), checkpolicy (compiles the guest's SELinux test policy:
# tests/guest/security_label.rs). Also makes the
# system user uvfs-test with a subordinate id range (/etc/subuid, /etc/subgid) for the tests of an unprivileged daemon (tests/cli/confinement.rs) and of a user's host mount through fusermount3 (tests/host/user.rs; fuse3 gives fusermount3, e2fsprogs the ext4 image of tests/host/direct_io.rs). Adds the bookworm-backports apt source if missing.
# Does nothing (no apt at all) when everything is already present. Safe with no stdin and CI=true.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

# package -> a file it installs; a package counts as present when that file exists.
declare -A probe=(
    [qemu-system-x86]=/usr/bin/qemu-system-x86_64
    [busybox-static]=/bin/busybox
    [cpio]=/usr/bin/cpio
    [pkg-config]=/usr/bin/pkg-config
    [libseccomp-dev]=/usr/include/seccomp.h
    [libcap-ng-dev]=/usr/include/cap-ng.h
    [fuse3]=/usr/bin/fusermount3
    [mergerfs]=/usr/bin/mergerfs
    [python3]=/usr/bin/python3
    [uidmap]=/usr/bin/newuidmap
    [xfsprogs]=/usr/sbin/xfs_io
    [e2fsprogs]=/usr/bin/lsattr
    [debootstrap]=/usr/sbin/debootstrap
    [stress-ng]=/usr/bin/stress-ng
    [fio]=/usr/bin/fio
    [attr]=/usr/bin/getfattr
    [acl]=/usr/bin/setfacl
    [checkpolicy]=/usr/bin/checkpolicy
)
# The unprivileged test daemon's user: no home, no shell, 65536 subordinate ids.
if ! id uvfs-test >/dev/null 2>&1; then
    as_root useradd --system --no-create-home --shell /usr/sbin/nologin uvfs-test
fi
for f in /etc/subuid /etc/subgid; do
    grep -q '^uvfs-test:' "$f" 2>/dev/null || echo "uvfs-test:600000:65536" | as_root tee -a "$f" >/dev/null
done

missing=()
for pkg in "${!probe[@]}"; do
    [ -e "${probe[$pkg]}" ] || missing+=("$pkg")
done

# QEMU must come from backports: bookworm's own 7.2 is too old for what we test.
qemu_ok=0
if [ -x /usr/bin/qemu-system-x86_64 ]; then
    major=$(/usr/bin/qemu-system-x86_64 --version | sed -n 's/^QEMU emulator version \([0-9]*\).*/\1/p')
    [ "${major:-0}" -ge 8 ] && qemu_ok=1
fi

# libvirt 11 from backports too: the launcher test runs the real libvirtd (tests/guest/libvirt.rs).
libvirt_ok=0
if [ -x /usr/sbin/libvirtd ] && [ -x /usr/bin/virsh ]; then
    lv=$(/usr/sbin/libvirtd --version | sed -n 's/.* \([0-9]*\)\.[0-9.]*$/\1/p')
    [ "${lv:-0}" -ge 11 ] && libvirt_ok=1
fi

if [ ${#missing[@]} -eq 0 ] && [ $qemu_ok -eq 1 ] && [ $libvirt_ok -eq 1 ] &&
    apt_has_suite bookworm-backports; then
    log "all host dependencies present"
    exit 0
fi

ensure_apt_suite bookworm-backports
log "installing: ${missing[*]:-} qemu-system-x86 libvirt/bookworm-backports"
as_root apt-get install -y -qq --no-install-recommends \
    -t bookworm-backports qemu-system-x86 libvirt-daemon-driver-qemu libvirt-daemon libvirt-clients >&2
others=()
for pkg in "${missing[@]}"; do
    [ "$pkg" = qemu-system-x86 ] || others+=("$pkg")
done
if [ ${#others[@]} -gt 0 ]; then
    as_root apt-get install -y -qq --no-install-recommends "${others[@]}" >&2
fi
log "done: $(/usr/bin/qemu-system-x86_64 --version | head -1)"
