#!/usr/bin/env bash
# Instructions per request, union-virtiofsd against virtiofsd 1.14, side by side. Each daemon
# runs under `valgrind --tool=callgrind`, which counts the instructions it executes (user space
# only: the kernel's work in a system call is not counted) rather than seconds, so a run
# repeats on a shared, loaded machine. The frontend is vufs-instr (crates/frontend), one
# request at a time (depth 1), on a fresh directory of one tmpfs for every run.
#
#   scripts/bench-instructions.sh [--out DIR] [--n N] [--rows ROW,ROW]
#
# Start-up is subtracted exactly: every row runs each daemon twice, with N and with 2N requests
# of its kind. Both runs do the same start-up, vhost-user set-up, INIT and row set-up (its files
# are laid out natively; the set-up lookups are sized for 2N in both), then N or 2N requests,
# each sent once every daemon thread sleeps in a system call (as a guest's next request finds
# it). Once idle after the last reply, the daemon is ended with SIGUSR2, which neither daemon
# catches, while the frontend is still connected: no disconnect handling or teardown runs in
# either (virtiofsd would otherwise free the nodes a create made, counted against create).
# Callgrind still writes its counts on that signal, so (count(2N) - count(N)) / N is what one
# more request costs, start-up and set-up cancelled. Repeat runs agree within 0.1% for
# union-virtiofsd and 2% for virtiofsd (host inode numbers and hash seeds change the maps' work
# a little). A cost that grows with the number of nodes the daemon holds (union-virtiofsd
# trims its node descriptors past node-fds=512, scanning its table) is averaged over the
# N..2N-th request, so the create, unlink and readdirplus rows depend on N.
#
# Rows (N defaults to 500; the 1 MiB rows use N/10, readdirplus N/50):
#   read/write 4 KiB, 1 MiB   one 16 MiB file opened O_RDWR, offsets cycling through it
#   lookup                    a name the daemon already knows (100 names cycled: the guest
#                             revalidating dentries), lookup (missing) a name that is not there
#   getattr, setattr          the same 100 nodes; setattr is a chmod (FATTR_MODE)
#   create                    O_CREAT|O_WRONLY of a new name (the handle is kept open)
#   unlink                    names the daemon knows (looked up in the set-up)
#   readdirplus               one listing of a 1,000-entry directory as a Linux guest does it:
#                             OPENDIR, READDIRPLUS with one 4 KiB page each (about 40), RELEASEDIR;
#                             per listing, the entries being known from the first one
# Also accepted by --rows, not run by default (the rest of what fsx's mix sends, on the same
# 16 MiB file, open O_RDWR): getxattr (security.capability, size only, none there: ENODATA,
# as a guest asks before a write; virtiofsd then gets --xattr, without which it answers
# ENOSYS once and is never asked again), fsync, fallocate (mode 0, 4 KiB inside the file),
# truncate (the size one page shorter and back), open-close (OPEN, FLUSH, RELEASE: three
# requests per row request), stat (a guest's fstat after a write: STATX with the handle, or
# GETATTR with it from a daemon that answered STATX ENOSYS once, as virtiofsd 1.14 does; the
# guest then never sends STATX again), readdir (the readdirplus row's listing with READDIR in
# 32 KiB buffers, names only, as vufs-bench's readdir row reads it).
#
# Both daemons: --sandbox none and --seccomp none (valgrind cannot follow the namespace
# sandbox's fork and its own system calls would hit the filter), --thread-pool-size 0, so
# every request is served on the queue thread in both and no hand-off between threads is
# counted; otherwise their defaults (union-virtiofsd also gets minfreespace=0, the tmpfs being
# smaller than mergerfs's 4G floor, and --max-write 4177920, so that the 1 MiB WRITE row is
# one request as in virtiofsd: its default sends a guest's 1 MiB write as two 512 KiB ones).
# union-virtiofsd is a release build with debug info (CARGO_PROFILE_RELEASE_DEBUG=true, in
# target/callgrind so the normal release build is left alone); virtiofsd is the
# cargo-installed 1.14.
#
# Output (stdout and DIR/instructions.md, DIR defaulting to .cache/bench): one table (row,
# instructions per request of each daemon, ratio, whether the 0.8x target is met), then the
# five most expensive functions of union-virtiofsd per row by self cost (the function's own
# instructions, callees excluded; libc's malloc and memcpy count as functions), per request,
# from the same difference of the two runs. The callgrind files stay in DIR/instructions/.
# Needs root (tmpfs mount) and valgrind 3.20 or later (openat2): on Debian 12, whose valgrind
# is 3.19, Debian 13's package is unpacked (not installed) into $UVFS_TOOLS/valgrind. Not
# part of the test suite (about 3 minutes, plus a first build of target/callgrind).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. scripts/lib.sh

