#!/usr/bin/env bash
# GPU proof, step 1 (on a development machine): pack everything a bare NVIDIA machine needs to run the
# element (no GStreamer, no Swift, no network there; CUDA 13 + cuDNN as Python wheels, PyTorch with
# CUDA) into numbered transfer sets of at most --limit-mib each, and write PLAN.txt: the sets, their
# sizes, and the exact sequence of device `run` calls (command + carry) that ships and runs them.
#
#   scripts/gpu-proof/pack.sh [--plugin SO] [--models carry|export] [--model-set DIR]
#                             [--limit-mib 59] [--level 19] [--out build/gpu-proof]
#
# What travels (each payload compressed once, split where it crosses a set boundary):
#   zstd.tar          the zstd binary + liblz4 (the device image may lack zstd; uncompressed)
#   media.tar         test-sample2.mp4 (decoded there with OpenCV) + its first-frame mask
#   pylibs.tar.zst    pure-Python packages the device lacks: matanyone2 (upstream), omegaconf, antlr4,
#                     onnxconverter_common (tools/matanyone2/fp16.py makes the fp16 set there)
#   plugin.so.zst     libgstmatanyone.so (Swift runtime linked in statically)
#   gst-debs.tar      Debian 12 .debs: GStreamer 1.22 core/base/tools (+ good, for multifilesrc) and
#                     what they and the plugin link (run.sh keeps only the plugins the pipelines use)
#   ort-core.tar.zst  onnxruntime-gpu 1.31.1: libonnxruntime.so, providers_shared, providers_tensorrt
#   models.tar.zst    the random-init fp32 MatAnyone2 set (--models carry, the default), and RVM's set
#   ort-cuda.so.zst   libonnxruntime_providers_cuda.so (284 MB; zstd -19 --long=27)
# Compressed payloads are cached in OUT/cache by source hash, so a second pack takes seconds.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PLUGIN="${XDG_DATA_HOME:-$HOME/.local/share}/gstreamer-1.0/plugins/libgstmatanyone.so"
MODELS_MODE=carry
MODEL_SET="$ROOT/build/test-models/matanyone2"
LIMIT_MIB=59
LEVEL=19
OUT="$ROOT/build/gpu-proof"
SHARED="${MATANYONE_SHARED:-$ROOT/../shared}"
ORT_GPU_VERSION=1.31.1
while [ $# -gt 0 ]; do
    case "$1" in
        --plugin) PLUGIN="$2"; shift ;;
        --models) MODELS_MODE="$2"; shift ;;
        --model-set) MODEL_SET="$2"; shift ;;
        --limit-mib) LIMIT_MIB="$2"; shift ;;
        --level) LEVEL="$2"; shift ;;
        --out) OUT="$2"; shift ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        *) echo "pack.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
case "$MODELS_MODE" in carry|export) ;; *) echo "pack.sh: --models carry|export" >&2; exit 2 ;; esac
say() { printf '\033[1m[pack]\033[0m %s\n' "$*"; }
START=$SECONDS
PY="$ROOT/.venv/bin/python"
[ -x "$PY" ] || { echo "pack.sh: no .venv (run scripts/setup.sh once)" >&2; exit 1; }
command -v zstd >/dev/null || { say "installing zstd"; apt-get install -y -qq zstd >/dev/null; }
[ -f "$PLUGIN" ] || { echo "pack.sh: no plugin at $PLUGIN (build it, or pass --plugin)" >&2; exit 1; }
CACHE="$OUT/cache"
PAY="$OUT/payload"
SETS="$OUT/sets"
rm -rf "$PAY" "$SETS"
mkdir -p "$CACHE" "$PAY" "$SETS"
LIMIT=$((LIMIT_MIB * 1024 * 1024))

# zstd FILE-OR-STDIN-NAME KEY DEST: compress with the chosen level, cached under KEY (a content hash).
zcache() {
    local src="$1" key="$2" dest="$3"
    local cached="$CACHE/$key.L$LEVEL.zst"
    if [ ! -f "$cached" ]; then
        zstd -q -"$LEVEL" --long=27 -T0 -f "$src" -o "$cached.part"
        mv "$cached.part" "$cached"
    fi
    ln -f "$cached" "$dest" 2>/dev/null || cp "$cached" "$dest"
}
sha() { sha256sum "$1" | cut -d' ' -f1; }

