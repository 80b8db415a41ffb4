"""The installed element's alpha against an independent reference: the same ONNX model run through
onnxruntime's Python API on the same decoded frames, with pre- and post-processing written here
(OpenCV area resize down, bilinear up) rather than shared with the element."""
import json
import os
import subprocess
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort
import pytest

CLIP = "/usr/share/doc/opencv-doc/examples/data/Megamind.avi"
WIDTH, HEIGHT, FRAMES = 720, 528, 25


def model_dir():
    base = os.environ.get("MATANYONE_TEST_MODELS") or os.path.expanduser("~/.local/share/gst-matanyone/models")
    return Path(base) / "segmenter"


@pytest.fixture(scope="module")
def decoded_and_matted(tmp_path_factory):
    if not Path(CLIP).exists():
        pytest.fail(f"{CLIP} is missing: run scripts/setup.sh (it installs opencv-doc)")
    out = tmp_path_factory.mktemp("segmenter-parity")
    frames, alpha = out / "frames.bgra", out / "alpha.gray"
    # One decode, teed: the element and the reference see the very same bytes.
    pipeline = (
        f"filesrc location={CLIP} ! decodebin ! videoconvert ! video/x-raw,format=BGRA "
        f"! identity eos-after={FRAMES + 1} ! tee name=t "
        f"t. ! queue ! filesink location={frames} "
        # Per-frame parity: the temporal smoothing (on by default) is off here.
        f"t. ! queue ! matanyone engine=segmenter temporal-smoothing=0 model-dir={model_dir().parent} "
        f"! video/x-raw,format=GRAY8 ! filesink location={alpha}"
    )
    subprocess.run(["gst-launch-1.0", "-q"] + pipeline.split(), check=True, timeout=300)
    bgra = np.fromfile(frames, dtype=np.uint8).reshape(-1, HEIGHT, WIDTH, 4)
    gray = np.fromfile(alpha, dtype=np.uint8).reshape(-1, HEIGHT, WIDTH)
    assert len(bgra) == len(gray) >= 20
    return bgra, gray


def reference_alpha(session, frame_bgra):
    manifest = json.loads((model_dir() / "manifest.json").read_text())
    _, size_h, size_w, _ = manifest["models"]["segmenter"]["inputs"][0]["shape"]
    rgb = cv2.cvtColor(frame_bgra, cv2.COLOR_BGRA2RGB).astype(np.float32) / 255.0
    small = cv2.resize(rgb, (size_w, size_h), interpolation=cv2.INTER_AREA)
    probability = session.run(None, {"image": small[None]})[0].reshape(size_h, size_w)
    return np.clip(cv2.resize(probability, (WIDTH, HEIGHT), interpolation=cv2.INTER_LINEAR), 0, 1)


def test_element_alpha_matches_independent_reference(decoded_and_matted):
    bgra, gray = decoded_and_matted
    session = ort.InferenceSession(str(model_dir() / "selfie_segmentation.onnx"), providers=["CPUExecutionProvider"])
    ious, mean_errors = [], []
    for frame, element_alpha in zip(bgra, gray):
        reference = reference_alpha(session, frame)
        ours = element_alpha.astype(np.float32) / 255.0
        a, b = ours >= 0.5, reference >= 0.5
        union = np.logical_or(a, b).sum()
        ious.append(np.logical_and(a, b).sum() / union if union else 1.0)
        mean_errors.append(float(np.abs(ours - reference).mean()))
    print(f"{len(ious)} frames: IoU min {min(ious):.4f}, mean |Δalpha| max {max(mean_errors):.4f}")
    assert min(ious) >= 0.98
    assert max(mean_errors) <= 0.02
    # Not a degenerate agreement: the frames do contain a person.
    assert (gray >= 128).mean() > 0.05
