#!/usr/bin/env bash
# Coverage-guided fuzzing with cargo fuzz (libFuzzer) of the targets in fuzz/: `session` (FUSE
# sessions through the daemon's request routing over tmpfs branches), `chain` (descriptor-chain
# layouts) and `options` (command lines and -o strings through the config layer).
#   scripts/fuzz.sh [--runs N] [--seconds S] [TARGET...]
# Builds with the nightly toolchain (ASan, debug assertions) into $UVFS_CACHE/fuzz/build (outside
# the clone, so that a fresh clone rebuilds only this crate, not its dependencies), then
# runs each target for N executions (default 1,000,000; --seconds stops it earlier) with a
# fixed seed (-seed=1) on its corpus .cache/fuzz/<target> in the clone (a fresh clone starts
# from the seeds: the same run every time), which also reads fuzz/seeds/<target>
# and fuzz/regressions/<target>. Prints one line per target (executions, exec/s, libFuzzer's
# cov/ft, crash files written to .cache/fuzz/artifacts/<target>/) and exits non-zero if any
# target crashed. Findings listed in fuzz/known.txt (reported, not fixed yet) are let through.
# Runs as root for the tmpfs branches (else a temporary directory is used).
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$UVFS_ROOT"

runs=1000000
seconds=0
targets=()
while [ $# -gt 0 ]; do
    case "$1" in
    --runs) runs=$2; shift 2 ;;
    --runs=*) runs=${1#*=}; shift ;;
    --seconds) seconds=$2; shift 2 ;;
    --seconds=*) seconds=${1#*=}; shift ;;
    -h | --help) sed -n '2,12s/^# \{0,1\}//p' "$0"; exit 0 ;;
    -*) die "unknown option $1" ;;
    *) targets+=("$1"); shift ;;
    esac
done
[ ${#targets[@]} -gt 0 ] || targets=(session chain options)
for t in "${targets[@]}"; do
    [ -f "fuzz/fuzz_targets/$t.rs" ] || die "no fuzz target $t (fuzz/fuzz_targets/)"
done

# install_cargo_fuzz: cargo-fuzz 0.13.2 (cargo install'ed into $UVFS_TOOLS once); prints the
# directory holding it.
install_cargo_fuzz() {
    local root="$UVFS_TOOLS/cargo-fuzz"
    if [ ! -x "$root/bin/cargo-fuzz" ]; then
        cargo install --locked cargo-fuzz --version 0.13.2 --root "$root" >&2
    fi
    echo "$root/bin"
}

PATH="$(install_cargo_fuzz):$PATH"
rustup run nightly rustc --version >/dev/null 2>&1 ||
    rustup toolchain install nightly --profile minimal >&2
build="$UVFS_CACHE/fuzz/build"
t0=$SECONDS
cargo +nightly fuzz build --fuzz-dir fuzz --debug-assertions --target-dir "$build" >&2
log "build: $((SECONDS - t0)) s"
triple=$(rustc +nightly -vV | sed -n 's/^host: //p')
bin="$build/$triple/release"

# Findings reported and not fixed yet (fuzz/known.txt) do not stop a run.
: "${UVFS_FUZZ_KNOWN=$(sed 's/#.*//' fuzz/known.txt | awk 'NF { print $1 }' | paste -sd, -)}"
export UVFS_FUZZ_KNOWN
[ -z "$UVFS_FUZZ_KNOWN" ] || log "letting known findings through: $UVFS_FUZZ_KNOWN"

failed=0
for t in "${targets[@]}"; do
    corpus="$UVFS_ROOT/.cache/fuzz/$t"
    artifacts="$UVFS_ROOT/.cache/fuzz/artifacts/$t"
    logfile="$UVFS_ROOT/.cache/fuzz/logs/$t.log"
    mkdir -p "$corpus" "$artifacts" "$(dirname "$logfile")" "fuzz/regressions/$t"
    marker=$(mktemp)
    limit=()
    [ "$seconds" -gt 0 ] && limit=(-max_total_time="$seconds")
    t0=$SECONDS
    rc=0
    "$bin/$t" "$corpus" "fuzz/seeds/$t" "fuzz/regressions/$t" -seed=1 -runs="$runs" \
        "${limit[@]}" -max_len=4096 -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
        -artifact_prefix="$artifacts/" >"$logfile" 2>&1 || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logfile" | tail -1)
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$logfile" | tail -1)
    last=$(grep -E '^#[0-9]+' "$logfile" | tail -1 || true)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    mapfile -t crashes < <(find "$artifacts" -type f -newer "$marker")
    rm -f "$marker"
    printf '%-8s %9s execs in %4d s  %6s exec/s  cov %5s  ft %6s  crashes %d\n' \
        "$t" "${execs:-?}" "$((SECONDS - t0))" "${speed:-?}" "${cov:-?}" "${ft:-?}" "${#crashes[@]}"
    if [ "$rc" -ne 0 ] || [ ${#crashes[@]} -gt 0 ]; then
        failed=1
        log "$t: libFuzzer exited $rc; log: $logfile"
        grep -E -A40 '^(==[0-9]+==ERROR|thread .* panicked|SUMMARY)' "$logfile" | head -60 >&2 || true
        for c in "${crashes[@]}"; do
            log "$t: crash input $c (keep it: cp $c fuzz/regressions/$t/; replay:" \
                "UVFS_FUZZ_TRACE=1 $bin/$t $c)"
        done
    fi
done
exit "$failed"
