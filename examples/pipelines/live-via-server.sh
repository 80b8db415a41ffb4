#!/usr/bin/env bash
# A live camera matted by MatAnyone2 on an inference server (Triton: scripts/serve.sh, or a GPU box),
# its background blurred, at the camera's frame rate. This machine runs only the seeding segmenter, the
# composite and the capture; mode=async carries on (frames unmatted, one WARNING) while the server is away.
#   examples/pipelines/live-via-server.sh http://HOST:8000 [/dev/video0]
# SOURCE overrides the camera (e.g. SOURCE="videotestsrc is-live=true" for a dry run), SINK the display.
set -euo pipefail
SERVER="$1"
DEVICE="${2:-/dev/video0}"
SOURCE="${SOURCE:-v4l2src device=$DEVICE}"
SINK="${SINK:-autovideosink}"
# shellcheck disable=SC2086
gst-launch-1.0 -e \
    $SOURCE ! videoconvert ! videoscale ! video/x-raw,format=BGRA,width=640,height=360 \
    ! queue leaky=downstream max-size-buffers=1 max-size-time=0 max-size-bytes=0 \
    ! matanyone mode=async inference-server="$SERVER" background=blur stats-interval=30 \
    ! videoconvert ! $SINK
