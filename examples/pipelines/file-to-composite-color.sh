#!/usr/bin/env bash
# A video file → the person over a flat colour (ARGB, default chroma green), as H.264 in MP4.
#   examples/pipelines/file-to-composite-color.sh INPUT_VIDEO OUTPUT.mp4 [0xAARRGGBB]
set -euo pipefail
INPUT="$1"; OUTPUT="$2"; COLOR="${3:-0xff00b140}"
gst-launch-1.0 -e \
    filesrc location="$INPUT" ! decodebin ! videoconvert ! video/x-raw,format=BGRA \
    ! matanyone background=color background-color="$COLOR" \
    ! videoconvert ! x264enc speed-preset=veryfast ! mp4mux ! filesink location="$OUTPUT"
