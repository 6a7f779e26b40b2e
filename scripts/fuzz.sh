#!/usr/bin/env bash
# Coverage-guided fuzzing of the decoders on the network path (issue 12),
# on the stable toolchain: libFuzzer (the libfuzzer-sys crate) with
# SanitizerCoverage enabled through RUSTFLAGS. No sanitizer runtime (that
# needs nightly): the targets are safe Rust, and fuzz binaries refuse any
# single allocation above 512 MiB themselves (crates/rrc-fuzz/src/alloc.rs).
#
#   scripts/fuzz.sh [--time SECONDS] [TARGET...]
#
# For each TARGET (default: every target of rrc_fuzz::TARGETS), one after
# the other, at nice 19:
#   1. seeds fuzz/corpus/TARGET/ if it is empty (crates/rrc-fuzz/src/seeds.rs);
#   2. fuzzes for SECONDS (default 60) from that corpus; a crash, an
#      out-of-memory or a timeout ends a run, its input is copied into
#      fuzz/regressions/TARGET/, and fuzzing goes on for the time left
#      (at most 5 findings per target);
#   3. merges what the runs found into a fresh, coverage-minimised
#      fuzz/corpus/TARGET/ (libFuzzer -merge=1), which replaces the old one;
#   4. prints executions, exec/s, coverage, corpus size and findings.
# Work files go to fuzz/work/ and the build to fuzz/target/ (both ignored
# by git). `make test` replays fuzz/corpus and fuzz/regressions
# (crates/rrc-fuzz/tests/corpus.rs).
set -euo pipefail
cd "$(dirname "$0")/.."

TIME=60
TARGETS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --time) TIME=$2; shift 2 ;;
        --time=*) TIME=${1#--time=}; shift ;;
        -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
        -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
        *) TARGETS+=("$1"); shift ;;
    esac
done

CARGO=${CARGO:-cargo}
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
FUZZ=$PWD/fuzz
BIN=$FUZZ/target/$TRIPLE/release
MALLOC_MB=512    # = rrc_fuzz::alloc::LIMIT
RSS_MB=2048
MAX_FINDINGS=5

# The instrumentation libFuzzer needs, on stable: inline 8-bit counters
# and the PC table (coverage), compare tracing (value profile, CMP
# dictionaries). --target keeps RUSTFLAGS off build scripts and proc macros.
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
echo "== building the fuzz binaries (fuzz/, stable $(rustc --version | cut -d' ' -f2))"
(cd "$FUZZ" && nice -n 19 $CARGO build --release --locked --target "$TRIPLE" --target-dir "$FUZZ/target")
unset RUSTFLAGS

ALL=$($CARGO run --quiet --release --locked -p rrc-fuzz --example seeds -- --list)
[ ${#TARGETS[@]} -gt 0 ] || read -r -a TARGETS <<< "$(echo $ALL)"
for t in "${TARGETS[@]}"; do
    grep -qx "$t" <<< "$ALL" || { echo "fuzz.sh: no target $t (targets: $(echo $ALL))" >&2; exit 2; }
    [ -x "$BIN/$t" ] || { echo "fuzz.sh: no binary fuzz/src/bin/$t.rs" >&2; exit 2; }
done

# Largest input per target: one small image (seeds.rs: ~20 KiB), two for
# the store, small ones elsewhere (no corpus file above 64 KiB).
max_len() {
    case "$1" in
        image) echo 32768 ;;
        store) echo 49152 ;;
        *) echo 4096 ;;
    esac
}

# The data-directory target makes files: on tmpfs when there is one.
[ -d /dev/shm ] && export TMPDIR=/dev/shm

