"""Numerical and visual checks of a converted selfie segmentation set.

Usage (from the repository root, in the project's virtual environment)::

    python -m tools.selfie.validate --model DIR [--wheel PATH] [--png-dir /tmp]

Reports:

* the custom op on its own: the converted model's ConvTranspose (input and output taken
  out of the ONNX graph) against :func:`tflite_model.transpose_conv_bias_numpy`;
* end to end on real frames, noise and grey (:func:`checks.compare`): ONNX against
  TensorFlow's interpreter running the *original* graph with the custom op swapped for
  the stock TRANSPOSE_CONV -- output, the custom op's input and output (needs the wheel:
  ``--wheel`` or the converter's cache);
* IoU of the 0.5-thresholded mask against ``test-sample2.png`` on the first frame of
  ``test-sample2.mp4`` (a handstand: expect only ~0.6), and the mean probability on a blank
  grey image;
* an overlay PNG of a Megamind.avi frame (``opencv-doc``), and of test-sample2, for a look.

Frames are decoded with ``gst-launch-1.0`` (decodebin; H.264 and MPEG-4 need
``gstreamer1.0-libav``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]
MEDIA = REPO_ROOT.parent / "shared" / "media"
SAMPLE_VIDEO = MEDIA / "test-sample2.mp4"
SAMPLE_MASK = MEDIA / "test-sample2.png"
MEGAMIND = Path("/usr/share/doc/opencv-doc/examples/data/Megamind.avi")

MODEL_SIZE = 256


# --------------------------------------------------------------------------- model


class Segmenter:
    """The converted model in ONNX Runtime, fed whole RGB frames."""

    def __init__(self, model_dir: Path):
        os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
        import onnxruntime as ort

        manifest = json.loads((model_dir / "manifest.json").read_text())
        entry = manifest["models"]["segmenter"]
        self.input_name = entry["inputs"][0]["name"]
        self.output_name = entry["outputs"][0]["name"]
        self.path = model_dir / entry["file"]
        options = ort.SessionOptions()
        options.intra_op_num_threads = 2
        self.session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])

    def run(self, x: np.ndarray) -> np.ndarray:
        """Raw model call: x float32 [1, 256, 256, 3] in [0, 1] -> [1, 256, 256, 1]."""
        (y,) = self.session.run([self.output_name], {self.input_name: x})
        return y

    def probability(self, rgb: np.ndarray) -> np.ndarray:
        """Person probability [H, W] for an RGB uint8 frame [H, W, 3].

        The frame is squashed to 256x256 (as MediaPipe's graph does, no letterbox), and the
        256x256 probability map is resized back bilinearly.
        """
        from PIL import Image

        h, w = rgb.shape[:2]
        prob = self.run(to_model_input(rgb))[0, :, :, 0]
        return np.asarray(Image.fromarray(prob, mode="F").resize((w, h), Image.BILINEAR))


def to_model_input(rgb: np.ndarray) -> np.ndarray:
    """RGB uint8 [H, W, 3] -> the model's input: float32 [1, 256, 256, 3] in [0, 1]."""
    from PIL import Image

    small = Image.fromarray(rgb).resize((MODEL_SIZE, MODEL_SIZE), Image.BILINEAR)
    return (np.asarray(small, dtype=np.float32) / 255.0)[None]


def iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 1.0


def load_mask(path: Path) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(path).convert("L")) > 127


# --------------------------------------------------------------------------- frames


def have_gstreamer() -> bool:
    return shutil.which("gst-launch-1.0") is not None


