#!/usr/bin/env bash
# A video file → the person with a real alpha channel, in a file that keeps it:
#   examples/pipelines/file-to-alpha-video.sh INPUT_VIDEO OUTPUT [prores|ffv1|png]
#   prores  ProRes 4444 (10-bit alpha) in MOV: editors, broadcast playout (the default for .mov)
#   ffv1    FFV1 (lossless BGRA) in Matroska: archives, lossless round trips (the default for .mkv)
#   png     PNG frames in MOV (lossless RGBA)
# The alpha is straight (GStreamer's BGRA); MATANYONE="alpha-mode=premultiplied" premultiplies it
# for tools that want that. FRAMES=N stops after N frames.
set -euo pipefail
INPUT="$1"; OUTPUT="$2"
case "${3:-${OUTPUT##*.}}" in
    prores|mov) CODEC="prores" ;;
    ffv1|mkv) CODEC="ffv1" ;;
    png) CODEC="png" ;;
    *) echo "file-to-alpha-video.sh: say prores, ffv1 or png (or name a .mov or .mkv file)" >&2; exit 2 ;;
esac
case "$CODEC" in
    prores) ENCODE="videoconvert ! video/x-raw,format=A444_10LE ! avenc_prores_ks profile=4444 ! qtmux" ;;
    ffv1) ENCODE="avenc_ffv1 ! matroskamux" ;;
    png) ENCODE="videoconvert ! video/x-raw,format=RGBA ! pngenc ! qtmux" ;;
esac
LIMIT=""; [ -n "${FRAMES:-}" ] && LIMIT="! identity eos-after=$FRAMES"
# shellcheck disable=SC2086  # ENCODE, LIMIT and MATANYONE are pipeline fragments
gst-launch-1.0 -e \
    filesrc location="$INPUT" ! decodebin ! videoconvert ! video/x-raw,format=BGRA $LIMIT \
    ! matanyone background=none ${MATANYONE:-} ! video/x-raw,format=BGRA \
    ! $ENCODE ! filesink location="$OUTPUT"