SUMMARY=()
for t in "${TARGETS[@]}"; do
    corpus=$FUZZ/corpus/$t
    regr=$FUZZ/regressions/$t
    work=$FUZZ/work/$t
    mkdir -p "$corpus" "$regr"
    rm -rf "$work"
    mkdir -p "$work/new" "$work/artifacts"
    if [ -z "$(ls -A "$corpus")" ]; then
        $CARGO run --quiet --release --locked -p rrc-fuzz --example seeds -- "$FUZZ/corpus" "$t"
    fi
    before=$(ls "$corpus" | wc -l)
    echo "== $t: fuzzing for ${TIME}s from $before corpus inputs (log: fuzz/work/$t/run-*.log)"
    start=$(date +%s)
    execs=0
    findings=()
    run=0
    while :; do
        left=$(( TIME - ($(date +%s) - start) ))
        [ "$left" -gt 0 ] || break
        run=$((run + 1))
        log=$work/run-$run.log
        # The first run reads the corpus; new units go to work/new, so the
        # corpus directory changes only by the merge below.
        set +e
        nice -n 19 "$BIN/$t" "$work/new" "$corpus" \
            -max_total_time="$left" -max_len="$(max_len "$t")" -timeout=10 \
            -malloc_limit_mb=$MALLOC_MB -rss_limit_mb=$RSS_MB \
            -artifact_prefix="$work/artifacts/" -print_final_stats=1 -close_fd_mask=1 \
            >"$log" 2>&1
        rc=$?
        set -e
        n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
        execs=$((execs + ${n:-0}))
        new_findings=0
        for a in "$work"/artifacts/crash-* "$work"/artifacts/oom-* "$work"/artifacts/timeout-*; do
            [ -e "$a" ] || continue
            cp "$a" "$regr/"
            findings+=("$(basename "$a")")
            echo "   finding: fuzz/regressions/$t/$(basename "$a") ($(grep -m1 -E 'panicked at|ERROR: libFuzzer|memory allocation of' "$log" || echo "exit $rc"))"
            rm -f "$a"
            new_findings=1
        done
        if [ "$rc" -ne 0 ] && [ "$new_findings" -eq 0 ]; then
            echo "fuzz.sh: $t exited with $rc and left no input (see $log)" >&2
            tail -20 "$log" >&2
            exit 1
        fi
        [ "$rc" -eq 0 ] && break
        [ "${#findings[@]}" -lt $MAX_FINDINGS ] || break
    done
    secs=$(( $(date +%s) - start ))
    cov=$(grep -hoE 'cov: [0-9]+ ft: [0-9]+' "$work"/run-*.log | tail -1)
    # Merge the corpus and everything new into a fresh minimised corpus.
    mkdir -p "$work/merged"
    # Edges only (-use_counters=0): hit-count variants would keep
    # thousands of files for little.
    nice -n 19 "$BIN/$t" -merge=1 -use_counters=0 -max_len="$(max_len "$t")" -timeout=10 -rss_limit_mb=$RSS_MB \
        -close_fd_mask=1 "$work/merged" "$corpus" "$work/new" >"$work/merge.log" 2>&1 \
        || { echo "fuzz.sh: merging the $t corpus failed (see $work/merge.log)" >&2; tail -5 "$work/merge.log" >&2; exit 1; }
    if [ -n "$(ls -A "$work/merged")" ]; then
        rm -rf "$corpus"
        mv "$work/merged" "$corpus"
    fi
    files=$(ls "$corpus" | wc -l)
    kib=$(( $(du -sb "$corpus" | cut -f1) / 1024 ))
    rate=$(( execs / (secs > 0 ? secs : 1) ))
    line=$(printf '%-12s %6ss %12s execs %8s/s  %-22s corpus %4s files (%s KiB, was %s)  findings %s' \
        "$t" "$secs" "$execs" "$rate" "${cov:-cov: ?}" "$files" "$kib" "$before" "${#findings[@]}")
    echo "   $line"
    SUMMARY+=("$line${findings:+: ${findings[*]}}")
done

echo
echo "== fuzzing summary ($(date -u +%Y-%m-%dT%H:%MZ), ${TIME}s per target)"
printf '   %s\n' "${SUMMARY[@]}"
