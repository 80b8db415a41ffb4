#!/usr/bin/env bash
# The path to real MatAnyone2 mattes: download the official checkpoint (where a network exists),
# export it to the ONNX model set, and install that where the element looks (engine=auto then picks
# it). The weights are under the NTU S-Lab License 1.0: NON-COMMERCIAL use only.
#
#   scripts/install-matanyone2.sh --accept-license            download, then export
#   scripts/install-matanyone2.sh --checkpoint matanyone2.pth  export a checkpoint you already have
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODELS="${XDG_DATA_HOME:-$HOME/.local/share}/gst-matanyone/models"
CHECKPOINT=""; ACCEPT=()
while [ $# -gt 0 ]; do
    case "$1" in
        --accept-license) ACCEPT=(--accept-license) ;;
        --checkpoint) CHECKPOINT="$2"; shift ;;
        *) echo "install-matanyone2.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
"$ROOT/scripts/setup.sh" --no-plugin >/dev/null
cd "$ROOT"
if [ -z "$CHECKPOINT" ]; then
    mkdir -p "$MODELS/checkpoints"
    .venv/bin/python -m tools.matanyone2.fetch --out "$MODELS/checkpoints" "${ACCEPT[@]}"
    CHECKPOINT="$MODELS/checkpoints/matanyone2.pth"
fi
.venv/bin/python -m tools.matanyone2.export --out "$MODELS/matanyone2" --checkpoint "$CHECKPOINT"
echo "[matanyone2] installed $MODELS/matanyone2 (NTU S-Lab License 1.0, non-commercial); engine=auto now uses it"
