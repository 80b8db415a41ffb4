"""Flicker and lag of the segmenter's matte over time, for each temporal-smoothing strength.

    .venv/bin/python -m tools.flicker [--clip FILE ...] [--frames 150] [--size 640x360]
                                      [--strengths 0,25,50,75,90] [--json FILE]

Each clip is decoded once to BGRA frames; the installed element (engine=segmenter) then mattes the
same frames at every strength. Measured on the output (alpha in 0…1, in grey levels below):
- flicker: mean |α_t − α_{t−1}| at the matte's soft edge (unsmoothed α between 0.02 and 0.98) where
  the picture itself did not change (luma change below 2 levels in a 5×5 neighbourhood) — a still
  picture should give a still matte, and flicker lives at the uncertain edge;
- lag: mean |α_s − α_0| where the picture moved (luma change above 8 levels) and the unsmoothed
  matte moved with it (by more than 0.1) — how far the smoothed matte trails a moving person;
- dtSSD vs unsmoothed: √mean((∇t α_s − ∇t α_0)²) over all pixels, the temporal-gradient error of
  the video-matting literature with the unsmoothed matte standing in for ground truth;
- jitter where the picture moves: mean |α_{t+1} − 2α_t + α_{t−1}| at the soft edge where the
  picture changed (luma change above 2 levels): an edge moving steadily has none, one that
  flickers while it moves has much (no motion estimate needed to tell them apart).
(Commit ce4b5f5 also ran each strength with the smoothing following the picture's motion, as rows
"S/motion": bench/flicker-smoothing-alignment-2core-avx512.json. In place won; it was reverted.)
No ground truth exists for these clips; the figures compare strengths on the same frames.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("MATANYONE_SHARED", ROOT.parent / "shared"))
DEFAULT_CLIPS = [SHARED / "media" / "test-sample2.mp4", Path("/usr/share/doc/opencv-doc/examples/data/Megamind.avi")]


def decode(clip: Path, frames: int, width: int, height: int, out: Path) -> np.ndarray:
    subprocess.run(["gst-launch-1.0", "-q", "filesrc", f"location={clip}", "!", "decodebin", "!", "videoconvert", "!",
                    "videoscale", "!", f"video/x-raw,format=BGRA,width={width},height={height}", "!",
                    "identity", f"eos-after={frames + 1}", "!", "filesink", f"location={out}"], check=True)
    data = np.fromfile(out, dtype=np.uint8)
    count = data.size // (width * height * 4)
    return data[: count * width * height * 4].reshape(count, height, width, 4)


def matte(raw: Path, count: int, width: int, height: int, strength: int, out: Path) -> np.ndarray:
    # GRAY8 rows are padded to 4 bytes: keep widths that are multiples of 4.
    subprocess.run(["gst-launch-1.0", "-q", "filesrc", f"location={raw}", "!",
                    "rawvideoparse", "format=bgra", f"width={width}", f"height={height}", "framerate=25/1", "!",
                    "matanyone", "engine=segmenter", f"temporal-smoothing={strength}", "!", "video/x-raw,format=GRAY8", "!",
                    "filesink", f"location={out}"], check=True)
    data = np.fromfile(out, dtype=np.uint8)
    return data[: count * width * height].reshape(count, height, width).astype(np.float32) / 255


def box(values: np.ndarray, radius: int) -> np.ndarray:
    """Mean over a (2r+1)² neighbourhood (edges clamped), per frame."""
    padded = np.pad(values, ((0, 0), (radius, radius), (radius, radius)), mode="edge")
    total = np.zeros_like(values)
    for dy in range(2 * radius + 1):
        for dx in range(2 * radius + 1):
            total += padded[:, dy:dy + values.shape[1], dx:dx + values.shape[2]]
    return total / (2 * radius + 1) ** 2


def metrics(frames: np.ndarray, alphas: dict) -> dict:
    """Figures of each matte sequence in `alphas` (keyed by strength; key 0 is the unsmoothed reference)."""
    rgb = frames[..., [2, 1, 0]].astype(np.float32) / 255
    luma = rgb @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    change = box(np.abs(np.diff(luma, axis=0)), 2)
    reference = alphas[0]
    # Second differences need three frames: t−1, t, t+1, with t's soft edge and the picture moving into t.
    soft_mid = (reference[1:-1] > 0.02) & (reference[1:-1] < 0.98)
    moving_mid = (change[:-1] > 2 / 255) & soft_mid
    reference_gradient = np.diff(reference, axis=0)
    soft = ((reference[1:] > 0.02) & (reference[1:] < 0.98)) | ((reference[:-1] > 0.02) & (reference[:-1] < 0.98))
    still = (change < 2 / 255) & soft
    moving = (change > 8 / 255) & (np.abs(reference_gradient) > 0.1)
    out = {}
    for strength, alpha in alphas.items():
        gradient = np.diff(alpha, axis=0)
        out[strength] = {
            "flicker_levels": float(np.abs(gradient)[still].mean() * 255) if still.any() else None,
            "lag_levels": float(np.abs(alpha[1:] - reference[1:])[moving].mean() * 255) if moving.any() else None,
            "dtssd_vs_unsmoothed": float(np.sqrt(((gradient - reference_gradient) ** 2).mean()) * 255),
            "jitter_moving_levels": (float(np.abs(alpha[2:] - 2 * alpha[1:-1] + alpha[:-2])[moving_mid].mean() * 255)
                                     if moving_mid.any() else None),
            "still_fraction": float(still.mean()), "moving_fraction": float(moving.mean()),
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clip", action="append", type=Path)
    parser.add_argument("--frames", type=int, default=150)
    parser.add_argument("--size", default="640x360")
    parser.add_argument("--strengths", default="0,25,50,75,90")
    parser.add_argument("--json", type=Path, default=ROOT / "build" / "bench" / "flicker.json")
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.split("x"))
    strengths = sorted({0, *(int(v) for v in args.strengths.split(","))})
    clips = [c for c in (args.clip or DEFAULT_CLIPS) if c.exists()]
    if not clips:
        print("no clip found (give --clip FILE)", file=sys.stderr)
        return 2
    results = {}
    with tempfile.TemporaryDirectory(dir=ROOT / "build") as scratch:
        for clip in clips:
            raw = Path(scratch) / "frames.bgra"
            frames = decode(clip, args.frames, width, height, raw)
            alphas = {s: matte(raw, len(frames), width, height, s, Path(scratch) / f"alpha-{s}.gray") for s in strengths}
            results[clip.name] = {str(key): row for key, row in metrics(frames, alphas).items()}
            print(f"{clip.name}: {len(frames)} frames at {width}x{height}")
            print(f"  {'strength':>9} {'flicker (levels)':>17} {'lag (levels)':>13} {'dtSSD vs 0':>11} {'moving jitter':>14}")
            for key, row in results[clip.name].items():
                print(f"  {key + '%':>9} {row['flicker_levels']:>17.3f} {row['lag_levels']:>13.3f} "
                      f"{row['dtssd_vs_unsmoothed']:>11.3f} {row['jitter_moving_levels']:>14.3f}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"size": args.size, "frames": args.frames, "clips": results}, indent=2))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
