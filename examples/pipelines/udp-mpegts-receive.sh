#!/usr/bin/env bash
# Receives what live-to-udp-mpegts.sh sends (MPEG-TS in RTP on UDP PORT, default 5004) and shows it.
#   examples/pipelines/udp-mpegts-receive.sh [PORT]
# SINK overrides the display (e.g. SINK="fakesink"); TIMEOUT_NS ends the run when no packet came for
# that long (udpsrc timeout; a bus message, then EOS).
set -euo pipefail
PORT="${1:-5004}"
SINK="${SINK:-autovideosink}"
# shellcheck disable=SC2086
gst-launch-1.0 -e \
    udpsrc port="$PORT" ${TIMEOUT_NS:+timeout=$TIMEOUT_NS} \
        caps="application/x-rtp,media=(string)video,clock-rate=(int)90000,encoding-name=(string)MP2T" \
    ! rtpjitterbuffer latency=200 ! rtpmp2tdepay ! tsdemux ! h264parse ! avdec_h264 ! videoconvert ! $SINK