# 1. zstd itself (the device may have no zstd; this one needs liblz4 beside glibc, libz, liblzma)
say "zstd binary"
ZT="$(mktemp -d)"
cp "$(command -v zstd)" "$ZT/zstd"
cp -L "$(ldd "$(command -v zstd)" | awk '/liblz4/ {print $3}')" "$ZT/"
tar -C "$ZT" -cf "$PAY/zstd.tar" .
rm -rf "$ZT"

# 2. media
say "media from $SHARED/media"
for f in test-sample2.mp4 test-sample2.png; do
    [ -f "$SHARED/media/$f" ] || { echo "pack.sh: $SHARED/media/$f missing (set MATANYONE_SHARED)" >&2; exit 1; }
done
tar -C "$SHARED/media" -cf "$PAY/media.tar" test-sample2.mp4 test-sample2.png

# 3. pure-Python packages the device image lacks (same versions as .venv; python 3.11 here, 3.12
#    there: these are source-only packages)
say "python packages"
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
PKGS=(matanyone2 omegaconf antlr4 onnxconverter_common)
for p in "${PKGS[@]}"; do [ -d "$SITE/$p" ] || { echo "pack.sh: $p not in $SITE" >&2; exit 1; }; done
tar -C "$SITE" --exclude=__pycache__ -cf - "${PKGS[@]}" | zstd -q -19 -T0 -o "$PAY/pylibs.tar.zst"

# 4. the plugin
say "plugin $PLUGIN ($(stat -c '%y' "$PLUGIN" | cut -d. -f1))"
BUILT="$ROOT/.build/plugin/x86_64-unknown-linux-gnu/release/libgstmatanyone.so"
if [ -f "$BUILT" ] && [ "$BUILT" -nt "$PLUGIN" ] && ! cmp -s "$BUILT" "$PLUGIN"; then
    say "note: $BUILT is newer than the plugin packed (pass --plugin to pack it instead)"
fi
PLUGIN_SHA="$(sha "$PLUGIN")"
zcache "$PLUGIN" "plugin-$PLUGIN_SHA" "$PAY/plugin.so.zst"

# 5. GStreamer runtime: Debian 12's own .debs (the ones the plugin was built against)
# plugins-good for multifilesrc (loops the clip's frames) and pngdec (the element reads its seed mask
# with decodebin, from base); libpng16-16 for pngdec; GIO links libmount1, libselinux1 and libblkid1,
# which every Debian/Ubuntu base system has, carried anyway.
DEBS=(libgstreamer1.0-0 libgstreamer-plugins-base1.0-0 gstreamer1.0-plugins-base gstreamer1.0-plugins-good
      gstreamer1.0-tools liborc-0.4-0 libglib2.0-0 libunwind8 libdw1 libelf1 libopenblas0-pthread libgfortran5
      libquadmath0 libffi8 libpcre2-8-0 libcap2 libmount1 libselinux1 libblkid1 libpng16-16)
say "GStreamer runtime: ${#DEBS[@]} .debs"
mkdir -p "$CACHE/debs"
if ! (cd "$CACHE/debs" && apt-get download "${DEBS[@]}" >/dev/null 2>&1); then
    apt-get update -qq >/dev/null
    (cd "$CACHE/debs" && apt-get download "${DEBS[@]}" >/dev/null 2>&1)
fi
# keep one (the newest downloaded) file per package
DEB_FILES=()
for d in "${DEBS[@]}"; do
    f="$(ls -t "$CACHE/debs/${d}_"*.deb 2>/dev/null | head -1)"
    [ -n "$f" ] || { echo "pack.sh: apt-get download $d failed" >&2; exit 1; }
    DEB_FILES+=("$(basename "$f")")
done
tar -C "$CACHE/debs" -cf "$PAY/gst-debs.tar" "${DEB_FILES[@]}"

# 6. ONNX Runtime GPU build, from the PyPI wheel
say "onnxruntime-gpu $ORT_GPU_VERSION"
"$ROOT/.venv/bin/pip" download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$CACHE" \
    "onnxruntime-gpu==$ORT_GPU_VERSION"
