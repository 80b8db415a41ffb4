#!/usr/bin/env bash
# GPU proof, step 2 (on the device, once per transfer): move the carried set N
# (build/gpu-proof/sets/N, made by pack.sh) into the persistent stage build/gpu-proof/stage (an
# ignored folder, so it stays on the machine between calls while the machine is held), check its
# pieces against PIECES.sha256 and say what is still missing.
#
#   bash scripts/gpu-proof/receive.sh N
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
N="${1:?usage: receive.sh N}"
SRC="$ROOT/build/gpu-proof/sets/$N"
STAGE="$ROOT/build/gpu-proof/stage"
START=$(date +%s%N)
if [ ! -d "$SRC" ]; then
    echo "receive: set $N is not here ($SRC): was it named in carry?" >&2
    ls "$STAGE" 2>/dev/null | sed 's/^/  staged: /' >&2 || true
    exit 1
fi
mkdir -p "$STAGE"
received=()
for f in "$SRC"/*; do
    name="$(basename "$f")"
    mv -f "$f" "$STAGE/$name"
    case "$name" in *.part*) received+=("$name") ;; esac
done
rmdir "$SRC" 2>/dev/null || true
cd "$STAGE"
# check what this set brought (a few hundred ms per 60 MiB)
bad=0
for name in "${received[@]}"; do
    if ! grep -E "  $name\$" PIECES.sha256 | sha256sum -c --quiet --status; then
        echo "receive: $name is damaged (sha256 mismatch): carry set $N again" >&2
        rm -f "$name"
        bad=1
    fi
done
missing=$(awk '{print $2}' PIECES.sha256 | while read -r p; do [ -f "$p" ] || echo "$p"; done | wc -l)
total=$(wc -l < PIECES.sha256)
printf 'receive: set %s: %d pieces, %s MiB, in %d ms; stage holds %d of %d pieces (%s)\n' \
    "$N" "${#received[@]}" "$(du -cm "${received[@]}" 2>/dev/null | tail -1 | cut -f1)" \
    "$(( ($(date +%s%N) - START) / 1000000 ))" "$((total - missing))" "$total" "$(cat PACKINFO)"
if [ "$missing" -gt 0 ]; then
    awk '{print $2}' PIECES.sha256 | while read -r p; do [ -f "$p" ] || echo "  still to come: $p"; done
fi
# --models export: the export can start as soon as the Python packages are here; it runs in its own
# session (setsid), so it goes on while the next sets travel; run.sh waits for it.
if grep -q 'models=export' PACKINFO && [ -f pylibs.tar.zst.part00 ] && [ -f zstd.tar.part00 ] \
        && [ ! -e "$ROOT/build/gpu-proof/export.started" ]; then
    touch "$ROOT/build/gpu-proof/export.started"
    setsid nohup bash "$ROOT/scripts/gpu-proof/run.sh" --export-only > "$ROOT/build/gpu-proof/export.log" 2>&1 < /dev/null &
    echo "receive: started the model export in the background (log: build/gpu-proof/export.log)"
fi
exit "$bad"