out="$root/.cache/bench"
n=500
rows="read-4k,write-4k,read-1m,write-1m,lookup,lookup-missing,getattr,setattr,create,unlink,readdirplus"
while [ $# -gt 0 ]; do
    case "$1" in
    --out) out=$2; shift 2 ;;
    --n) n=$2; shift 2 ;;
    --rows) rows=$2; shift 2 ;;
    *) die "unknown argument $1 (see the header of $0)" ;;
    esac
done
raw="$out/instructions"
mkdir -p "$raw"
rm -f "$raw"/*.out "$raw"/*.log

# Valgrind 3.20+ (openat2) as $valgrind and its callgrind_annotate as $annotate.
vg_version() { "$@" --version 2>/dev/null | sed -n 's/^valgrind-\([0-9]*\)\.\([0-9]*\).*/\1 \2/p'; }
valgrind_tools() {
    local v
    v=$(vg_version valgrind || true)
    if [ -n "$v" ] && [ "${v% *}" -eq 3 ] && [ "${v#* }" -ge 20 ]; then
        valgrind=valgrind annotate=callgrind_annotate
        return
    fi
    local dir="$UVFS_TOOLS/valgrind"
    if [ ! -x "$dir/usr/bin/valgrind.bin" ]; then
        log "unpacking valgrind from Debian 13 into $dir (this system's is too old for openat2)"
        local apt="$dir/apt"
        mkdir -p "$apt/lists/partial" "$apt/archives/partial"
        echo "deb http://deb.debian.org/debian trixie main" >"$apt/sources.list"
        # Private lists and archive: the system's apt sources and candidates are untouched.
        local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
            -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache::Archives=$apt/archives"
            -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o APT::Sandbox::User=root)
        apt-get "${opts[@]}" update -qq >&2
        (cd "$apt/archives" && apt-get "${opts[@]}" download valgrind >&2)
        dpkg-deb -x "$apt"/archives/valgrind_*.deb "$dir"
    fi
    # Its tools are static and the launcher needs glibc 2.34; only vgdb wants a newer one.
    export VALGRIND_LIB="$dir/usr/libexec/valgrind"
    valgrind="$dir/usr/bin/valgrind.bin" annotate="$dir/usr/bin/callgrind_annotate"
}
valgrind_tools
vfsd=$(install_virtiofsd)
export CARGO_PROFILE_RELEASE_DEBUG=true CARGO_TARGET_DIR="$root/target/callgrind"
nice cargo build --quiet --release --bin union-virtiofsd -p union-virtiofsd >&2
nice cargo build --quiet --release --bin vufs-instr -p vufs-frontend >&2
bin=$(cargo_out release)

