#!/usr/bin/env bash
# GPU benchmark: the element on CUDA or TensorRT at each working size, one line of fps per size.
# Needs an NVIDIA machine with a driver for CUDA 13 (580 or newer); installs the GPU build of ONNX
# Runtime and its NVIDIA libraries (scripts/setup.sh --gpu) first. Results: bench/gpu-<provider>-<size>.json.
# (On a bare GPU machine without GStreamer or Swift, use scripts/gpu-proof/ instead.)
#   scripts/bench-gpu.sh [cuda|tensorrt] [SIZE ...]      default: cuda 512x288 1920x1088
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROVIDER="${1:-cuda}"
shift || true
if [ $# -gt 0 ]; then SIZES=("$@"); else SIZES=(512x288 1920x1088); fi
case "$PROVIDER" in cuda|tensorrt) ;; *) echo "provider must be cuda or tensorrt" >&2; exit 2 ;; esac
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$ROOT/scripts/setup.sh" --gpu >/dev/null
cd "$ROOT"
summary=()
for size in "${SIZES[@]}"; do
    json="bench/gpu-$PROVIDER-$size.json"
    # Frames arrive at 1920x1080; a size of another aspect (1920x1088) gets frames at its own size.
    width="${size%x*}" height="${size#*x}" input=()
    [ $((width * 1080)) -eq $((height * 1920)) ] || input=(--input-size "$size")
    # the upstream comparison stays a CPU figure; on a GPU box it would only measure PyTorch-CPU.
    # One round: device time is scarce, and a lent GPU is not shared the way this CPU host is.
    scripts/bench.sh --provider "$PROVIDER" --size "$size" "${input[@]}" --frames 120 --rounds 1 --no-upstream --json "$json"
    summary+=("$size $(.venv/bin/python -c "import json,sys; d=json.load(open(sys.argv[1])); print(f\"{d['fps']:.1f} fps, median {d['stages_ms']['total']['median']:.1f} ms\")" "$json")")
done
echo
echo "execution provider: $PROVIDER"
printf '  %s\n' "${summary[@]}"