WHEEL="$(ls "$CACHE"/onnxruntime_gpu-"$ORT_GPU_VERSION"-*.whl | head -1)"
WHEEL_SHA="$(sha "$WHEEL")"
ORTX="$CACHE/ort-$WHEEL_SHA"
if [ ! -f "$ORTX/libonnxruntime_providers_cuda.so" ]; then
    rm -rf "$ORTX"; mkdir -p "$ORTX"
    "$PY" - "$WHEEL" "$ORTX" <<'EOF'
import os, sys, zipfile
wheel, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        base = os.path.basename(name)
        if name.startswith('onnxruntime/capi/libonnxruntime'):
            with z.open(name) as src, open(os.path.join(dest, base), 'wb') as dst:
                dst.write(src.read())
EOF
fi
ORT_CORE=(libonnxruntime.so.$ORT_GPU_VERSION libonnxruntime_providers_shared.so libonnxruntime_providers_tensorrt.so)
tar -C "$ORTX" -cf - "${ORT_CORE[@]}" | zstd -q -"$LEVEL" --long=27 -T0 -o "$PAY/ort-core.tar.zst"
T0=$SECONDS
zcache "$ORTX/libonnxruntime_providers_cuda.so" "ort-cuda-$WHEEL_SHA" "$PAY/ort-cuda.so.zst"
say "  providers_cuda: $(stat -c %s "$ORTX/libonnxruntime_providers_cuda.so") -> $(stat -c %s "$PAY/ort-cuda.so.zst") bytes ($((SECONDS - T0)) s; cached after the first pack)"

# 7. the model set
if [ "$MODELS_MODE" = carry ]; then
    if [ ! -f "$MODEL_SET/manifest.json" ]; then
        say "exporting the random-init set into $MODEL_SET (a few minutes)"
        (cd "$ROOT" && "$PY" -m tools.matanyone2.export --out "$MODEL_SET" --random-init 0)
    fi
    # Robust Video Matting's set rides along (15 MB) for the kit's last step, where set-up installed it.
    RVM_SET="${XDG_DATA_HOME:-$HOME/.local/share}/gst-matanyone/models/rvm"
    RVM_ARGS=()
    [ -f "$RVM_SET/manifest.json" ] && RVM_ARGS=(-C "$(dirname "$RVM_SET")" "$(basename "$RVM_SET")")
    MODEL_KEY="$(cat "$MODEL_SET"/manifest.json "$MODEL_SET"/*.onnx ${RVM_ARGS:+"$RVM_SET/manifest.json"} | sha256sum | cut -d' ' -f1)"
    say "model set $MODEL_SET ($(du -sh "$MODEL_SET" | cut -f1))${RVM_ARGS:+, and $RVM_SET}"
    MT="$(mktemp -d)"
    tar -C "$(dirname "$MODEL_SET")" --exclude='*.engine' --exclude='*.profile' -cf "$MT/models.tar" "$(basename "$MODEL_SET")" \
        "${RVM_ARGS[@]}"
    zcache "$MT/models.tar" "models-$MODEL_KEY" "$PAY/models.tar.zst"
    rm -rf "$MT"
fi

# 8. split into sets: payloads in order, each set filled up to LIMIT, a payload cut where it crosses
#    a set boundary (so the number of sets is the least possible).
ORDER=(zstd.tar media.tar pylibs.tar.zst plugin.so.zst gst-debs.tar ort-core.tar.zst)
[ "$MODELS_MODE" = carry ] && ORDER+=(models.tar.zst)
ORDER+=(ort-cuda.so.zst)
: > "$OUT/PAYLOADS.tsv"
: > "$OUT/PIECES.sha256"
"$PY" - "$PAY" "$SETS" "$LIMIT" "$OUT/PAYLOADS.tsv" "${ORDER[@]}" <<'EOF'
import hashlib, os, sys
pay, sets, limit, index = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
order = sys.argv[5:]
set_no, room = 1, limit
os.makedirs(os.path.join(sets, '1'), exist_ok=True)
rows = []
for name in order:
    path = os.path.join(pay, name)
    size = os.path.getsize(path)
    digest = hashlib.sha256()
    part, offset = 0, 0
    with open(path, 'rb') as src:
        while offset < size:
            if room == 0:
                set_no, room = set_no + 1, limit
                os.makedirs(os.path.join(sets, str(set_no)), exist_ok=True)
            chunk = min(room, size - offset)
            data = src.read(chunk)
            digest.update(data)
            with open(os.path.join(sets, str(set_no), f'{name}.part{part:02d}'), 'wb') as dst:
                dst.write(data)
            offset += chunk
            room -= chunk
            part += 1
    rows.append(f'{name}\t{part}\t{size}\t{digest.hexdigest()}')
