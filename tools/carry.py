"""How well the element's motion carries a stale alpha to a later frame (mode=async, alignment=motion).

    .venv/bin/python -m tools.carry [--clip FILE [--alphas SOURCE] ...] [--frames 120] [--ks 6,12]
                                    [--json bench/carry-2core.json]

For each clip, the truth for frame t is the engine's own alpha on frame t (the segmenter's, made by the
installed element in sync mode, GRAY8). The alpha of frame t−k is compared with it as it is (stale:
what `alignment=none` shows) and carried by the motion of frames t−k…t (MotionCarry, the element's
own code, through the `CarryBench` executable). Reported per clip and k: mean |Δα| over the frame and
in the edge band (pixels within 12 px of the truth's 0.5 contour). Motion cost per 1080p frame is
timed on the dancer clip at 1920×1080.

`--picture FILE` also draws one moving frame of the first clip (the frame with the most motion
under the alpha at the largest k): the picture with the stale alpha's outline in red, the carried
alpha's in green and the frame's own alpha in white, stale on the left, carried on the right. It is
drawn from the clip, so it stays on your machine (the project commits no footage).

`--alphas` after a `--clip` takes that clip's alphas from elsewhere (a video whose luma is the alpha,
or a folder of PNGs, one per frame in name order), to check the carry on mattes from any model.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import cv2
import numpy as np

from tools.bench import cpu_description
from tools.flicker import decode, matte

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("MATANYONE_SHARED", ROOT.parent / "shared"))
DATA = Path("/usr/share/doc/opencv-doc/examples/data")
DEFAULT_CLIPS = [SHARED / "media" / "test-sample2.mp4", DATA / "Megamind.avi", DATA / "vtest.avi"]
BAND_PX = 12


def clip_size(clip: Path, longest: int = 960) -> tuple[int, int]:
    """The clip's size scaled to fit `longest` (width a multiple of 4: GRAY8 rows are then unpadded)."""
    # GStreamer's idea of the size: the frames are decoded by GStreamer.
    found = subprocess.run(["gst-discoverer-1.0", str(clip)], capture_output=True, text=True).stdout
    sizes = {key: int(value) for key, value in re.findall(r"^\s*(Width|Height): (\d+)", found, re.MULTILINE)}
    width, height = sizes.get("Width", 0), sizes.get("Height", 0)
    if width <= 0 or height <= 0:
        sys.exit(f"carry: cannot read the size of {clip}")
    scale = min(1.0, longest / max(width, height))
    return int(width * scale) // 4 * 4, int(height * scale) // 2 * 2


def outside_alphas(source: Path, count: int, width: int, height: int) -> np.ndarray:
    """Alphas made elsewhere: a folder of PNGs (name order) or a video (its luma), resized to the clip."""
    planes = []
    if source.is_dir():
        for path in sorted(source.glob("*.png"))[:count]:
            image = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
            planes.append(cv2.resize(image, (width, height), interpolation=cv2.INTER_AREA))
    else:
        capture = cv2.VideoCapture(str(source))
        while len(planes) < count:
            ok, frame = capture.read()
            if not ok:
                break
            planes.append(cv2.resize(cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY), (width, height), interpolation=cv2.INTER_AREA))
        capture.release()
    if not planes:
        sys.exit(f"carry: no alphas in {source}")
    return np.stack(planes).astype(np.float32) / 255


def edge_bands(alphas: np.ndarray) -> np.ndarray:
    """Per frame: 1 where a pixel lies within BAND_PX of the alpha's 0.5 contour."""
    bands = np.zeros(alphas.shape, dtype=np.uint8)
    for index, alpha in enumerate(alphas):
        inside = (alpha >= 0.5).astype(np.uint8)
        if inside.all() or not inside.any():
            continue
        to_outside = cv2.distanceTransform(inside, cv2.DIST_L2, 5)
        to_inside = cv2.distanceTransform(1 - inside, cv2.DIST_L2, 5)
        bands[index] = ((inside == 1) & (to_outside <= BAND_PX)) | ((inside == 0) & (to_inside <= BAND_PX))
    return bands


