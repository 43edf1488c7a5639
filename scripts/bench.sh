#!/usr/bin/env bash
# Benchmark union-virtiofsd (release build) and virtiofsd through vufs-bench on one tmpfs
# directory, printing one combined table. union-virtiofsd runs with minfreespace=0: mergerfs's
# 4G default floor would refuse creates on the 2G tmpfs. Extra arguments go to vufs-bench (e.g. --depth 32).
# Needs root (tmpfs mount). Installs virtiofsd 1.14 into $UVFS_TOOLS if absent (install_virtiofsd).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-1}"

vfsd="${VIRTIOFSD:-}"
if [[ -z "$vfsd" ]]; then
    scripts/install-deps.sh
    vfsd=$(install_virtiofsd)
fi

nice cargo build --release --bin union-virtiofsd -p union-virtiofsd
nice cargo build --release --bin vufs-bench -p vufs-frontend

mnt=$(mktemp -d /tmp/vufs-bench.XXXXXX)
cleanup() { umount "$mnt" 2>/dev/null || true; rmdir "$mnt" 2>/dev/null || true; }
trap cleanup EXIT
mount -t tmpfs -o size=2G tmpfs "$mnt"

"$(cargo_out release)/vufs-bench" --dir "$mnt" \
    --backend "union-virtiofsd=$(cargo_out release)/union-virtiofsd --socket-path {socket} --branch {dir} -o minfreespace=0" \
    --backend "virtiofsd=$vfsd --socket-path {socket} --shared-dir {dir} --cache never" \
    "$@"