work=$(mktemp -d /tmp/vufs-instr.XXXXXX)
mnt="$work/tmpfs"
mkdir "$mnt"
daemon=""
cleanup() {
    [ -z "$daemon" ] || kill -KILL "$daemon" 2>/dev/null || true
    umount "$mnt" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
mount -t tmpfs -o size=256M tmpfs "$mnt"

# xattr_for ROW: ` --xattr` for the getxattr row (both daemons answer ENOSYS without it).
xattr_for() {
    [ "$1" != getxattr ] || echo ' --xattr'
}

# daemon_cmd WHO SOCKET DIR ROW: the command line of daemon WHO (ours, theirs) serving DIR.
daemon_cmd() {
    case "$1" in
    ours) echo "$bin/union-virtiofsd --socket-path $2 --shared-dir $3 -o minfreespace=0 \
        --sandbox none --seccomp none --thread-pool-size 0 --max-write 4177920$(xattr_for "$4")" ;;
    theirs) echo "$vfsd --socket-path $2 --shared-dir $3 --sandbox none --seccomp none \
        --thread-pool-size 0$(xattr_for "$4")" ;;
    esac
}

# run_one WHO ROW COUNT SETUP: one callgrind run; sets $counted to its instruction count and
# leaves $raw/WHO.ROW.COUNT.out.
run_one() {
    local who=$1 row=$2 count=$3 setup=$4
    local dir="$mnt/$who.$row.$count" sock="$work/$who.sock" base="$raw/$who.$row.$count"
    mkdir "$dir"
    rm -f "$sock"
    # shellcheck disable=SC2046
    "$valgrind" --tool=callgrind --callgrind-out-file="$base.out" \
        $(daemon_cmd "$who" "$sock" "$dir" "$row") >"$base.log" 2>&1 &
    daemon=$!
    # Out of the job table: bash would report the planned SIGUSR2 death on stderr.
    disown "$daemon"
    for _ in $(seq 600); do [ -S "$sock" ] && break; sleep 0.1; done
    [ -S "$sock" ] || die "$who $row: no socket (see $base.log)"
    "$bin/vufs-instr" --socket "$sock" --dir "$dir" --row "$row" --setup "$setup" \
        --count "$count" --pid "$daemon" >>"$base.log" 2>&1 ||
        die "$who $row $count: the frontend failed (see $base.log)"
    # vufs-instr returns once the daemon is gone; it must have died of the SIGUSR2.
    daemon=""
    grep -q 'default action of signal 12 (SIGUSR2)' "$base.log" ||
        die "$who $row $count: the daemon did not end by SIGUSR2 (see $base.log)"
    rm -rf "$dir" "$sock"
    counted=$(sed -n 's/^summary: //p' "$base.out")
}

# self_costs FILE: "instructions<TAB>function" per function (self cost), summed over the
# source files callgrind splits an inlined function into.
self_costs() {
    "$annotate" --auto=no --inclusive=no --threshold=100 "$1" 2>/dev/null | awk '
        /file:function/ { go = 1; getline; next }
        go && /^ *[0-9,]+ / {
            c = $1; gsub(",", "", c); $1 = ""; $2 = ""; s = $0
            sub(/^ +/, "", s); sub(/ \[[^]]*\]$/, "", s); sub(/ \([0-9,]+x\)$/, "", s)
            fn = substr(s, index(s, ":") + 1); sub(/'"'"'[0-9]+$/, "", fn)
            a[fn] += c
        }
        END { for (f in a) print a[f] "\t" f }' | LC_ALL=C sort -t"$(printf '\t')" -k2,2
}

label() {
    case "$1" in
    read-4k) echo "read 4 KiB" ;; write-4k) echo "write 4 KiB" ;;
    read-1m) echo "read 1 MiB" ;; write-1m) echo "write 1 MiB" ;;
    lookup-missing) echo "lookup (not found)" ;; lookup) echo "lookup (found)" ;;
    readdirplus) echo "readdirplus, 1,000 entries" ;;
    readdir) echo "readdir, 1,000 entries" ;;
    open-close) echo "open + flush + release" ;;
    stat) echo "stat (STATX / GETATTR)" ;;
    *) echo "$1" ;;
    esac
}

