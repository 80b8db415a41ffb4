#!/usr/bin/env bash
# Benchmark (not part of the tests): the installed element against upstream PyTorch, same frames,
# same working size, one run. Without installed MatAnyone2 weights it uses the random-init export
# (same architecture, same cost), exporting it first if needed. Options: see `--help`.
#   scripts/bench.sh --size 512x288 --frames 60
# With --live first: the live-chain benchmark instead (tools/bench_live.py; sync/async × engines):
#   scripts/bench.sh --live --modes sync --engines segmenter,matanyone2 --duration 15
# With --server first: MatAnyone2 on the Triton server of tools/serve against in-process (tools/bench_server.py):
#   scripts/bench.sh --server --frames 40 --streams 1,2,4
# With --engines rvm first: Robust Video Matting through the element against Python ONNX Runtime, same
# frames, several sizes (tools/bench_rvm.py):
#   scripts/bench.sh --engines rvm --sizes 512x288,1280x720,1920x1080 --json bench/rvm.json
# With --pixels first: each build of the element's own pixel work (baseline, AVX2, AVX-512) in one run
# (tools/bench_pixels.py):
#   scripts/bench.sh --pixels --sizes 1920x1080,1280x720 --json bench/pixels.json
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "${1:-}" = "--pixels" ]; then
    "$ROOT/scripts/setup.sh" --no-plugin >/dev/null
    cd "$ROOT" && exec .venv/bin/python -m tools.bench_pixels "${@:2}"
fi
if [ "${1:-}" = "--server" ]; then "$ROOT/scripts/setup.sh" --server >/dev/null; else "$ROOT/scripts/setup.sh" >/dev/null; fi
cd "$ROOT"
if [ "${1:-}" = "--engines" ] && [ "${2:-}" = rvm ] || [ "${1:-}" = "--engines=rvm" ]; then
    exec .venv/bin/python -m tools.bench_rvm "$@"
fi
MODELS="${XDG_DATA_HOME:-$HOME/.local/share}/gst-matanyone/models"
# The two options this script acts on, read exactly (`--name value` or `--name=value`, as argparse
# takes them); everything is passed on to the Python tool as given.
MODEL_DIR=""; PRECISION="fp32"
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    case "${args[i]}" in
        --model-dir) MODEL_DIR="${args[i + 1]:-}" ;;
        --model-dir=*) MODEL_DIR="${args[i]#*=}" ;;
        --precision) PRECISION="${args[i + 1]:-}" ;;
        --precision=*) PRECISION="${args[i]#*=}" ;;
    esac
done
EXTRA=()
if [ ! -f "$MODELS/matanyone2/manifest.json" ] && [ -z "$MODEL_DIR" ]; then
    TEST_MODELS="$ROOT/build/test-models"
    if [ ! -f "$TEST_MODELS/matanyone2/manifest.json" ]; then
        echo "[bench] exporting the random-init MatAnyone2 set (no official weights installed)"
        .venv/bin/python -m tools.matanyone2.export --out "$TEST_MODELS/matanyone2" --random-init 0
    fi
    ln -sfn "$MODELS/segmenter" "$TEST_MODELS/segmenter"
    # The live benchmark's engines all in one folder (RVM too), apart from the tests' own.
    BENCH_MODELS="$ROOT/build/bench-models"
    mkdir -p "$BENCH_MODELS"
    ln -sfn "$TEST_MODELS/matanyone2" "$BENCH_MODELS/matanyone2"
    for set in segmenter rvm; do if [ -e "$MODELS/$set" ]; then ln -sfn "$MODELS/$set" "$BENCH_MODELS/$set"; fi; done
    EXTRA=(--model-dir "$TEST_MODELS")
fi
if [ "${1:-}" = "--live" ]; then
    [ ${#EXTRA[@]} -gt 0 ] && EXTRA=(--model-dir "$BENCH_MODELS")
    exec .venv/bin/python -m tools.bench_live "${EXTRA[@]}" "${@:2}"
fi
if [ "${1:-}" = "--server" ]; then
    exec .venv/bin/python -m tools.bench_server "${EXTRA[@]}" "${@:2}"
fi
# A reduced-precision set is made once beside the fp32 one when missing (a minute or so each); with
# --model-dir the sets are the caller's.
SET_DIR="$MODELS"; [ ${#EXTRA[@]} -gt 0 ] && SET_DIR="$TEST_MODELS"
if [ -z "$MODEL_DIR" ] && [ "$PRECISION" != fp32 ] && [ ! -f "$SET_DIR/matanyone2-$PRECISION/manifest.json" ]; then
    case "$PRECISION" in
        int8) echo "[bench] making the int8 set (tools/matanyone2/quantize.py)"
              .venv/bin/python -m tools.matanyone2.quantize --src "$SET_DIR/matanyone2" ;;
        fp16) echo "[bench] making the fp16 set (tools/matanyone2/fp16.py)"
              .venv/bin/python -m tools.matanyone2.fp16 --src "$SET_DIR/matanyone2" ;;
        bf16) echo "[bench] making the bf16 set (tools/matanyone2/bf16.py, OpenVINO)"
              .venv-openvino/bin/python -m tools.matanyone2.bf16 --src "$SET_DIR/matanyone2" ;;
    esac
fi
exec .venv/bin/python -m tools.bench "${EXTRA[@]}" "$@"
