#!/usr/bin/env bash
# Boots the union-virtiofsd test guest against a vhost-user-fs backend that is already listening.
#
#   qemu/run-guest.sh --socket /tmp/u.sock [--tag share] [--queue-size 1024] [--mem 512M]
#                     [--request-queues 1]
#                     [--smp 1] [--script scenario.sh] [--append 'extra kernel args']
#                     [--kernel vmlinuz] [--initrd initramfs.cpio.gz]
#                     [--extra-initrd archive.cpio]... [--no-initrd] [--allow-reboot]
#                     [--qmp /tmp/qmp.sock] [--incoming unix:/tmp/mig.sock|defer]
#                     [--device /tmp/v.sock:TAG]... [--drive disk.img]...
#
# Start the backend first, e.g.
#   union-virtiofsd --socket-path /tmp/u.sock --branch /srv/a=RW --branch /srv/b=RO &
#   qemu/run-guest.sh --socket /tmp/u.sock                 # interactive shell, share on /mnt
#   qemu/run-guest.sh --socket /tmp/u.sock --script t.sh   # run t.sh in the guest, then power off
# Interactive: "exit" in the guest shell powers off; Ctrl-A X quits QEMU.
#
# Without --kernel/--initrd, scripts/fetch-kernel.sh and scripts/build-initramfs.sh provide them
# (cached in $UVFS_GUEST_CACHE, scripts/lib.sh). With --script, the file is packed as /scenario.sh into a small cpio
# archive appended to the initrd; the guest's /init (qemu/init) runs it with /mnt as working
# directory and prints "=== SCENARIO EXIT <status> ===" before powering off. Each
# --extra-initrd archive (uncompressed newc cpio, e.g. scripts/build-pjdfstest-initrd.sh's) is
# appended the same way, so its files are in the guest's root filesystem. With --no-initrd the
# kernel boots straight from the share (--append 'root=share rootfstype=virtiofs rw init=…'):
# no initramfs, so --script and --extra-initrd do not apply.
#
# QEMU flags, and why:
#   -accel tcg                 software emulation: nested KVM is not available on our machines.
#   -cpu max                   every feature TCG can emulate (faster string ops, no warnings).
#   -m SIZE -object memory-backend-memfd,id=mem,size=SIZE,share=on -numa node,memdev=mem
#                              guest RAM in a shared memfd: vhost-user backends map guest memory
#                              through the fds QEMU sends, so RAM must be shareable.
#   -chardev socket,id=fs0,path=SOCK
#                              the vhost-user control socket (the backend is the server).
#   -device vhost-user-fs-pci,chardev=fs0,tag=TAG,queue-size=N,num-request-queues=Q
#                              the virtio-fs device; TAG is what the guest mounts; N is the request
#                              queue size (it bounds the pages per request: max_pages <= N - 4);
#                              Q request queues (a 6.11+ guest kernel spreads them over its
#                              CPUs; the backend must offer as many: --num-request-queues Q).
#   -kernel / -initrd / -append
#                              direct kernel boot, no disk. console=ttyS0 sends the console to the
#                              serial port; panic=-1 reboots at once on panic, which -no-reboot
#                              turns into a QEMU exit; uvfs.tag tells /init which tag to mount.
#   -nographic -nodefaults -serial mon:stdio
#                              no display and no default devices (no NIC, VGA, floppy); the serial
#                              console and the QEMU monitor (Ctrl-A C) multiplexed on stdio.
#   -no-reboot                 a guest reboot (or panic) exits QEMU instead of looping; with
#                              --allow-reboot a guest reboot resets the machine and boots the
#                              same kernel and initrd again against the same backend (a
#                              scenario must then tell its boots apart, e.g. by a file it left
#                              on the share), and only a poweroff ends QEMU.
#   -qmp unix:PATH,server=on,wait=off
#                              (--qmp PATH) a QMP control socket, e.g. to start a live migration
#                              (migrate, query-migrate) or quit the source after it.
#   -device vhost-user-fs-pci,chardev=fsN,tag=TAG,...
#                              (--device SOCK:TAG, repeatable) one more virtio-fs device per
#                              backend socket, e.g. a second daemon side by side with the first
#                              in the same guest (the scenario mounts TAG itself).
#   -drive file=IMG,if=virtio,format=raw
#                              (--drive IMG, repeatable) a raw disk image on virtio-blk
#                              (/dev/vda, /dev/vdb, ...; the guest needs the virtio_blk module,
#                              which our initramfs does not have: scripts/bench-walk.sh brings it).
#   -incoming URI              (--incoming URI) a migration destination: the machine is created
#                              but not booted; it waits for the migration stream on URI
#                              (unix:PATH, or defer for a later migrate-incoming on QMP) and
#                              then runs the migrated guest. Start it with the same options as
#                              the source (same --mem, --smp, --queue-size, --tag, --kernel,
#                              --initrd, --script, ...: the device set must match) and a backend
#                              of its own on --socket.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"

