#!/usr/bin/env bash
# A live source → one PNG alpha matte per frame (white = the person), every frame kept: mode=async
# gives each frame the newest matte, and async-delay=1000 lets a frame wait up to a second for the
# matte of its own moment (each frame inference ran on leaves with its own).
#   examples/pipelines/live-alpha-pngs.sh OUTPUT_DIR
# SOURCE overrides the camera (e.g. SOURCE="videotestsrc is-live=true num-buffers=90").
set -euo pipefail
OUT="$1"
SOURCE="${SOURCE:-v4l2src}"
mkdir -p "$OUT"
# shellcheck disable=SC2086
gst-launch-1.0 -e \
    $SOURCE ! videoconvert ! videoscale ! video/x-raw,format=BGRA,width=640,height=360 \
    ! matanyone mode=async async-delay=1000 ! video/x-raw,format=GRAY8 \
    ! queue ! pngenc ! multifilesink location="$OUT/alpha-%05d.png"
