#!/usr/bin/env bash
# A video file → one PNG alpha matte per frame (white = person).
#   examples/pipelines/file-to-alpha-pngs.sh INPUT_VIDEO OUTPUT_DIR
set -euo pipefail
INPUT="$1"; OUT="$2"
mkdir -p "$OUT"
gst-launch-1.0 -e \
    filesrc location="$INPUT" ! decodebin ! videoconvert ! video/x-raw,format=BGRA \
    ! matanyone ! video/x-raw,format=GRAY8 \
    ! pngenc ! multifilesink location="$OUT/alpha-%05d.png"
