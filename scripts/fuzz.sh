#!/usr/bin/env bash
# Coverage-guided fuzzing (libFuzzer, AddressSanitizer) of the parsers of outside bytes: each target in
# Fuzz/ built as its own executable, run from its committed corpus (Fuzz/corpus/TARGET: seeds, and
# regression-* inputs of faults found before) for a bounded time. New inputs go to build/fuzz/TARGET/corpus;
# a crash, a leak, a timeout (10 s an input) or memory over 2 GiB fails the target, its input left as
# build/fuzz/TARGET/crash-* (or leak-*, timeout-*, oom-*): fix it, then add it to the corpus as regression-NAME.
#
#   scripts/fuzz.sh [TARGET ...] [--seconds N]   (default: every target, 30 s each)
#   scripts/fuzz.sh Mask --seconds 600           a longer run of one
# Targets: Manifest ELF KServe Server Placement URL Mask. Prints one line per target: executions,
# coverage (edges), features, corpus size. Exit 1 when any target found a fault, 2 when the build failed.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ALL=(Manifest ELF KServe Server Placement URL Mask)
SECONDS_EACH=30
targets=()
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) SECONDS_EACH="$2"; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) targets+=("$1"); shift ;;
    esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${ALL[@]}")
for t in "${targets[@]}"; do
    [[ " ${ALL[*]} " == *" $t "* ]] || { echo "fuzz.sh: unknown target $t (targets: ${ALL[*]})" >&2; exit 2; }
done

# libFuzzer without its main (the executables keep theirs and hand over to LLVMFuzzerRunDriver), from
# the Swift toolchain's own clang runtime.
SWIFT_BIN="$(dirname "$(readlink -f "$(command -v swift)")")"
FUZZER_LIB="$(ls "$SWIFT_BIN"/../lib/clang/*/lib/linux/libclang_rt.fuzzer_no_main-x86_64.a 2>/dev/null | head -1)"
[ -f "$FUZZER_LIB" ] || { echo "fuzz.sh: libclang_rt.fuzzer_no_main is not in the Swift toolchain ($SWIFT_BIN)" >&2; exit 2; }
SCRATCH="$ROOT/.build/fuzz"
OUT="$ROOT/build/fuzz"
mkdir -p "$OUT"
build=(swift build --scratch-path "$SCRATCH" --sanitize=address
       -Xswiftc -sanitize-coverage=edge,inline-8bit-counters,pc-table,trace-cmp
       -Xlinker -u -Xlinker LLVMFuzzerRunDriver -Xlinker --export-dynamic-symbol=LLVMFuzzerRunDriver -Xlinker "$FUZZER_LIB" -Xlinker -lstdc++)
for t in "${targets[@]}"; do
    if ! "${build[@]}" --product "Fuzz$t" >"$OUT/build-$t.log" 2>&1; then
        grep -E "error:" "$OUT/build-$t.log" | sort -u | head -20
        echo "fuzz.sh: building Fuzz$t failed (log: $OUT/build-$t.log)"
        exit 2
    fi
done
BIN="$("${build[@]}" --show-bin-path 2>/dev/null)"

faults=0
for t in "${targets[@]}"; do
    work="$OUT/$t"
    rm -rf "$work/crash-"* "$work/leak-"* "$work/timeout-"* "$work/oom-"* "$work"/*-input-* "$work"/manifest-set-*
    mkdir -p "$work/corpus"
    # (No Swift crash handler: it would sit waiting on a fault libFuzzer reports itself.)
    (cd "$work" && SWIFT_BACKTRACE=enable=no ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
        "$BIN/Fuzz$t" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
        -print_final_stats=1 -artifact_prefix="$work/" "$work/corpus" "$ROOT/Fuzz/corpus/$t" >"$work/run.log" 2>&1)
    rc=$?
    execs=$(grep -oE "stat::number_of_executed_units: *[0-9]+" "$work/run.log" | grep -oE "[0-9]+$")
    last=$(grep -E "^#[0-9]+" "$work/run.log" | tail -1)
    cov=$(grep -oE "cov: [0-9]+" <<<"$last" | grep -oE "[0-9]+"); ft=$(grep -oE "ft: [0-9]+" <<<"$last" | grep -oE "[0-9]+")
    corp=$(grep -oE "corp: [0-9]+" <<<"$last" | grep -oE "[0-9]+")
    if [ "$rc" = 0 ]; then
        echo "PASS fuzz $t: ${execs:-?} executions in ${SECONDS_EACH} s, coverage ${cov:-?} edges, ${ft:-?} features, corpus ${corp:-?}"
    else
        faults=$((faults + 1))
        echo "FAIL fuzz $t (exit $rc): $(ls "$work" | grep -E '^(crash|leak|timeout|oom)-' | head -3 | tr '\n' ' ')"
        grep -E "ERROR:|SUMMARY:|Fatal error|panic" "$work/run.log" | head -8
    fi
    rm -rf "$work"/*-input-* "$work"/manifest-set-*
done
[ "$faults" = 0 ]
