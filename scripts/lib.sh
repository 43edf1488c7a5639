# shellcheck shell=bash
# Shared helpers for the scripts in this directory: repo paths, logging, apt sources.
# Sourced, never executed; must not change the caller's shell options or working directory.

UVFS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# What the scripts build or download once and reuse (guest kernels and archives, virtiofsd and
# the other tools, the fuzz build, the Debian base): outside the clone, so that a fresh clone on
# a machine that has run the tests before reuses them. Each entry is recreated when absent and
# rebuilt when its inputs' contents change (cache_key below), never trusted by age alone.
UVFS_CACHE="${UVFS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/union-virtiofsd}"
UVFS_GUEST_CACHE="${UVFS_GUEST_CACHE:-$UVFS_CACHE/guest}"
UVFS_TOOLS="$UVFS_CACHE/tools"

# log MSG...: progress goes to stderr so stdout stays free for results (paths).
log() { printf '[%s] %s\n' "$(basename "$0")" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# as_root CMD...: run CMD as root (directly, or with sudo when we are not root).
as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

export DEBIAN_FRONTEND=noninteractive

# apt_has_suite SUITE: true if some configured apt source lists SUITE.
apt_has_suite() {
    grep -rqsE "(^|[[:space:]])$1([[:space:]]|$)" /etc/apt/sources.list /etc/apt/sources.list.d/
}

# ensure_apt_suite SUITE: add "deb http://deb.debian.org/debian SUITE main" if missing, then
# refresh the package lists. Backports suites are NotAutomatic, so adding one never changes
# which version a plain `apt-get install` picks.
ensure_apt_suite() {
    local suite=$1
    if ! apt_has_suite "$suite"; then
        log "adding apt source for $suite"
        echo "deb http://deb.debian.org/debian $suite main" |
            as_root tee "/etc/apt/sources.list.d/$suite.list" >/dev/null
        apt_updated=""
    fi
    apt_update_once
}

# apt_update_once: run `apt-get update` at most once per script run.
apt_updated=""
apt_update_once() {
    if [ -z "$apt_updated" ]; then
        log "apt-get update"
        as_root apt-get update -qq >&2
        apt_updated=1
    fi
}

# cache_key WORD|FILE...: a digest of what a cached artifact is made from: each FILE's contents
# (or the WORD itself when it names no file: a version, a package list). Kept next to the
# artifact (cache_stamp) and compared on the next run (cache_fresh): a fresh clone's files are
# all newer than any cache, so modification times cannot tell whether an input changed.
cache_key() {
    local a
    for a in "$@"; do
        if [ -f "$a" ]; then
            # The name, not the path: a script is run by a relative path from one place and by
            # an absolute one from another (the tests), and a fresh clone is elsewhere.
            printf 'file %s\n' "${a##*/}"
            cat "$a"
        else
            printf 'word %s\n' "$a"
        fi
    done | sha256sum | cut -d' ' -f1
}

# cache_fresh OUT KEY: true when OUT exists (non-empty) and was made from inputs with this KEY.
cache_fresh() {
    [ -s "$1" ] && [ "$(cat "$1.key" 2>/dev/null)" = "$2" ]
}

# cache_stamp OUT KEY: records that OUT was made from inputs with this KEY.
cache_stamp() {
    printf '%s\n' "$2" >"$1.key.tmp"
    mv "$1.key.tmp" "$1.key"
}

# wait_socket SOCKET PID LOG: waits (at most 20 s) until the daemon PID has made SOCKET; dies
# with its LOG if it exits first or never makes it.
wait_socket() {
    local socket=$1 pid=$2 log=$3 _
    for _ in $(seq 400); do
        [ -S "$socket" ] && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    [ -S "$socket" ] && return 0
    cat "$log" >&2
    die "the daemon made no socket $socket"
}

# wait_mount POOL PID LOG WHO: waits (at most 10 s) until the FUSE server PID (WHO, for the
# message) has mounted POOL; dies with its LOG if it exits first or never mounts it.
wait_mount() {
    local pool=$1 pid=$2 log=$3 who=$4 _
    for _ in $(seq 200); do
        mountpoint -q "$pool" && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    mountpoint -q "$pool" && return 0
    cat "$log" >&2
    die "$who did not mount $pool"
}

# cargo_out PROFILE: the directory of this workspace's PROFILE (debug, release) binaries and
# examples. .cargo/config.toml names the host's target (for the static link), so cargo puts
# them under target/<triple>/ (or $CARGO_TARGET_DIR/<triple>/).
cargo_out() {
    echo "${CARGO_TARGET_DIR:-$UVFS_ROOT/target}/$(rustc -vV | sed -n 's/^host: //p')/$1"
}

# copy_libs DEST PROG...: copies the shared libraries PROG... load (ldd) into DEST, at the same
# paths, for a guest archive.
copy_libs() {
    local dest=$1 lib
    shift
    for lib in $(for f in "$@"; do ldd "$f"; done | grep -o '/[^ ]*' | sort -u); do
        mkdir -p "$dest$(dirname "$lib")"
        cp -L "$lib" "$dest$lib"
    done
}

# pack_cpio DIR OUT: DIR's contents (owned by root, sorted) as an uncompressed newc cpio
# archive at OUT, written to OUT.tmp first so that a half-written archive is never cached.
pack_cpio() {
    (cd "$1" && find . -mindepth 1 -print0 | LC_ALL=C sort -z |
        cpio --null -o -H newc --owner=0:0 --quiet) >"$2.tmp"
    mv "$2.tmp" "$2"
}

# install_pjdfstest: the POSIX conformance suite pjdfstest (the Rust port, pinned), built by
# cargo into $UVFS_TOOLS/pjdfstest once (testkit::pjdfstest finds it there); prints its path.
PJDFSTEST_VERSION=0.2.2
install_pjdfstest() {
    local bin="$UVFS_TOOLS/pjdfstest/bin/pjdfstest"
    if ! [ -x "$bin" ] || ! "$bin" --version 2>/dev/null | grep -q "$PJDFSTEST_VERSION"; then
        log "cargo install pjdfstest $PJDFSTEST_VERSION"
        cargo install --quiet --locked pjdfstest --version "$PJDFSTEST_VERSION" \
            --root "$UVFS_TOOLS/pjdfstest" >&2
    fi
    echo "$bin"
}

# install_fsx: the data-integrity exerciser fsx (pinned), built by cargo into $UVFS_TOOLS/fsx
# once (testkit::bin::tool finds it there); prints its path.
install_fsx() {
    local bin="$UVFS_TOOLS/fsx/bin/fsx"
    if [ ! -x "$bin" ]; then
        log "cargo install fsx 0.3.2"
        cargo install --quiet --locked fsx --version 0.3.2 --root "$UVFS_TOOLS/fsx" >&2
    fi
    echo "$bin"
}

# install_virtiofsd: virtiofsd 1.14, the reference daemon (cargo install'ed into
# $UVFS_TOOLS/virtiofsd once); prints its path.
install_virtiofsd() {
    local vfsd="$UVFS_TOOLS/virtiofsd/bin/virtiofsd"
    if [ ! -x "$vfsd" ]; then
        cargo install --locked virtiofsd --version 1.14.0 --root "$UVFS_TOOLS/virtiofsd" >&2
    fi
    echo "$vfsd"
}

# bench_tools: what the guest benchmarks share. virtiofsd 1.14 (cargo install'ed into
# $UVFS_TOOLS if absent), fio, this daemon's release build, and the guest archive with fio,
# coreutils' date and a source tree (about 2,000 headers from /usr/include) under /opt/bench.
# Sets vfsd, ours and bench_cpio. UVFS_DAEMON=PATH benchmarks that binary instead of a copy of
# the tree's release build (another build of this daemon, for an A/B comparison).
bench_tools() {
    vfsd=$(install_virtiofsd)
    command -v fio >/dev/null || as_root apt-get install -y -qq --no-install-recommends fio >&2
    if [ -n "${UVFS_DAEMON:-}" ]; then
        [ -x "$UVFS_DAEMON" ] || die "UVFS_DAEMON=$UVFS_DAEMON is not an executable"
        ours=$UVFS_DAEMON
    else
        (cd "$UVFS_ROOT" && cargo build --quiet --release --bin union-virtiofsd >&2)
        # Run as installed, a copy, like virtiofsd (cargo install copies it): the linker writes
        # its output through a mapping, which leaves it in the page cache as 4 KiB pages, where
        # a copied binary (or one read from disk) sits in large folios, and a fault on its code
        # maps the whole folio: the same binary started 0.8 MiB larger from a copy.
        ours="$UVFS_TOOLS/union-virtiofsd/union-virtiofsd"
        mkdir -p "${ours%/*}"
        cp "$(cargo_out release)/union-virtiofsd" "$ours.tmp"
        mv "$ours.tmp" "$ours"
    fi
    bench_cpio="$UVFS_GUEST_CACHE/bench.cpio"
    local key
    key=$(cache_key "${BASH_SOURCE[0]}" /usr/bin/fio /usr/bin/date)
    if ! cache_fresh "$bench_cpio" "$key"; then
        local w p
        w=$(mktemp -d)
        chmod 755 "$w"
        mkdir -p "$w/opt/bench/bin"
        for p in /usr/bin/fio /usr/bin/date; do install -m 755 "$p" "$w/opt/bench/bin/"; done
        copy_libs "$w" /usr/bin/fio /usr/bin/date
        tar -C /usr/include -cf "$w/opt/bench/tree.tar" linux asm-generic x86_64-linux-gnu
        mkdir -p "$UVFS_GUEST_CACHE"
        pack_cpio "$w" "$bench_cpio"
        cache_stamp "$bench_cpio" "$key"
        rm -rf "$w"
    fi
}

# median_table HEAD_OURS HEAD_THEIRS LOWER FILE: the table of medians the guest benchmarks
# print from FILE's "ours|theirs ROW VALUE" lines (rows in first-seen order), with the ratio
# ours / theirs, inverted for the rows matching the awk regex LOWER (where less is better), so
# that above 1 is ours ahead on every row, and in how many runs ours was ahead: the k-th value
# of ours against the k-th of theirs (the same run of separate boots, round of one boot, or
# boot), as runs on this host move by more than the gaps measured. "ROW RATIO" lines go to
# stderr (for a plot).
median_table() {
    awk -v ho="$1" -v ht="$2" -v lower="$3" '
    function median(list,   n, a, i, j, t) {
        n = split(list, a, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    # ahead(OURS, THEIRS, LESS): "k/n", ours ahead in k of the n pairs (strictly).
    function ahead(o, t, less,   n, m, x, y, i, k) {
        n = split(o, x, " "); m = split(t, y, " "); if (m < n) n = m
        for (i = 1; i <= n; i++) k += less ? (x[i] + 0 < y[i] + 0) : (x[i] + 0 > y[i] + 0)
        return (k + 0) "/" n
    }
    { v[$1, $2] = v[$1, $2] " " $3; if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 } }
    END {
        printf "| row | %s | %s | ratio | ours ahead |\n|---|---|---|---|---|\n", ho, ht
        for (k = 1; k <= n; k++) {
            r = order[k]; a = median(v["ours", r]); b = median(v["theirs", r]); less = r ~ lower
            ratio = (less ? (a > 0 ? b / a : 0) : (b > 0 ? a / b : 0))
            printf "| %s | %s | %s | %.2fx | %s |\n", r, a, b, ratio, ahead(v["ours", r], v["theirs", r], less)
            printf "%s %.3f\n", r, ratio > "/dev/stderr"
        }
    }' "$4"
}

# run_ratios LOWER FILE: per row of FILE (as median_table's), the ratio of each run (ours'
# k-th value against theirs' k-th, inverted for rows matching LOWER: above 1 is ours ahead),
# their geometric mean and its standard error (of the mean of the logs, as a factor): how
# far apart the runs are, next to the table of medians.
run_ratios() {
    awk -v lower="$1" '
    { v[$1, $2] = v[$1, $2] " " $3; if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 } }
    END {
        print "| row | runs (ours ahead above 1) | geometric mean | standard error |"
        print "|---|---|---|---|"
        for (k = 1; k <= n; k++) {
            r = order[k]; m = split(v["ours", r], x, " "); c = split(v["theirs", r], y, " ")
            if (c < m) m = c
            list = ""; sum = 0; sq = 0; used = 0
            for (i = 1; i <= m; i++) {
                if (x[i] <= 0 || y[i] <= 0) continue
                q = r ~ lower ? y[i] / x[i] : x[i] / y[i]
                list = list sprintf("%s%.2f", used ? " " : "", q)
                l = log(q); sum += l; sq += l * l; used++
            }
            if (!used) continue
            mean = sum / used
            se = used > 1 ? sqrt((sq - used * mean * mean) / (used - 1) / used) : 0
            printf "| %s | %s | %.2fx | %.0f%% |\n", r, list, exp(mean), (exp(se) - 1) * 100
        }
    }' "$2"
}

# opcodes LOG: "opcode count" lines from a daemon's debug log (this daemon's router logs
# "unique=N opcode=N" as `fuse::server`, before the protocol layer as `dispatch`, virtiofsd's server "Received [unknown ]request: opcode=Name (N)" or
# "opcode=N").
opcodes() {
    sed -nE 's/.*(dispatch|fuse::server)\] unique=[0-9]+ opcode=([0-9]+).*/\2/p;
             s/.*Received (unknown )?request: opcode=([A-Za-z]+ \()?([0-9]+).*/\3/p' "$1" |
        sort -n | uniq -c | awk '{print $2, $1}'
}

# request_table HEAD_OURS HEAD_THEIRS COUNTS: the table of FUSE requests both daemons received,
# from COUNTS' "SET ours|theirs OPCODE COUNT" lines (SET: the fsx mix, the guest scenario), one
# row per set and opcode with the two counts side by side.
request_table() {
    echo "| set | opcode | $1 | $2 |"
    echo "|---|---:|---:|---:|"
    awk '{k = $1 " " $3; seen[k] = 1; n[k, $2] = $4}
         END {for (k in seen) {split(k, a, " ");
              printf "| %s | %s | %d | %d |\n", a[1], a[2], n[k, "ours"], n[k, "theirs"]}}' \
        "$3" | sort -t'|' -k2,2 -k3,3n
}

# round_order I: who goes first in round I of a guest benchmark: "ours theirs" in odd rounds,
# "theirs ours" in even ones.
round_order() {
    if [ $(($1 % 2)) -eq 0 ]; then echo theirs ours; else echo ours theirs; fi
}

# side_by_side_start OUT OURS_ARG... -- THEIRS_ARG...: both daemons for one guest boot with
# the two side by side in it (the guest benchmarks' --same-guest): a fresh 1 GiB tmpfs each,
# this daemon ($ours) serving SIDE_DIRS[0] and virtiofsd ($vfsd) SIDE_DIRS[1], each with its
# own extra arguments, under GNU time (OUT/ours.time, OUT/theirs.time: "TIME user system
# minor-faults voluntary-switches involuntary-switches" once it exits), logging to
# OUT/WHO.daemon.log. Sets SIDE_DIRS, SIDE_PIDS (GNU time's) and SIDE_DAEMONS (the daemons').
side_by_side_start() {
    local out=$1 ours_args=() i
    shift
    while [ $# -gt 0 ] && [ "$1" != -- ]; do ours_args+=("$1"); shift; done
    [ $# -eq 0 ] || shift
    SIDE_DIRS=("$(mktemp -d /tmp/uvfs-side.XXXXXX)" "$(mktemp -d /tmp/uvfs-side.XXXXXX)")
    for i in 0 1; do mount -t tmpfs -o size=1G tmpfs "${SIDE_DIRS[$i]}"; done
    /usr/bin/time -f 'TIME %U %S %R %w %c' -o "$out/ours.time" "$ours" \
        --socket-path "${SIDE_DIRS[0]}.sock" --shared-dir "${SIDE_DIRS[0]}" "${ours_args[@]}" \
        >"$out/ours.daemon.log" 2>&1 &
    SIDE_PIDS=("$!")
    /usr/bin/time -f 'TIME %U %S %R %w %c' -o "$out/theirs.time" "$vfsd" \
        --socket-path "${SIDE_DIRS[1]}.sock" --shared-dir "${SIDE_DIRS[1]}" "$@" \
        >"$out/theirs.daemon.log" 2>&1 &
    SIDE_PIDS+=("$!")
    for _ in $(seq 200); do
        [ -S "${SIDE_DIRS[0]}.sock" ] && [ -S "${SIDE_DIRS[1]}.sock" ] && break
        sleep 0.05
    done
    [ -S "${SIDE_DIRS[0]}.sock" ] && [ -S "${SIDE_DIRS[1]}.sock" ] ||
        die "side by side: a daemon is not listening (see $out/ours.daemon.log, $out/theirs.daemon.log)"
    SIDE_DAEMONS=()
    for i in 0 1; do
        SIDE_DAEMONS+=("$(awk '{print $1; exit}' /proc/"${SIDE_PIDS[$i]}"/task/*/children)")
    done
}

# side_by_side_guest ARG...: qemu/run-guest.sh (2 vCPUs, 1 GiB) with this daemon's share as
# the first device (tag share, which /init mounts on /mnt) and virtiofsd's as a second one
# (tag theirs, which the scenario mounts), and ARG....
side_by_side_guest() {
    bash "$UVFS_ROOT/qemu/run-guest.sh" --socket "${SIDE_DIRS[0]}.sock" \
        --device "${SIDE_DIRS[1]}.sock:theirs" --smp 2 --mem 1G "$@"
}

# side_by_side_stop: waits for both daemons to exit (they do once the guest's QEMU is gone),
# stops them if not, and removes their directories and sockets.
side_by_side_stop() {
    local p d
    for p in "${SIDE_PIDS[@]}"; do
        for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
        pkill -TERM -P "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    for d in "${SIDE_DIRS[@]}"; do
        umount "$d"; rmdir "$d"; rm -f "$d.sock" "$d.sock.pid"
    done
}

# mergerfs_mount POOL BRANCH...: mounts mergerfs (the apt package, installed if absent) in the
# foreground, in the background of this shell, with the BRANCHes (colon-joined, in order) on
# POOL, allow_other so that a sandboxed virtiofsd sharing POOL may enter it, minfreespace=0
# as the benchmarks run this daemon (mergerfs' default, 4G, refuses every create on a 1 GiB
# tmpfs), and otherwise mergerfs' defaults (category.create=epmfs, cache.files=libfuse).
# Sets MERGERFS_PID.
mergerfs_mount() {
    local pool=$1 list
    shift
    command -v mergerfs >/dev/null || as_root apt-get install -y -qq --no-install-recommends mergerfs >&2
    list=$(IFS=:; echo "$*")
    mkdir -p "$pool"
    mergerfs -f -o allow_other,minfreespace=0 "$list" "$pool" >"$pool.mergerfs.log" 2>&1 &
    MERGERFS_PID=$!
    wait_mount "$pool" "$MERGERFS_PID" "$pool.mergerfs.log" mergerfs
}

# proc_cpu PID: the CPU seconds (user + system) PID and the children it has waited for used.
proc_cpu() {
    awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15 + $16 + $17) / hz}' /proc/"$1"/stat 2>/dev/null ||
        echo 0
}

# mergerfs_umount POOL: sets MERGERFS_CPU to mergerfs' CPU seconds (proc_cpu), unmounts
# POOL (lazily if busy) and waits for mergerfs to exit.
mergerfs_umount() {
    local pool=$1
    # shellcheck disable=SC2034 # read by the caller
    MERGERFS_CPU=$(proc_cpu "$MERGERFS_PID")
    umount "$pool" 2>/dev/null || umount -l "$pool" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$MERGERFS_PID" 2>/dev/null || break; sleep 0.05; done
    kill "$MERGERFS_PID" 2>/dev/null || true
    wait "$MERGERFS_PID" 2>/dev/null || true
    rmdir "$pool" 2>/dev/null || true
    rm -f "$pool.mergerfs.log"
}

# release_daemon: builds this tree's release daemon (quietly) and prints its path.
release_daemon() {
    cargo build -q --release --bin union-virtiofsd >&2
    echo "$(cargo_out release)/union-virtiofsd"
}

# awk functions for the benchmark tables (prepend to a program: awk "$AWK_STATS"'...'):
# median(LIST) and range(LIST) ("lo–hi", as written) of a space-separated list of numbers.
# shellcheck disable=SC2034
AWK_STATS='
function median(list,   n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function range(list,   n, a, i, lo, hi) {
    n = split(list, a, " "); lo = hi = a[1]
    for (i = 2; i <= n; i++) { if (a[i] + 0 < lo + 0) lo = a[i]; if (a[i] + 0 > hi + 0) hi = a[i] }
    return lo "–" hi
}
'