def carry_bench() -> Path:
    binary = ROOT / ".build" / "release" / "CarryBench"
    subprocess.run(["swift", "build", "-c", "release", "--product", "CarryBench"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    return binary


def measure(binary: Path, clip: Path, alphas_source: Path | None, frames: int, ks: list[int], work: Path,
            tuning: list[str]) -> dict:
    width, height = clip_size(clip)
    raw = work / "frames.bgra"
    pixels = decode(clip, frames, width, height, raw)
    count = len(pixels)
    if alphas_source is None:
        alphas = matte(raw, count, width, height, 0, work / "alphas.gray")
    else:
        alphas = outside_alphas(alphas_source, count, width, height)
    count = min(count, len(alphas))
    (np.clip(alphas[:count] * 255 + 0.5, 0, 255)).astype(np.uint8).tofile(work / "alphas.raw")
    edge_bands(alphas[:count]).tofile(work / "bands.raw")
    def bench(*options: str) -> dict:
        out = subprocess.run([str(binary), "--width", str(width), "--height", str(height), "--frames", str(raw),
                              "--alphas", str(work / "alphas.raw"), "--bands", str(work / "bands.raw"),
                              "--ks", ",".join(map(str, ks)), *tuning, *options], check=True, capture_output=True, text=True)
        return json.loads(out.stdout)

    result = bench()
    # The same carry trusting every step: what the trust rule is worth.
    result["results_without_trust"] = bench("--trust", "none")["results"]
    result["clip"] = clip.name
    result["alphas"] = "segmenter (sync, the element)" if alphas_source is None else str(alphas_source)
    return result


def picture(binary: Path, clip: Path, frames: int, ks: list[int], work: Path, tuning: list[str], out: Path) -> None:
    """Stale vs carried outlines on the frame of `clip` whose alpha moved most at the largest k."""
    width, height = clip_size(clip)
    raw = work / "frames.bgra"
    pixels = decode(clip, frames, width, height, raw)
    alphas = matte(raw, len(pixels), width, height, 0, work / "alphas.gray")
    k = max(ks)
    moved = [np.abs(alphas[t] - alphas[t - k]).mean() for t in range(k, len(alphas))]
    frame = k + int(np.argmax(moved))
    (np.clip(alphas * 255 + 0.5, 0, 255)).astype(np.uint8).tofile(work / "alphas.raw")
    edge_bands(alphas).tofile(work / "bands.raw")
    dump = work / "dump.raw"
    subprocess.run([str(binary), "--width", str(width), "--height", str(height), "--frames", str(raw),
                    "--alphas", str(work / "alphas.raw"), "--bands", str(work / "bands.raw"), "--ks", ",".join(map(str, ks)),
                    "--dump", f"{frame}:{dump}", *tuning], check=True, capture_output=True)
    stale, carried, own = np.fromfile(dump, dtype=np.uint8).reshape(3, height, width)
    image = np.ascontiguousarray(pixels[frame][:, :, :3])

    def outline(plane: np.ndarray) -> np.ndarray:
        inside = (plane >= 128).astype(np.uint8)
        return cv2.morphologyEx(inside, cv2.MORPH_GRADIENT, np.ones((3, 3), np.uint8)) > 0

    panels = []
    for alpha, colour in ((stale, (0, 0, 255)), (carried, (0, 255, 0))):
        panel = (image * 0.6).astype(np.uint8)
        panel[outline(own)] = (255, 255, 255)
        panel[outline(alpha)] = colour
        panels.append(panel)
    out.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(out), np.hstack(panels))
    print(f"picture: {out} ({clip.name} frame {frame}, alpha {k} frames stale; left stale in red, right carried in green, "
          "white the frame's own)")


def timing_1080p(binary: Path, work: Path, tuning: list[str]) -> dict:
    raw = work / "hd.bgra"
    decode(DEFAULT_CLIPS[0], 30, 1920, 1080, raw)
    out = subprocess.run([str(binary), "--width", "1920", "--height", "1080", "--frames", str(raw), "--timing", *tuning],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clip", action="append", type=Path, help="a clip (repeatable; default: the three demo clips)")
    parser.add_argument("--alphas", action="append", type=Path, default=[],
                        help="alphas for the --clip before it (video or PNG folder); default: the segmenter's")
    parser.add_argument("--frames", type=int, default=120)
    parser.add_argument("--ks", default="6,12", help="how many frames stale (comma-separated)")
    parser.add_argument("--json", type=Path, default=ROOT / "build" / "bench" / "carry.json")
    parser.add_argument("--picture", type=Path, help="also draw stale vs carried on one moving frame (PNG)")
    parser.add_argument("--tuning", default="", help="extra CarryBench options (trying other motion settings)")
    args = parser.parse_args()
    tuning = args.tuning.split()
    clips = args.clip or DEFAULT_CLIPS
    if len(args.alphas) > len(clips):
        parser.error("--alphas given without a --clip before it")
    sources = args.alphas + [None] * (len(clips) - len(args.alphas))
    ks = [int(k) for k in args.ks.split(",") if k]
    missing = [str(c) for c in clips if not c.exists()]
    if missing:
        sys.exit(f"carry: missing clips: {', '.join(missing)} (scripts/setup.sh installs opencv-doc)")
    binary = carry_bench()
    results = []
    with tempfile.TemporaryDirectory(dir=ROOT / "build") as scratch:
        work = Path(scratch)
        timing = timing_1080p(binary, work, tuning)
        for clip, source in zip(clips, sources):
            result = measure(binary, clip, source, args.frames, ks, work, tuning)
            results.append(result)
            for row in result["results"]:
                print(f"{clip.name:18} k={row['k']:>2}  frame |Δα| stale {row['stale_frame']:.4f} carried {row['carried_frame']:.4f}   "
                      f"edge band stale {row['stale_band']:.4f} carried {row['carried_band']:.4f} "
                      f"({-100 * row['band_reduction']:+.0f} %)   carried {row['mean_carry_px']:.1f} px")
            for row in result["results_without_trust"]:
                print(f"{'  without trust':18} k={row['k']:>2}  frame |Δα| carried {row['carried_frame']:.4f}   "
                      f"edge band carried {row['carried_band']:.4f} ({-100 * row['band_reduction']:+.0f} %)")
        if args.picture:
            picture(binary, clips[0], args.frames, ks, work, tuning, args.picture)
    print(f"motion per 1080p frame: median {timing['motion_ms_median']:.2f} ms, p95 {timing['motion_ms_p95']:.2f} ms "
          f"(at {timing['flow_width']}x{timing['flow_height']}, {timing['cores']} cores)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"cpu": cpu_description(), "frames": args.frames, "ks": ks, "band_px": BAND_PX,
                                     "timing_1080p": timing, "clips": results}, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
