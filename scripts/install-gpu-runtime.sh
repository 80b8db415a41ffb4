#!/usr/bin/env bash
# The GPU build of ONNX Runtime and the NVIDIA libraries it needs, from PyPI wheels, into one folder
# (no system CUDA, no LD_LIBRARY_PATH: the element loads them from there by path). Only the NVIDIA
# driver has to be on the machine. Called by `scripts/setup.sh --gpu`; the tests call it with a
# subset of the wheels to check the errors for missing libraries.
#
#   scripts/install-gpu-runtime.sh DEST [--wheels all|none|NAME,NAME…] [--tensorrt]
#
# DEST/libonnxruntime.so.1 (+ its provider libraries), DEST/nvidia/*.so* (the NVIDIA libraries,
# flattened). --tensorrt adds TensorRT 10 (tensorrt-cu13-libs, from NVIDIA's package index).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${1:?usage: install-gpu-runtime.sh DEST [--wheels all|none|LIST] [--tensorrt]}"
shift
WHEELS=all
TENSORRT=0
while [ $# -gt 0 ]; do
    case "$1" in
        --wheels) WHEELS="$2"; shift ;;
        --tensorrt) TENSORRT=1 ;;
        *) echo "install-gpu-runtime.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
PIP="$ROOT/.venv/bin/pip"
PY="$ROOT/.venv/bin/python"
[ -x "$PIP" ] || { echo "install-gpu-runtime.sh: run scripts/setup.sh first (no .venv)" >&2; exit 1; }

# ONNX Runtime 1.31.1's GPU build links CUDA 13 (libcudart.so.13, libcublas.so.13, libcurand.so.10)
# and loads cuDNN 9 at run time; its TensorRT provider links TensorRT 10 (libnvinfer.so.10).
ORT_GPU="onnxruntime-gpu==1.31.1"
declare -A NVIDIA=(
    [nvidia-cuda-runtime]="nvidia-cuda-runtime==13.5.37"
    [nvidia-cublas]="nvidia-cublas==13.10.0.20"
    [nvidia-curand]="nvidia-curand==10.4.5.25"
    [nvidia-cufft]="nvidia-cufft==12.5.0.14"
    [nvidia-cuda-nvrtc]="nvidia-cuda-nvrtc==13.5.37"
    [nvidia-cudnn-cu13]="nvidia-cudnn-cu13==9.28.1.4"
)
case "$WHEELS" in
    all) selected=("${!NVIDIA[@]}") ;;
    none) selected=() ;;
    *) IFS=, read -r -a selected <<< "$WHEELS" ;;
esac

CACHE="$ROOT/.deps/gpu-wheels"
mkdir -p "$CACHE" "$DEST/nvidia"
fetch() {  # pip download is a no-op when the wheel is already in the cache folder
    "$PIP" download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$CACHE" "$@"
}
unpack() {  # unpack WHEEL-GLOB PATTERN TARGET: the wheel's files matching PATTERN, flattened into TARGET
    local wheel
    wheel="$(ls "$CACHE"/$1 | sort | tail -1)"
    "$PY" - "$wheel" "$2" "$3" <<'EOF'
import fnmatch, os, shutil, sys, zipfile
wheel, pattern, target = sys.argv[1:]
with zipfile.ZipFile(wheel) as archive:
    for name in archive.namelist():
        if fnmatch.fnmatch(name, pattern):
            out = os.path.join(target, os.path.basename(name))
            if os.path.exists(out) and os.path.getsize(out) == archive.getinfo(name).file_size:
                continue
            with archive.open(name) as src, open(out + ".part", "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.replace(out + ".part", out)
EOF
}

fetch "$ORT_GPU"
unpack "onnxruntime_gpu-1.31.1-*.whl" "onnxruntime/capi/libonnxruntime*.so*" "$DEST"
ln -sf libonnxruntime.so.1.31.1 "$DEST/libonnxruntime.so.1"
for name in "${selected[@]}"; do
    spec="${NVIDIA[$name]:?unknown NVIDIA wheel $name (known: ${!NVIDIA[*]})}"
    fetch "$spec"
    unpack "${name//-/_}-*.whl" "nvidia/*/lib/*.so*" "$DEST/nvidia"
done
if [ "$TENSORRT" = 1 ]; then
    # TensorRT's wheels are on NVIDIA's index (pypi.org has only a stub that downloads from there).
    "$PIP" download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$CACHE" \
        --extra-index-url https://pypi.nvidia.com "tensorrt-cu13-libs==10.16.1.11"
    unpack "tensorrt_cu13_libs-*.whl" "tensorrt_libs/lib*.so*" "$DEST/nvidia"
fi
# Never BLAS interposers: libnvblas would take over sgemm for every library loaded after it.
rm -f "$DEST"/nvidia/libnvblas.so* "$DEST"/nvidia/libcufftw.so*
echo "GPU runtime in $DEST: $(ls "$DEST"/nvidia | wc -l) NVIDIA libraries"