with open(index, 'w') as f:
    f.write('\n'.join(rows) + '\n')
EOF
(cd "$SETS" && for d in */; do (cd "$d" && sha256sum *.part*); done) > "$OUT/PIECES.sha256"
NSETS=$(ls "$SETS" | wc -l)
REL_SETS="$(realpath --relative-to="$ROOT" "$SETS")"  # what `carry` names (a path in the repository)
echo "models=$MODELS_MODE sets=$NSETS plugin_sha256=$PLUGIN_SHA ort=$ORT_GPU_VERSION packed=$(date -u +%FT%TZ)" > "$OUT/PACKINFO"
for d in "$SETS"/*/; do cp "$OUT/PAYLOADS.tsv" "$OUT/PIECES.sha256" "$OUT/PACKINFO" "$d"; done
rm -rf "$PAY"

# 9. PLAN.txt
TREE_BYTES=$(cd "$ROOT" && git ls-files -z -c -o --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s+=$1} END {print s+0}')
{
    echo "GPU proof transfer plan ($(date -u +%F), models: $MODELS_MODE, $NSETS sets of at most $LIMIT_MIB MiB)"
    echo "plugin: $PLUGIN (sha256 $PLUGIN_SHA)"
    echo "working tree that travels with every call (tracked + untracked, not ignored): $((TREE_BYTES / 1024)) KiB"
    echo
    echo "payloads (name, pieces, bytes, sha256):"
    sed 's/^/  /' "$OUT/PAYLOADS.tsv"
    echo
    echo "transfer sets:"
    for d in $(ls "$SETS" | sort -n); do
        bytes=$(du -cb "$SETS/$d"/* | tail -1 | cut -f1)
        printf '  set %s: %6.1f MiB  %s\n' "$d" "$(awk -v b="$bytes" 'BEGIN {print b / 1048576}')" \
            "$(cd "$SETS/$d" && ls *.part* | tr '\n' ' ')"
        total_mib=$(( (bytes + TREE_BYTES) / 1048576 ))
        [ "$total_mib" -lt 64 ] || echo "  WARNING: set $d + working tree = $total_mib MiB, over the 64 MiB a call carries"
    done
    echo
    echo "device calls (each right after the previous one returns: the machine goes back after ~30 s idle;"
    echo "if a reply says a fresh machine was started, the stage is gone: start again from set 1):"
    for d in $(ls "$SETS" | sort -n); do
        if [ "$d" = 1 ] && [ "$d" = "$NSETS" ]; then
            cmd="bash scripts/gpu-proof/receive.sh 1 && bash scripts/gpu-proof/run.sh"; t=600
        elif [ "$d" = 1 ]; then
            cmd="nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; bash scripts/gpu-proof/receive.sh 1"; t=180
        elif [ "$d" = "$NSETS" ]; then
            cmd="bash scripts/gpu-proof/receive.sh $d && bash scripts/gpu-proof/run.sh"; t=600
        else
            cmd="bash scripts/gpu-proof/receive.sh $d"; t=120
        fi
        echo "  $d. run(command='$cmd', carry=['$REL_SETS/$d'], timeout_s=$t)"
    done
    echo
    [ "$MODELS_MODE" = export ] && echo "(--models export: receive.sh 1 starts the export of the random-init set in the background,
on the device's PyTorch, while the other sets travel; run.sh waits for it)" && echo
    echo "run.sh keeps to a 540 s budget by default (RUN_BUDGET_S=...; steps are skipped, not cut, when"
    echo "the budget runs short); it writes into \$OUT: bench/gpu-cuda-512x288.json, bench/gpu-cuda-1920x1088.json"
    echo "(bench/gpu-tensorrt-*.json if TensorRT's libraries are on the device), summary.txt and run.log."
    echo "Afterwards: copy files_at/bench/*.json into bench/, then give_back (unless rerunning at once)."
    echo "If the last call fails after the transfers, rerun just: run(command='bash scripts/gpu-proof/run.sh', carry=[])"
} > "$OUT/PLAN.txt"
cat "$OUT/PLAN.txt"
say "done in $((SECONDS - START)) s: $OUT/PLAN.txt"
