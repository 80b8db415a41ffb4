#!/usr/bin/env bash
# GPU proof, dry run on this (GPU-less) machine: copy what travels to the device (tracked and
# untracked-not-ignored files of the working tree) into a bare temp folder, feed the transfer sets
# that pack.sh made through receive.sh one by one, then run run.sh --cpu-smoke there (execution-provider
# =cpu, a few frames, 256x144). With --bare (root; needs unshare), run.sh runs in a private mount
# namespace where this machine's GStreamer, GLib, ORC, OpenBLAS (and their helpers), zstd and
# dpkg-deb are masked (each file overmounted with /dev/null), so only the unpacked copies can load.
#
#   scripts/gpu-proof/simulate.sh [--bare] [--keep]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BARE=0
KEEP=0
for arg in "$@"; do
    case "$arg" in
        --bare) BARE=1 ;;
        --keep) KEEP=1 ;;
        *) echo "simulate.sh: unknown option $arg" >&2; exit 2 ;;
    esac
done
SETS="$ROOT/build/gpu-proof/sets"
[ -d "$SETS/1" ] || { echo "simulate.sh: no transfer sets: run scripts/gpu-proof/pack.sh first" >&2; exit 1; }
mkdir -p "$ROOT/build/gpu-proof"
SIM="$(mktemp -d "$ROOT/build/gpu-proof/sim.XXXXXX")"   # inside the project's (ignored) build folder
say() { printf '\033[1m[simulate]\033[0m %s\n' "$*"; }
say "device stand-in: $SIM"
mkdir -p "$SIM/repo"
(cd "$ROOT" && git ls-files -z -c -o --exclude-standard | while IFS= read -r -d '' f; do
    [ -e "$f" ] && printf '%s\0' "$f"; done | tar --null -T - -cf -) | tar -x -C "$SIM/repo"
say "working tree copied: $(du -sh "$SIM/repo" | cut -f1)"
for n in $(ls "$SETS" | sort -n); do
    mkdir -p "$SIM/repo/build/gpu-proof/sets"
    cp -r "$SETS/$n" "$SIM/repo/build/gpu-proof/sets/$n"
    (cd "$SIM/repo" && bash scripts/gpu-proof/receive.sh "$n" | sed -n 1p)
done
mkdir -p "$SIM/out"
START=$SECONDS
if [ "$BARE" = 0 ]; then
    (cd "$SIM/repo" && OUT="$SIM/out" bash scripts/gpu-proof/run.sh --cpu-smoke --python "$ROOT/.venv/bin/python") || rc=$?
else
    # a PATH without zstd, dpkg-deb and gst-*: the carried zstd and the Python .deb reader are used
    mkdir -p "$SIM/bin"
    for f in /usr/bin/* /usr/sbin/*; do
        case "$(basename "$f")" in zstd|unzstd|zstdcat|zstdmt|dpkg-deb|gst-*) continue ;; esac
        [ -e "$SIM/bin/$(basename "$f")" ] || ln -s "$f" "$SIM/bin/$(basename "$f")"
    done
    cat > "$SIM/mask.sh" <<'EOF'
set -euo pipefail
lib=/usr/lib/x86_64-linux-gnu
for d in "$lib/gstreamer-1.0" "$lib/gstreamer1.0" "$lib"/openblas-*; do
    [ -d "$d" ] && mount -t tmpfs none "$d"
done
n=0
for f in "$lib"/libgst*.so* "$lib"/libglib-2.0.so* "$lib"/libgobject-2.0.so* "$lib"/libgio-2.0.so* \
         "$lib"/libgmodule-2.0.so* "$lib"/libgthread-2.0.so* "$lib"/liborc-*.so* "$lib"/libopenblas*.so* \
         "$lib"/libblas.so* "$lib"/liblapack.so* "$lib"/libgfortran.so* "$lib"/libquadmath.so* \
         "$lib"/libunwind*.so* "$lib"/libdw.so* "$lib"/libelf.so* "$lib"/libdw-*.so* "$lib"/libelf-*.so*; do
    [ -f "$f" ] && [ ! -L "$f" ] || continue
    mount --bind /dev/null "$f" && n=$((n + 1))
done
for f in /usr/bin/zstd /usr/bin/dpkg-deb /usr/bin/gst-launch-1.0 /usr/bin/gst-inspect-1.0; do
    [ -f "$f" ] && mount --bind /dev/null "$f" && n=$((n + 1))
done
echo "[simulate] masked $n files of this machine's GStreamer/GLib/OpenBLAS/zstd/dpkg-deb"
gst-inspect-1.0 --version >/dev/null 2>&1 && { echo "[simulate] the machine's gst-inspect-1.0 still runs" >&2; exit 1; }
cd "$SIM_REPO"
exec env PATH="$SIM_BIN" OUT="$SIM_OUT" bash scripts/gpu-proof/run.sh --cpu-smoke --python "$SIM_PY"
EOF
    SIM_REPO="$SIM/repo" SIM_BIN="$SIM/bin" SIM_OUT="$SIM/out" SIM_PY="$ROOT/.venv/bin/python" \
        unshare -m --propagation private bash "$SIM/mask.sh" || rc=$?
fi
say "run.sh --cpu-smoke: rc ${rc:-0} in $((SECONDS - START)) s; results:"
ls -la "$SIM/out" "$SIM/out/bench"
cat "$SIM/out/summary.txt" 2>/dev/null || true
if [ "$KEEP" = 0 ] && [ "${rc:-0}" = 0 ]; then
    rm -rf "$SIM"
else
    say "kept $SIM"
fi
exit "${rc:-0}"
