#!/usr/bin/env bash
# The main job: set up whatever is missing, then matte a real clip with the installed plugin.
# Writes out/<name>-composite.mp4 (the person over a flat colour) and out/<name>-preview.png
# (input | alpha | composite of a mid-clip frame). engine=auto: Robust Video Matting after set-up
# (MatAnyone2 once its weights are installed); the engine that ran and its licence are printed.
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
# Which engine engine=auto runs here, and its weights' licence (the first frames' stats say it).
STATS="$(gst-launch-1.0 -m filesrc location="$CLIP" ! decodebin ! videoconvert ! video/x-raw,format=BGRA \
    ! identity eos-after=3 ! matanyone stats-interval=1 ! fakesink 2>/dev/null | grep -m1 "matanyone-stats" || true)"
ENGINE="$(sed -n 's/.*engine=(string)\([a-z0-9]*\).*/\1/p' <<<"$STATS")"
LICENSE="$(sed -n 's/.*license=(string)\("[^"]*"\|[^,;]*\).*/\1/p' <<<"$STATS" | tr -d '"\\')"
echo "[demo] engine: ${ENGINE:-unknown} (weights' licence: ${LICENSE:-unknown}; README \"Models and licences\")"
start=$(date +%s.%N)
"$ROOT/examples/pipelines/file-to-composite-color.sh" "$CLIP" "$OUT/$NAME-composite.mp4" >/dev/null
end=$(date +%s.%N)
echo "[demo] wrote $OUT/$NAME-composite.mp4 in $(printf '%.1f' "$(echo "$end - $start" | awk '{print $1 - $3}')") s"
(cd "$ROOT" && .venv/bin/python -m tools.preview "$CLIP" "$OUT/$NAME-preview.png")
