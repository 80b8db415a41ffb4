#!/usr/bin/env bash
# GPU proof, step 3 (on the device, after the last transfer): reassemble and unpack what pack.sh
# packed (GStreamer from its .debs with dpkg-deb -x into a prefix, no root needed; the plugin; ONNX
# Runtime's GPU build; the model set), link the NVIDIA libraries of the device's Python wheels into
# the folder the element loads them from, then measure (measure.py): fps through the element at
# 512x288 and 1920x1088 for cuda fp32/fp16 (TensorRT if its libraries are there), the GPU-vs-CPU
# alpha deviation, upstream PyTorch on the same GPU and frames, and last Robust Video Matting (engine=rvm,
# fp32, 1920x1088, with its deviation from the CPU; bench/gpu-cuda-rvm-*.json). Results in $OUT (bench/*.json,
# summary.txt, run.log). Everything runs inside RUN_BUDGET_S (default 540 s, under the device's
# 600 s per command); a failing step is reported and the next one runs.
#
#   bash scripts/gpu-proof/run.sh [--cpu-smoke] [--python PY] [--budget S]
#   bash scripts/gpu-proof/run.sh --export-only     (started by receive.sh with pack.sh --models export)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
GP="$ROOT/build/gpu-proof"
STAGE="$GP/stage"
PREFIX="$GP/root"
WORK="$GP/work"
SMOKE=0
EXPORT_ONLY=0
PYTHON="${PYTHON:-python3}"
BUDGET="${RUN_BUDGET_S:-540}"
while [ $# -gt 0 ]; do
    case "$1" in
        --cpu-smoke) SMOKE=1 ;;
        --export-only) EXPORT_ONLY=1 ;;
        --python) PYTHON="$2"; shift ;;
        --budget) BUDGET="$2"; shift ;;
        *) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
OUT="${OUT:-$GP/out}"
mkdir -p "$OUT" "$PREFIX" "$WORK"
T0=$(date +%s)
if [ "$EXPORT_ONLY" = 0 ]; then
    exec > >(tee -a "$OUT/run.log") 2>&1
