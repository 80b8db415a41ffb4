#!/usr/bin/env bash
# The element tests under ThreadSanitizer: the streaming, query and application threads all reach
# the element, and every piece of state they share must be behind a lock. The pixel tests too: the
# compositor and the resampler slice their work over the cores. Own build folder
# (.build/tsan), so the ordinary build is not invalidated. Exits non-zero on any report.
#
#   scripts/tsan-tests.sh [swift test --filter REGEX]
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FILTER="${1:-MatteElementTests|MattePixelsTests}"
# GLib's and ONNX Runtime's own threads are not instrumented: a report must involve our code.
export TSAN_OPTIONS="halt_on_error=0 exitcode=66 report_signal_unsafe=0 suppressions=$ROOT/scripts/tsan.supp ${TSAN_OPTIONS:-}"
# Not under TSan: the tests that may run OpenVINO (precision=bf16, precision=auto, which picks bf16
# for MatAnyone2 and RVM
# on a CPU that computes it, and model-placement's, which puts the encoder on OpenVINO). OpenVINO's TBB dlopens libtbbbind with
# RTLD_DEEPBIND, which the sanitizer runtime refuses by ending the process; the ordinary run covers it,
# and its element code path is the one every other MatAnyone2 test takes under TSan.
SKIP="autoPrecisionRunsWhatTheRuleChooses|bf16RunsWhereTheCpuComputesIt|precisionAutoIsTheDefault|precisionAutoFallsBackToFp32|modelPlacementRunsWhereItSays"
exec "$ROOT/scripts/swift-tests.sh" "$ROOT/build/tsan" --sanitize=thread --scratch-path "$ROOT/.build/tsan" -- --filter "$FILTER" --skip "$SKIP"
