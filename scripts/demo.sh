#!/usr/bin/env bash
# The main job: set up whatever is missing, then matte a real clip with the installed plugin.
# Writes out/<name>-composite.mp4 (the person over a flat colour) and out/<name>-preview.png
# (input | alpha | composite of a mid-clip frame).
#
#   scripts/demo.sh [CLIP] [OUT_DIR]     CLIP defaults to Megamind.avi from Debian's opencv-doc
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CLIP="${1:-/usr/share/doc/opencv-doc/examples/data/Megamind.avi}"
OUT="${2:-$ROOT/out}"
"$ROOT/scripts/setup.sh"
[ -f "$CLIP" ] || { echo "demo.sh: no such clip: $CLIP" >&2; exit 1; }
CLIP="$(realpath "$CLIP")"
mkdir -p "$OUT"
NAME="$(basename "${CLIP%.*}")"
echo "[demo] matting $CLIP"
start=$(date +%s.%N)
"$ROOT/examples/pipelines/file-to-composite-color.sh" "$CLIP" "$OUT/$NAME-composite.mp4" >/dev/null
end=$(date +%s.%N)
echo "[demo] wrote $OUT/$NAME-composite.mp4 in $(printf '%.1f' "$(echo "$end - $start" | awk '{print $1 - $3}')") s"
(cd "$ROOT" && .venv/bin/python -m tools.preview "$CLIP" "$OUT/$NAME-preview.png")
