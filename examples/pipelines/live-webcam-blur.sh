#!/usr/bin/env bash
# A live camera with its background blurred, at the camera's frame rate: mode=async runs matting on
# its own thread on the newest frame and lets every frame leave at once with the newest matte. The
# leaky queue keeps the display from ever waiting on the element.
#   examples/pipelines/live-webcam-blur.sh [/dev/video0]
# SOURCE overrides the camera (e.g. SOURCE="videotestsrc is-live=true" for a dry run), SINK the display.
set -euo pipefail
DEVICE="${1:-/dev/video0}"
SOURCE="${SOURCE:-v4l2src device=$DEVICE}"
SINK="${SINK:-autovideosink}"
# shellcheck disable=SC2086
gst-launch-1.0 -e \
    $SOURCE ! videoconvert ! videoscale ! video/x-raw,format=BGRA,width=640,height=360 \
    ! queue leaky=downstream max-size-buffers=1 max-size-time=0 max-size-bytes=0 \
    ! matanyone mode=async background=blur stats-interval=30 \
    ! videoconvert ! $SINK