start=$SECONDS
table="$work/table" tops="$work/tops"
: >"$table"
: >"$tops"
IFS=, read -ra row_list <<<"$rows"
for row in "${row_list[@]}"; do
    case "$row" in
    read-1m | write-1m) k=$((n / 10)) ;;
    readdirplus | readdir) k=$((n / 50)) ;;
    *) k=$n ;;
    esac
    [ "$k" -ge 1 ] || k=1
    declare -A per=()
    for who in ours theirs; do
        log "$row: $who, $k and $((2 * k)) requests"
        run_one "$who" "$row" "$k" $((2 * k))
        a=$counted
        run_one "$who" "$row" $((2 * k)) $((2 * k))
        per[$who]=$(((counted - a) / k))
    done
    printf '%s\t%s\t%s\t%s\n' "$(label "$row")" "$k" "${per[ours]}" "${per[theirs]}" >>"$table"
    LC_ALL=C join -t "$(printf '\t')" -1 2 -2 2 -e 0 -a 1 -a 2 -o 0,1.1,2.1 \
        <(self_costs "$raw/ours.$row.$k.out") <(self_costs "$raw/ours.$row.$((2 * k)).out") |
        awk -F'\t' -v k="$k" -v r="$(label "$row")" -v tot="${per[ours]}" '
            { printf "%s\t%.0f\t%.1f\t%s\n", r, ($3 - $2) / k, 100 * ($3 - $2) / k / (tot > 0 ? tot : 1), $1 }' |
        sort -t "$(printf '\t')" -k2,2nr | awk 'NR <= 5' >>"$tops"
done

# Resident memory right after start (no valgrind, no frontend yet), for the record.
rss_line() {
    local dir="$mnt/rss.$1" sock="$work/rss.sock" kib
    mkdir "$dir"
    rm -f "$sock"
    # shellcheck disable=SC2046
    $(daemon_cmd "$1" "$sock" "$dir") >/dev/null 2>&1 &
    daemon=$!
    for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
    sleep 0.2
    kib=$(ps -o rss= -p "$daemon" | tr -d ' ')
    kill -TERM "$daemon" 2>/dev/null || true
    wait "$daemon" 2>/dev/null || true
    daemon=""
    echo "$kib"
}
rss_ours=$(rss_line ours)
rss_theirs=$(rss_line theirs)

{
    echo "### Instructions per request (callgrind, depth 1, start-up subtracted)"
    echo
    echo "| row | N | union-virtiofsd | virtiofsd 1.14 | ratio | ≤ 0.8× |"
    echo "|---|---:|---:|---:|---:|:---:|"
    awk -F'\t' '
        function commas(x,   s) { s = sprintf("%d", x); while (s ~ /[0-9][0-9][0-9][0-9]/) sub(/[0-9][0-9][0-9]($|,)/, ",&", s); return s }
        { r = $4 > 0 ? $3 / $4 : 0
          printf "| %s | %d | %s | %s | %.2f | %s |\n", $1, $2, commas($3), commas($4), r, r <= 0.8 ? "yes" : "no" }' "$table"
    echo
    echo "### Top 5 functions of union-virtiofsd per row (self cost, instructions per request)"
    echo
    echo "| row | instr/req | share | function |"
    echo "|---|---:|---:|---|"
    awk -F'\t' '
        function commas(x,   s) { s = sprintf("%d", x); while (s ~ /[0-9][0-9][0-9][0-9]/) sub(/[0-9][0-9][0-9]($|,)/, ",&", s); return s }
        { f = $4; if (length(f) > 110) f = substr(f, 1, 107) "..."; gsub(/\|/, "\\|", f)
          printf "| %s | %s | %s%% | `%s` |\n", ($1 == last ? "" : $1), commas($2), $3, f; last = $1 }' "$tops"
    echo
    echo "RSS right after start (no frontend, no valgrind): union-virtiofsd ${rss_ours:-?} KiB, virtiofsd 1.14 ${rss_theirs:-?} KiB."
    echo "Runtime $((SECONDS - start)) s (valgrind $("$valgrind" --version | sed 's/valgrind-//'))."
} | tee "$out/instructions.md"