fi
say() { printf '[%4d s] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }
fail() { say "FAILED: $*"; }

# --- 0. everything here? ---------------------------------------------------------------------------
[ -f "$STAGE/PAYLOADS.tsv" ] || { say "no $STAGE/PAYLOADS.tsv: no set has been received (receive.sh N)"; exit 1; }
have_payload() {  # have_payload NAME: all its pieces are in the stage
    local parts
    parts=$(awk -v n="$1" '$1 == n {print $2}' "$STAGE/PAYLOADS.tsv")
    [ -n "$parts" ] || return 1
    for ((i = 0; i < parts; i++)); do [ -f "$STAGE/$1.part$(printf %02d $i)" ] || return 1; done
}
missing=()
while IFS=$'\t' read -r name parts bytes digest; do
    have_payload "$name" || missing+=("$name")
done < "$STAGE/PAYLOADS.tsv"
if [ "$EXPORT_ONLY" = 0 ] && [ ${#missing[@]} -gt 0 ]; then
    say "missing payloads (carry their sets first): ${missing[*]}"
    exit 1
fi
say "pack: $(cat "$STAGE/PACKINFO")"
cp "$STAGE/PACKINFO" "$PREFIX/PACKINFO"

# unpack NAME CMD...: cat the pieces of payload NAME into CMD, once per payload digest
unpack() {
    local name="$1"; shift
    local digest stamp
    digest=$(awk -v n="$name" '$1 == n {print $4}' "$STAGE/PAYLOADS.tsv")
    stamp="$PREFIX/.done-$name"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ]; then return 0; fi
    local t=$(date +%s%N)
    if cat "$STAGE/$name".part* | "$@"; then
        echo "$digest" > "$stamp"
        say "unpacked $name ($(( ($(date +%s%N) - t) / 1000000 )) ms)"
    else
        fail "unpacking $name"; return 1
    fi
}

# --- 1. zstd (the machine's, else the carried one) ----------------------------------------------------
mkdir -p "$PREFIX/bin"
unpack zstd.tar tar -x -C "$PREFIX/bin" || exit 1
if command -v zstd >/dev/null; then
    ZSTD=(zstd)
else
    ZSTD=(env "LD_LIBRARY_PATH=$PREFIX/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$PREFIX/bin/zstd")
fi
"${ZSTD[@]}" --version >/dev/null || { fail "no working zstd"; exit 1; }
unz() { "${ZSTD[@]}" -q -d --long=27 -c; }
untar_z() { unz | tar -x -C "$1"; }
unz_to() { unz > "$1"; }

# --- 2. Python packages, media ----------------------------------------------------------------------------
mkdir -p "$PREFIX/pylibs" "$PREFIX/media" "$PREFIX/models"
unpack pylibs.tar.zst untar_z "$PREFIX/pylibs" || exit 1
PYTHONPATH_CARRIED="$PREFIX/pylibs:$ROOT"

if [ "$EXPORT_ONLY" = 1 ]; then  # (pack.sh --models export) in the background while sets travel
    say "exporting the random-init set (torch $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>&1))"
    rm -rf "$PREFIX/models/matanyone2.tmp"
    if (cd "$ROOT" && PYTHONPATH="$PYTHONPATH_CARRIED" timeout 900 "$PYTHON" -m tools.matanyone2.export \
            --out "$PREFIX/models/matanyone2.tmp" --random-init 0); then
        rm -rf "$PREFIX/models/matanyone2" && mv "$PREFIX/models/matanyone2.tmp" "$PREFIX/models/matanyone2"
        say "export done"
    else
        fail "export"
    fi
    touch "$GP/export.done"
    exit 0
fi
unpack media.tar tar -x -C "$PREFIX/media" || exit 1

# --- 3. GStreamer runtime: the .debs into PREFIX/gst --------------------------------------------------------
deb_x() {  # deb_x DEB DEST: dpkg-deb -x, or Python (ar + tar) where there is no dpkg-deb
    if command -v dpkg-deb >/dev/null; then dpkg-deb -x "$1" "$2"; return; fi
    "$PYTHON" - "$1" "$2" <<'EOF'
import io, sys, tarfile
deb, dest = sys.argv[1:]
data = open(deb, 'rb').read()
assert data[:8] == b'!<arch>\n', 'not an ar archive'
pos = 8
while pos < len(data):
    header = data[pos:pos + 60]
    name, size = header[:16].decode().strip().rstrip('/'), int(header[48:58])
    body = data[pos + 60:pos + 60 + size]
    if name.startswith('data.tar'):
        if name.endswith('.zst'):
            import subprocess
            body = subprocess.run(['zstd', '-d', '-c'], input=body, capture_output=True, check=True).stdout
            mode = 'r:'
        else:
            mode = 'r:*'
        with tarfile.open(fileobj=io.BytesIO(body), mode=mode) as t:
            t.extractall(dest)
    pos += 60 + size + (size & 1)
EOF
}
gst_unpack() {
    local tmp="$WORK/debs"
    rm -rf "$tmp" "$PREFIX/gst"; mkdir -p "$tmp" "$PREFIX/gst"
    tar -x -C "$tmp" || return 1
    for deb in "$tmp"/*.deb; do deb_x "$deb" "$PREFIX/gst" || return 1; done
    # only the plugins the pipelines use (no scanning of plugins whose libraries are not here)
    local plugins="$PREFIX/gst/usr/lib/x86_64-linux-gnu/gstreamer-1.0"
    for f in "$plugins"/*.so; do
        case "$(basename "$f")" in
            libgstcoreelements.so|libgstrawparse.so|libgstmultifile.so|libgstapp.so|libgstvideoconvertscale.so) ;;
            libgstplayback.so|libgsttypefindfunctions.so|libgstpng.so) ;;  # the element's seed-mask reader
            *) rm -f "$f" ;;
        esac
    done
    rm -rf "$tmp" "$PREFIX/gst/usr/share/doc" "$PREFIX/gst/usr/share/man"
}
unpack gst-debs.tar gst_unpack || exit 1

# --- 4. the plugin, ONNX Runtime, the model set ---------------------------------------------------------------
mkdir -p "$PREFIX/plugins" "$PREFIX/ort"
unpack plugin.so.zst unz_to "$PREFIX/plugins/libgstmatanyone.so" || exit 1
unpack ort-core.tar.zst untar_z "$PREFIX/ort" || exit 1
unpack ort-cuda.so.zst unz_to "$PREFIX/ort/libonnxruntime_providers_cuda.so" || exit 1
ln -sf "$(cd "$PREFIX/ort" && ls libonnxruntime.so.1.* | head -1)" "$PREFIX/ort/libonnxruntime.so.1"
if grep -q 'models=carry' "$STAGE/PACKINFO"; then
    unpack models.tar.zst untar_z "$PREFIX/models" || exit 1
else
    say "waiting for the background export (pack.sh --models export)"
    [ -e "$GP/export.started" ] || { setsid nohup bash "$ROOT/scripts/gpu-proof/run.sh" --export-only > "$GP/export.log" 2>&1 < /dev/null &
                                     touch "$GP/export.started"; }
    for _ in $(seq 1 $((BUDGET - 240))); do [ -f "$GP/export.done" ] && break; sleep 1; done
    [ -f "$GP/export.log" ] && tail -5 "$GP/export.log"
fi
[ -f "$PREFIX/models/matanyone2/manifest.json" ] || { fail "no model set in $PREFIX/models/matanyone2"; exit 1; }

# --- 5. the NVIDIA libraries of the machine's Python wheels, flattened into PREFIX/ort/nvidia -----------------
TENSORRT=()
if [ "$SMOKE" = 0 ]; then
    rm -rf "$PREFIX/ort/nvidia"; mkdir -p "$PREFIX/ort/nvidia"
    SITES=$("$PYTHON" -c 'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null)
    n=0
    while read -r site; do
        [ -d "$site" ] || continue
        for lib in "$site"/nvidia/*/lib/*.so* "$site"/nvidia/*/*/lib/*.so* "$site"/tensorrt_libs/*.so* "$site"/tensorrt/*.so*; do
            [ -f "$lib" ] || continue
            [ -e "$PREFIX/ort/nvidia/$(basename "$lib")" ] && continue
            ln -s "$lib" "$PREFIX/ort/nvidia/$(basename "$lib")" && n=$((n + 1))
        done
    done <<< "$SITES"
    say "linked $n NVIDIA libraries from the Python wheels into $PREFIX/ort/nvidia"
    ls "$PREFIX/ort/nvidia" | grep -E '^lib(cudart|cublas|cublasLt|curand|cufft|cudnn|nvrtc|nvinfer|nvonnxparser)\.so' | tr '\n' ' '; echo
    if ls "$PREFIX/ort/nvidia"/libnvinfer.so.10* >/dev/null 2>&1; then
        TENSORRT=(--tensorrt)
    elif ldconfig -p 2>/dev/null | grep -q 'libnvinfer.so.10'; then
        TENSORRT=(--tensorrt)
    fi
    say "TensorRT: ${TENSORRT[*]:-not on this machine}"
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
fi

# --- 6. measure ----------------------------------------------------------------------------------------------------------
SMOKE_ARGS=()
[ "$SMOKE" = 1 ] && SMOKE_ARGS=(--cpu-smoke)
say "measuring (budget $BUDGET s from the start of run.sh)"
PYTHONUNBUFFERED=1 PYTHONPATH="$PYTHONPATH_CARRIED" "$PYTHON" "$ROOT/scripts/gpu-proof/measure.py" \
    --prefix "$PREFIX" --work "$WORK" --out "$OUT" --budget-s "$BUDGET" --elapsed-s "$(( $(date +%s) - T0 ))" \
    --python "$PYTHON" --pythonpath "$PYTHONPATH_CARRIED" "${TENSORRT[@]}" "${SMOKE_ARGS[@]}"
rc=$?
say "run.sh done (rc $rc); results in $OUT"
# keep $OUT within what comes back: at most 8 files
ls -R "$OUT" | head -20
exit $rc
