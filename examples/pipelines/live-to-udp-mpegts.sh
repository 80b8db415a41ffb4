#!/usr/bin/env bash
# A broadcast-style chain: a live source, the person over a flat colour at a constant frame rate
# (mode=async), H.264 in MPEG-TS over RTP/UDP to HOST:PORT (default 127.0.0.1:5004). Receive it with
# examples/pipelines/udp-mpegts-receive.sh.
#   examples/pipelines/live-to-udp-mpegts.sh [HOST] [PORT]
# SOURCE overrides the camera (e.g. SOURCE="videotestsrc is-live=true num-buffers=300").
set -euo pipefail
HOST="${1:-127.0.0.1}"; PORT="${2:-5004}"
SOURCE="${SOURCE:-v4l2src}"
# shellcheck disable=SC2086
gst-launch-1.0 -e \
    $SOURCE ! videoconvert ! videoscale ! video/x-raw,format=BGRA,width=1280,height=720 \
    ! matanyone mode=async background=color background-color=0xff00b140 \
    ! videoconvert ! video/x-raw,format=I420 \
    ! x264enc tune=zerolatency speed-preset=ultrafast key-int-max=30 bitrate=4000 \
    ! h264parse config-interval=-1 ! mpegtsmux alignment=7 ! rtpmp2tpay \
    ! udpsink host="$HOST" port="$PORT" sync=true
