#!/usr/bin/env bash
# Starts the Triton Inference Server the tests use (CPU only, from the nvidia-pytriton wheel) serving
# MatAnyone2 to `matanyone inference-server=http://HOST:PORT` elements, in the foreground: Ctrl-C stops it.
#
#   scripts/serve.sh [--http-port 8000] [--grpc-port 8001] [--address 127.0.0.1] [--models DIR]
#
# It serves the installed MatAnyone2 set (scripts/install-matanyone2.sh), else the random-init test set
# (the exact architecture with random weights: the whole chain runs, the mattes mean nothing).
# --address 0.0.0.0 serves other machines too. The model repository it writes (build/serve/repo) is
# what NVIDIA's Triton container serves as well (README, "Many streams, one GPU pool").
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
HTTP_PORT=8000; GRPC_PORT=8001; ADDRESS=127.0.0.1; MODELS=""
while [ $# -gt 0 ]; do
    case "$1" in
        --http-port) HTTP_PORT="$2"; shift 2 ;;
        --grpc-port) GRPC_PORT="$2"; shift 2 ;;
        --address) ADDRESS="$2"; shift 2 ;;
        --models) MODELS="$2"; shift 2 ;;
        --http-port=*) HTTP_PORT="${1#*=}"; shift ;;
        --grpc-port=*) GRPC_PORT="${1#*=}"; shift ;;
        --address=*) ADDRESS="${1#*=}"; shift ;;
        --models=*) MODELS="${1#*=}"; shift ;;
        -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
        *) echo "serve.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
scripts/setup.sh --server --no-plugin >/dev/null
if [ -z "$MODELS" ]; then
    MODELS="${XDG_DATA_HOME:-$HOME/.local/share}/gst-matanyone/models/matanyone2"
    if [ ! -f "$MODELS/manifest.json" ]; then
        MODELS="$ROOT/build/test-models/matanyone2"
        if [ ! -f "$MODELS/manifest.json" ]; then
            echo "[serve] no MatAnyone2 weights installed: exporting the random-init set (a few minutes, once)"
            .venv/bin/python -m tools.matanyone2.export --out "$MODELS" --random-init 0
        fi
        echo "[serve] serving the random-init MatAnyone2 set (random weights: the chain runs, the mattes mean nothing)"
    fi
fi
.venv/bin/python -m tools.serve.repository --models "$MODELS" --out build/serve/repo --link >/dev/null
echo "[serve] MatAnyone2 from $MODELS on http://$ADDRESS:$HTTP_PORT (Ctrl-C stops it)"
exec .venv-triton/bin/python -m tools.serve.server --repository build/serve/repo --address "$ADDRESS" \
    --http-port "$HTTP_PORT" --grpc-port "$GRPC_PORT"
