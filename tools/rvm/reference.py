"""Robust Video Matting's alphas by Python ONNX Runtime: the reference the element's RVM engine is
compared with (every frame within 1 LSB), on the same frames and with the same rules.

    python -m tools.rvm.reference --model DIR --frames-bgra FILE --width W --height H
                                  [--count N] [--ratio R] [--threads T] --out FILE.gray

The frames are raw BGRA as GStreamer decodes them; the alphas are written as raw 8-bit planes, one
per frame (``round half up`` of alpha x 255, clamped, as the element quantises). The recurrent states
start from the authors' 1x1x1x1 zeros and carry from frame to frame; ``--ratio 0`` applies the
element's rule (an internal picture of about 480 px on the long side, never above 1).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

AUTOMATIC_LONG_SIDE = 480.0


def automatic_ratio(width: int, height: int) -> float:
    """The element's rule (RVMEngine.automaticRatio)."""
    return min(1.0, AUTOMATIC_LONG_SIDE / max(width, height, 1))


def session(model_dir: Path, threads: int = 0):
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    import onnxruntime as ort

    manifest = json.loads((model_dir / "manifest.json").read_text())
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(model_dir / manifest["models"]["rvm"]["file"]), options,
                                providers=["CPUExecutionProvider"])


def to_source(bgra: np.ndarray) -> np.ndarray:
    """BGRA uint8 [H, W, 4] -> the network's src: float32 [1, 3, H, W] RGB in [0, 1]."""
    return (bgra[:, :, [2, 1, 0]].astype(np.float32) / np.float32(255)).transpose(2, 0, 1)[None].copy()


def quantise(alpha: np.ndarray) -> np.ndarray:
    """float32 alpha -> uint8 as the element rounds it (x * 255 + 0.5, clamped, truncated)."""
    values = alpha.astype(np.float32) * np.float32(255) + np.float32(0.5)
    return np.clip(np.nan_to_num(values, nan=0.0), 0, 255).astype(np.uint8)


class Matting:
    """RVM over a sequence of frames, its states carried."""

    def __init__(self, model_dir: Path, ratio: float = 0.0, threads: int = 0):
        self.session = session(model_dir, threads)
        self.ratio = ratio
        self.reset()

    def reset(self) -> None:
        self.states = [np.zeros([1, 1, 1, 1], np.float32)] * 4

    def alpha(self, bgra: np.ndarray) -> np.ndarray:
        height, width = bgra.shape[:2]
        ratio = self.ratio or automatic_ratio(width, height)
        pha, *self.states = self.session.run(["pha", "r1o", "r2o", "r3o", "r4o"], {
            "src": to_source(bgra),
            "r1i": self.states[0], "r2i": self.states[1], "r3i": self.states[2], "r4i": self.states[3],
            "downsample_ratio": np.array([ratio], np.float32)})
        return pha[0, 0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="the rvm model set")
    parser.add_argument("--frames-bgra", type=Path, required=True)
    parser.add_argument("--width", type=int, required=True)
    parser.add_argument("--height", type=int, required=True)
    parser.add_argument("--count", type=int, default=0, help="frames (0: all)")
    parser.add_argument("--ratio", type=float, default=0.0, help="downsample ratio (0: the element's rule)")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    frames = np.fromfile(args.frames_bgra, dtype=np.uint8).reshape(-1, args.height, args.width, 4)
    if args.count:
        frames = frames[:args.count]
    matting = Matting(args.model, args.ratio, args.threads)
    started = time.monotonic()
    alphas = np.stack([quantise(matting.alpha(frame)) for frame in frames])
    tmp = args.out.with_name(args.out.name + ".partial")
    alphas.tofile(tmp)
    os.replace(tmp, args.out)
    print(f"{len(frames)} frames {args.width}x{args.height} in {time.monotonic() - started:.1f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