def decode_frame(video: Path, index: int = 0) -> np.ndarray:
    """Frame ``index`` of ``video`` as RGB uint8 [H, W, 3], decoded by gst-launch-1.0.

    Frame 0 comes from ``pngenc snapshot=true`` (which also tells the size); a later frame
    is read from a raw RGB stream on stdout, which is cut once the frame has arrived.
    The frame is the decoder's full output: H.264 with a coded height of 1088 gives 1088
    rows (crop to the picture's real size yourself).
    """
    from PIL import Image

    with tempfile.TemporaryDirectory() as tmp:
        png = Path(tmp) / "frame.png"
        subprocess.run(
            ["gst-launch-1.0", "-q", "filesrc", f"location={video}", "!", "decodebin", "!",
             "videoconvert", "!", "video/x-raw,format=RGB", "!", "pngenc", "snapshot=true", "!",
             "filesink", f"location={png}"],
            check=True, stdout=subprocess.DEVNULL, timeout=120)
        first = np.asarray(Image.open(png).convert("RGB"))
    if index == 0:
        return first
    h, w = first.shape[:2]
    # GStreamer's packed RGB rows are padded to a multiple of 4 bytes.
    stride = (w * 3 + 3) & ~3
    frame_bytes = stride * h
    process = subprocess.Popen(
        ["gst-launch-1.0", "-q", "filesrc", f"location={video}", "!", "decodebin", "!",
         "videoconvert", "!", "video/x-raw,format=RGB", "!", "fdsink", "fd=1"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        for _ in range(index):
            if len(process.stdout.read(frame_bytes)) < frame_bytes:
                raise ValueError(f"{video} has fewer than {index + 1} frames")
        data = process.stdout.read(frame_bytes)
        if len(data) < frame_bytes:
            raise ValueError(f"{video} has fewer than {index + 1} frames")
    finally:
        process.kill()
        process.wait()
    return np.frombuffer(data, np.uint8).reshape(h, stride)[:, :w * 3].reshape(h, w, 3).copy()


def sample_frame_and_mask() -> tuple[np.ndarray, np.ndarray]:
    """First test-sample2 frame cropped to its mask's size (1920x1080 of 1920x1088 coded)."""
    mask = load_mask(SAMPLE_MASK)
    frame = decode_frame(SAMPLE_VIDEO, 0)
    h, w = mask.shape
    if frame.shape[0] < h or frame.shape[1] < w:
        raise ValueError(f"frame {frame.shape} smaller than mask {mask.shape}")
    return frame[:h, :w], mask


def overlay(rgb: np.ndarray, prob: np.ndarray) -> np.ndarray:
    """Side by side: the frame with the person tinted green and the rest darkened | the map."""
    alpha = prob[..., None]
    tint = rgb * (0.35 + 0.65 * alpha) + np.array([0, 90, 0]) * alpha
    grey = np.repeat((prob * 255)[..., None], 3, axis=2)
    return np.concatenate([np.clip(tint, 0, 255), grey], axis=1).astype(np.uint8)


# --------------------------------------------------------------------------- report


def main(argv: list[str] | None = None) -> int:
    from tools.selfie import checks, convert, tflite_model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="folder written by tools.selfie.convert")
    parser.add_argument("--wheel", type=Path, help="mediapipe wheel (default: the converter's cache)")
    parser.add_argument("--png-dir", type=Path, default=Path(tempfile.gettempdir()),
                        help="where the overlay PNGs go")
    parser.add_argument("--megamind-frame", type=int, default=100)
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from PIL import Image

    segmenter = Segmenter(args.model)
    frames: dict[str, np.ndarray] = {}
    if have_gstreamer() and SAMPLE_VIDEO.exists():
        frames["test-sample2"], sample_mask = sample_frame_and_mask()
    if have_gstreamer() and MEGAMIND.exists():
        frames["megamind"] = decode_frame(MEGAMIND, args.megamind_frame)

    rng = np.random.default_rng(7)
    inputs = {name: to_model_input(rgb) for name, rgb in frames.items()}
    inputs["random"] = rng.random((1, MODEL_SIZE, MODEL_SIZE, 3), dtype=np.float32)
    inputs["grey"] = np.full((1, MODEL_SIZE, MODEL_SIZE, 3), 0.5, np.float32)

    # 1. The converted model's ConvTranspose against numpy, on the ONNX graph's own tensors
    #    (needs no TensorFlow).
    run_onnx, onnx_spec = checks.onnx_probe(segmenter.path)
    for name, x in inputs.items():
        _, pre, seg = run_onnx(x)
        expected = tflite_model.transpose_conv_bias_numpy(pre, onnx_spec)
        diff, scale = float(np.abs(seg - expected).max()), float(np.abs(expected).max())
        print(f"[{name}] ONNX ConvTranspose vs numpy: max abs diff {diff:.2e} on logits up to "
              f"{scale:.0f} (relative {diff / scale:.1e})")

    # 2. End to end against TensorFlow's interpreter on the original graph.
    wheel = args.wheel or next(iter(sorted(convert.DEFAULT_CACHE.glob("mediapipe-*.whl"))), None)
    if wheel is None:
        print("no wheel (give --wheel or run the converter): TFLite comparison skipped")
    else:
        tflite, _ = convert.read_wheel(wheel)
        probes = ((run_onnx, onnx_spec), checks.tflite_probe(tflite))
        _, rows = checks.compare(None, tflite, list(inputs.values()), probes=probes)
        for name, row in zip(inputs, rows):
            print(f"[{name}] vs TFLite: {row}")

    # 3. Masks.
    print(f"grey image: mean probability {segmenter.run(inputs['grey']).mean():.4f}")
    print(f"random noise: mean probability {segmenter.run(inputs['random']).mean():.4f}")
    args.png_dir.mkdir(parents=True, exist_ok=True)
    for name, rgb in frames.items():
        prob = segmenter.probability(rgb)
        line = f"{name}: {rgb.shape[1]}x{rgb.shape[0]}, person fraction {np.mean(prob > 0.5):.3f}"
        if name == "test-sample2":
            line += f", IoU vs test-sample2.png {iou(prob > 0.5, sample_mask):.3f}"
        path = args.png_dir / f"selfie_{name}.png"
        view = overlay(rgb, prob)
        scale = min(1.0, 1600 / view.shape[1])
        Image.fromarray(view).resize((int(view.shape[1] * scale), int(view.shape[0] * scale))).save(path)
        print(f"{line} -> {path}")
    if not frames:
        print("no frames (gst-launch-1.0 or the media missing): mask checks skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