socket="" tag=share queue_size=1024 request_queues=1 mem=512M smp=1 script="" append="" kernel="" initrd="" noinitrd=0 reboot=(-no-reboot)
qmp=() incoming=() devices=() drives=()
extras=()
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
    case "$1" in
    --socket) socket=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --queue-size) queue_size=$2; shift 2 ;;
    --allow-reboot) reboot=(); shift ;;
    --request-queues) request_queues=$2; shift 2 ;;
    --mem) mem=$2; shift 2 ;;
    --smp) smp=$2; shift 2 ;;
    --script) script=$2; shift 2 ;;
    --append) append=$2; shift 2 ;;
    --kernel) kernel=$2; shift 2 ;;
    --initrd) initrd=$2; shift 2 ;;
    --extra-initrd) extras+=("$2"); shift 2 ;;
    --no-initrd) noinitrd=1; shift ;;
    --qmp) qmp=(-qmp "unix:$2,server=on,wait=off"); shift 2 ;;
    --incoming) incoming=(-incoming "$2"); shift 2 ;;
    --device) devices+=("$2"); shift 2 ;;
    --drive) drives+=(-drive "file=$2,if=virtio,format=raw"); shift 2 ;;
    -h | --help) usage 0 ;;
    *) echo "run-guest.sh: unknown argument: $1" >&2; usage 2 >&2 ;;
    esac
done
[ -n "$socket" ] || { echo "run-guest.sh: --socket is required" >&2; usage 2 >&2; }
[ -S "$socket" ] || { echo "run-guest.sh: $socket is not a socket: start the backend first" >&2; exit 2; }
command -v qemu-system-x86_64 >/dev/null ||
    { echo "run-guest.sh: qemu-system-x86_64 not found: run scripts/install-deps.sh" >&2; exit 2; }

[ -n "$kernel" ] || kernel=$("$root/scripts/fetch-kernel.sh")
[ -n "$initrd" ] || [ $noinitrd -eq 1 ] || initrd=$("$root/scripts/build-initramfs.sh")

if [ $noinitrd -eq 0 ] && { [ -n "$script" ] || [ ${#extras[@]} -gt 0 ]; }; then
    # initrd = generic initramfs + the extra archives + a cpio archive holding /scenario.sh.
    combined=$(mktemp --tmpdir uvfs-initrd.XXXXXX)
    stage=$(mktemp -d --tmpdir uvfs-scenario.XXXXXX)
    cp "$initrd" "$combined"
    # The kernel looks for an uncompressed archive only at a 4-byte-aligned offset (it skips zero
    # padding), so pad before each one.
    pad4() { head -c $(((4 - $(stat -c %s "$combined") % 4) % 4)) /dev/zero >>"$combined"; }
    for extra in "${extras[@]}"; do
        pad4
        cat "$extra" >>"$combined"
    done
    if [ -n "$script" ]; then
        install -m 755 "$script" "$stage/scenario.sh"
        pad4
        (cd "$stage" && echo scenario.sh | cpio -o -H newc --owner=0:0 --quiet) >>"$combined"
    fi
    # Keep it open on fd 3 and delete it now, so that nothing is left behind even though we exec
    # QEMU (which makes QEMU, not this shell, the process a caller waits for and kills).
    exec 3<"$combined"
    rm -rf "$combined" "$stage"
    initrd=/dev/fd/3
    # Tells /init to expect /scenario.sh (and to fail, not fall back to a shell, without it).
    [ -z "$script" ] || append="uvfs.scenario=1 $append"
fi

# One more vhost-user-fs device per --device SOCK:TAG.
device_args=()
for d in "${devices[@]}"; do
    [ -S "${d%:*}" ] || { echo "run-guest.sh: ${d%:*} is not a socket: start its backend first" >&2; exit 2; }
    n=$((${#device_args[@]} / 4 + 1))
    device_args+=(-chardev "socket,id=fs$n,path=${d%:*}"
        -device "vhost-user-fs-pci,chardev=fs$n,tag=${d##*:},queue-size=$queue_size")
done

initrd_args=()
[ $noinitrd -eq 1 ] || initrd_args=(-initrd "$initrd")
exec qemu-system-x86_64 \
    -accel tcg -cpu max -smp "$smp" \
    -m "$mem" \
    -object "memory-backend-memfd,id=mem,size=$mem,share=on" -numa node,memdev=mem \
    -chardev "socket,id=fs0,path=$socket" \
    -device "vhost-user-fs-pci,chardev=fs0,tag=$tag,queue-size=$queue_size,num-request-queues=$request_queues" \
    "${device_args[@]}" "${drives[@]}" \
    -kernel "$kernel" "${initrd_args[@]}" \
    -append "console=ttyS0 panic=-1 quiet loglevel=4 uvfs.tag=$tag $append" \
    -nographic -nodefaults -serial mon:stdio \
    "${reboot[@]}" "${qmp[@]}" "${incoming[@]}"
