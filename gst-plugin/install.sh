#!/usr/bin/env bash
# Builds libgstmatanyone.so (release, Swift runtime linked statically so the plugin does not depend on
# the toolchain's location), installs it into the user's GStreamer plugin folder (or the folder given)
# and checks that GStreamer loads it, against a private registry so a failed load blacklists nothing.
#
#   gst-plugin/install.sh [PLUGIN_DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PLUGIN_DIR="${1:-${XDG_DATA_HOME:-$HOME/.local/share}/gstreamer-1.0/plugins}"
SCRATCH="$ROOT/.build/plugin"

echo "[plugin] building libgstmatanyone.so (release)"
mkdir -p "$SCRATCH"
# A failed build must fail here: the .so of an earlier build may still be in the scratch folder.
if ! (cd "$ROOT" && swift build -c release --product gstmatanyone --scratch-path "$SCRATCH" \
        -Xswiftc -static-stdlib >"$SCRATCH/build.log" 2>&1); then
    grep -E "error:" "$SCRATCH/build.log" | sort -u | head -40 >&2
    echo "[plugin] build failed (full log: $SCRATCH/build.log); nothing installed" >&2
    exit 1
fi
BUILT="$SCRATCH/release/libgstmatanyone.so"
[ -f "$BUILT" ] || { echo "[plugin] build produced no $BUILT" >&2; exit 1; }

mkdir -p "$PLUGIN_DIR"
if ! cmp -s "$BUILT" "$PLUGIN_DIR/libgstmatanyone.so"; then
    # Copy then rename, so a running GStreamer never maps a half-written file.
    cp "$BUILT" "$PLUGIN_DIR/.libgstmatanyone.so.new"
    mv "$PLUGIN_DIR/.libgstmatanyone.so.new" "$PLUGIN_DIR/libgstmatanyone.so"
    echo "[plugin] installed $PLUGIN_DIR/libgstmatanyone.so"
fi

REGISTRY="$SCRATCH/registry-check.bin"
rm -f "$REGISTRY"
if GST_REGISTRY="$REGISTRY" GST_PLUGIN_PATH="$PLUGIN_DIR" gst-inspect-1.0 matanyone >/dev/null 2>&1; then
    echo "[plugin] gst-inspect-1.0 matanyone: OK"
else
    echo "[plugin] GStreamer cannot load $PLUGIN_DIR/libgstmatanyone.so:" >&2
    GST_REGISTRY="$REGISTRY" GST_PLUGIN_PATH="$PLUGIN_DIR" gst-inspect-1.0 matanyone >&2 || true
    exit 1
fi
rm -f "$REGISTRY"
