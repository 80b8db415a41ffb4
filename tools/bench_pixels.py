"""What each build of the element's own pixel work costs (PixelISA: baseline x86-64, AVX2, AVX-512).

    .venv/bin/python -m tools.bench_pixels [--sizes 1920x1080,1280x720] [--mattes edge,soft] [--frames 8]
                                           [--reps 30] [--json bench/pixels-2core-avx512-zen4.json]

Decodes the first frames of the dancer clip at each size and its first-frame mask at MatAnyone2's
512×288, then runs the `PixelBench` executable: per frame, the frame's downscale to the model, the
alpha's upscale to the frame, three composites (with estimated edge colours over nothing and over a
colour, and plain) and the motion estimate of async mode, every build this CPU runs timed round by
round in the one process. Two mattes: `edge` (the mask: soft only along the person's edge, as a good
matte is) and `soft` (soft everywhere, as an uncertain model's: every tile's edge colours are
estimated, the worst case). Prints a table; --json writes the figures with the machine's ISA.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import cv2

from tools.bench import cpu_description, machine
from tools.flicker import decode

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("MATANYONE_SHARED", ROOT.parent / "shared"))
MODEL_SIZE = (512, 288)
STEPS = ["downscale", "upscale", "composite-none-estimated", "composite-color-estimated", "composite-none", "motion"]


def pixel_bench() -> Path:
    subprocess.run(["swift", "build", "-c", "release", "--product", "PixelBench"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    return ROOT / ".build" / "release" / "PixelBench"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clip", type=Path, default=SHARED / "media" / "test-sample2.mp4")
    parser.add_argument("--mask", type=Path, default=SHARED / "media" / "test-sample2.png")
    parser.add_argument("--sizes", default="1920x1080,1280x720")
    parser.add_argument("--mattes", default="edge,soft")
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    for path in (args.clip, args.mask):
        if not path.exists():
            sys.exit(f"bench_pixels: {path} not found")
    binary = pixel_bench()
    mask = cv2.imread(str(args.mask), cv2.IMREAD_GRAYSCALE)
    if mask is None:
        sys.exit(f"bench_pixels: cannot read {args.mask}")
    results = []
    with tempfile.TemporaryDirectory() as work:
        mask_path = Path(work) / "mask.gray"
        cv2.resize(mask, MODEL_SIZE, interpolation=cv2.INTER_AREA).tofile(mask_path)
        for size in args.sizes.split(","):
            width, height = (int(v) for v in size.lower().split("x"))
            raw = Path(work) / f"frames-{width}x{height}.bgra"
            decode(args.clip, args.frames, width, height, raw)
            for matte in args.mattes.split(","):
                out = subprocess.run([str(binary), "--width", str(width), "--height", str(height), "--frames", str(raw),
                                      "--mask", str(mask_path), "--mask-width", str(MODEL_SIZE[0]),
                                      "--mask-height", str(MODEL_SIZE[1]), "--reps", str(args.reps), "--matte", matte],
                                     check=True, capture_output=True, text=True)
                results.append(json.loads(out.stdout))
    report = {"machine": machine(), "cpu": cpu_description(), "clip": args.clip.name, "results": results}
    for result in results:
        builds = result["supported"]
        print(f"{result['width']}x{result['height']}, {result['matte']} matte, on {report['machine']['cpu']} ({result['cores']} cores), "
              f"median ms per frame, same bytes in every build: {result['same_bytes']}")
        print(f"  {'step':28}" + "".join(f"{b:>12}" for b in builds) + "   speedup of the widest")
        for step in STEPS:
            row = "".join(f"{result['builds'][b][step]['median_ms']:12.2f}" for b in builds)
            widest = result["builds"][builds[-1]].get(step + "_speedup")
            print(f"  {step:28}{row}   {'' if widest is None else f'{widest:.2f}x'}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if not all(r["same_bytes"] for r in results):
        sys.exit("bench_pixels: the builds gave different bytes")


if __name__ == "__main__":
    main()
