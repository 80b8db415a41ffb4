#!/usr/bin/env bash
# Builds the Swift package with its tests, then runs them (engine and element, in-process). A failed
# build fails this script (exit 2) and runs no test: an old test binary must never stand in for a
# broken tree. Output: the build's errors and warnings, then swift test's own output.
#
#   scripts/swift-tests.sh LOG_DIR [ARGS for build and test…] [-- ARGS for swift test only]
#   e.g. scripts/swift-tests.sh build/tsan --sanitize=thread --scratch-path .build/tsan -- --filter MatteElementTests
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
LOG_DIR="${1:-$ROOT/build}"; shift || true
both=(); testOnly=()
while [ $# -gt 0 ]; do
    if [ "$1" = "--" ]; then shift; testOnly=("$@"); break; fi
    both+=("$1"); shift
done
mkdir -p "$LOG_DIR"
if ! swift build --build-tests "${both[@]}" >"$LOG_DIR/swift-build.log" 2>&1; then
    grep -E "error:" "$LOG_DIR/swift-build.log" | sort -u | head -40
    echo "swift build failed (full log: $LOG_DIR/swift-build.log); no test was run"
    exit 2
fi
grep -E "warning:" "$LOG_DIR/swift-build.log" | grep -v "prohibited flag" | sort -u | head -20
swift test --skip-build --no-parallel "${both[@]}" "${testOnly[@]}"
