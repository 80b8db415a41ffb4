"""Tests of tools/selfie: the MediaPipe selfie segmentation -> ONNX converter.

The converted set comes from ``$MATANYONE_TEST_MODELS/selfie`` when that holds an up-to-date
set, otherwise from one conversion per session into a temporary folder (the wheel is taken
from the converter's cache, ``.cache/selfie``, or downloaded from PyPI into it).
Checks that need TensorFlow, gst-launch-1.0 or the shared media skip without them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from tools.selfie import checks, convert, tflite_model, validate  # noqa: E402

ENV = {**os.environ, "ORT_DISABLE_TELEMETRY": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}


def _convert(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.selfie.convert", "--out", str(out), *extra],
                          cwd=REPO, env=ENV, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="session")
def selfie_dir(tmp_path_factory) -> Path:
    shared = os.environ.get("MATANYONE_TEST_MODELS")
    if shared and convert.is_up_to_date(Path(shared) / "selfie"):
        return Path(shared) / "selfie"
    pytest.importorskip("tensorflow")
    pytest.importorskip("tf2onnx")
    out = tmp_path_factory.mktemp("selfie")
    result = _convert(out)
    assert result.returncode == 0, f"conversion failed:\n{result.stdout}\n{result.stderr}"
    return out


@pytest.fixture(scope="session")
def manifest(selfie_dir) -> dict:
    return json.loads((selfie_dir / "manifest.json").read_text())


@pytest.fixture(scope="session")
def segmenter(selfie_dir) -> validate.Segmenter:
    return validate.Segmenter(selfie_dir)


@pytest.fixture(scope="session")
def tflite_bytes() -> bytes:
    pytest.importorskip("tensorflow")
    wheels = sorted(convert.DEFAULT_CACHE.glob(f"mediapipe-{convert.MEDIAPIPE_VERSION}-*.whl"))
    if not wheels:
        pytest.skip("no mediapipe wheel in the converter's cache")
    return convert.read_wheel(wheels[-1])[0]


# --------------------------------------------------------------------------- the folder


def test_manifest_describes_the_set(selfie_dir, manifest):
    assert manifest["format"] == 1
    assert manifest["engine"] == "segmenter"
    assert manifest["license"] == "Apache-2.0"
    assert manifest["source"] == "mediapipe==0.10.14 selfie_segmentation.tflite"
    assert (manifest["input_layout"], manifest["input_range"], manifest["color"]) == ("NHWC", [0, 1], "RGB")
    entry = manifest["models"]["segmenter"]
    assert entry["file"] == "selfie_segmentation.onnx"
    assert entry["inputs"] == [{"name": "image", "shape": [1, 256, 256, 3], "dtype": "float32"}]
    assert entry["outputs"] == [{"name": "mask", "shape": [1, 256, 256, 1], "dtype": "float32"}]
    data = (selfie_dir / entry["file"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == entry["sha256"]


def test_licence_file(selfie_dir, manifest):
    text = (selfie_dir / manifest["license_file"]).read_text()
    assert "Google LLC" in text and "Apache License" in text and "Version 2.0" in text
    assert "Convolution2DTransposeBias" in text  # the modification notice


def test_licence_fallback_without_dist_info_text():
    text = convert.licence_text(None)
    assert "Google LLC" in text and "https://www.apache.org/licenses/LICENSE-2.0" in text


def test_second_run_is_a_no_op(selfie_dir):
    files = ["selfie_segmentation.onnx", "manifest.json", "LICENSE.txt"]
    before = {f: (selfie_dir / f).stat().st_mtime_ns for f in files}
    started = time.monotonic()
    result = _convert(selfie_dir)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert "up to date" in result.stdout
    assert {f: (selfie_dir / f).stat().st_mtime_ns for f in files} == before
    assert elapsed < 10  # no TensorFlow import: ~0.1 s


def test_tampered_model_is_not_up_to_date(selfie_dir, tmp_path):
    copy = tmp_path / "selfie"
    shutil.copytree(selfie_dir, copy)
    assert convert.is_up_to_date(copy)
    with open(copy / "selfie_segmentation.onnx", "ab") as handle:
        handle.write(b"\0")
    assert not convert.is_up_to_date(copy)
    (copy / "manifest.json").unlink()
    assert not convert.is_up_to_date(copy)


# --------------------------------------------------------------------------- the ONNX file


def test_file_format_loads_everywhere(selfie_dir):
    model = onnx.load(str(selfie_dir / "selfie_segmentation.onnx"))
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version <= 10
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    assert all(n.domain in ("", "ai.onnx") for n in model.graph.node)
    ops = {n.op_type for n in model.graph.node}
    assert "ConvTranspose" in ops and not any(op.startswith("TFL") for op in ops)
    # Layout transposes cancelled: only the input's NHWC -> NCHW remains.
    assert sum(n.op_type == "Transpose" for n in model.graph.node) == 1


def test_onnx_runtime_io(segmenter):
    session = segmenter.session
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    assert (inp.name, inp.shape, inp.type) == ("image", [1, 256, 256, 3], "tensor(float)")
    assert (out.name, out.shape, out.type) == ("mask", [1, 256, 256, 1], "tensor(float)")
    y = segmenter.run(np.random.default_rng(0).random((1, 256, 256, 3), dtype=np.float32))
    assert y.shape == (1, 256, 256, 1) and y.dtype == np.float32
    assert np.all((y >= 0) & (y <= 1))


# --------------------------------------------------------------------------- the custom op


def test_conv_transpose_matches_numpy(selfie_dir):
    run, spec = checks.onnx_probe(selfie_dir / "selfie_segmentation.onnx")
    assert spec.weight_ohwi.shape == (1, 2, 2, 16)
    assert (spec.stride_h, spec.stride_w, spec.pads()) == (2, 2, (0, 0, 0, 0))
    for x in checks.synthetic_inputs(2, seed=5):
        _, pre, seg = run(x)
        assert pre.shape == (1, 128, 128, 16) and seg.shape == (1, 256, 256, 1)
        expected = tflite_model.transpose_conv_bias_numpy(pre, spec)
        assert np.abs(seg - expected).max() <= 1e-5 * np.abs(expected).max()


def _mediapipe_loop(x, weight_ohwi, bias, stride, out_hw, crop):
    """MediaPipe's reference kernel, written as its plain loops (slow; tiny tensors only)."""
    n, h, w, c_in = x.shape
    c_out, k_h, k_w, _ = weight_ohwi.shape
    out = np.tile(bias.astype(np.float64), (n, *out_hw, 1))
    for b in range(n):
        for i in range(h):
            for j in range(w):
                for kh in range(k_h):
                    for kw in range(k_w):
                        y, xx = i * stride - crop[0] // 2 + kh, j * stride - crop[1] // 2 + kw
                        if 0 <= y < out_hw[0] and 0 <= xx < out_hw[1]:
                            out[b, y, xx] += weight_ohwi[:, kh, kw, :] @ x[b, i, j]
    return out


@pytest.mark.parametrize("size_in,kernel,stride", [(6, 2, 2), (5, 3, 2), (5, 4, 2), (4, 3, 3)])
def test_numpy_op_and_onnx_conv_transpose_agree_with_mediapipe_kernel(size_in, kernel, stride):
    """The op translation in general (crops included), not only the selfie model's 2x2/2."""
    rng = np.random.default_rng(size_in * 100 + kernel * 10 + stride)
    c_in, c_out = 3, 2
    x = rng.standard_normal((1, size_in, size_in, c_in)).astype(np.float32)
    weight = rng.standard_normal((c_out, kernel, kernel, c_in)).astype(np.float32)
    bias = rng.standard_normal(c_out).astype(np.float32)
    crop = max(0, kernel - (size_in - 1) % stride - 1)  # MediaPipe's SAME
    size_out = stride * (size_in - 1) + kernel - crop
    spec = tflite_model.TransposeConvBias(
        op_index=0, input_name="x", output_name="y", input_shape=x.shape,
        output_shape=(1, size_out, size_out, c_out), weight_ohwi=weight, bias=bias,
        padding="SAME", stride_h=stride, stride_w=stride)
    expected = _mediapipe_loop(x, weight, bias, stride, (size_out, size_out), (crop, crop))
    np.testing.assert_allclose(tflite_model.transpose_conv_bias_numpy(x, spec), expected, rtol=1e-6, atol=1e-6)

    # The node the converter emits, on its own.
    helper = onnx.helper
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], kernel_shape=[kernel, kernel],
                            strides=[stride, stride], pads=list(spec.pads()), dilations=[1, 1], group=1)
    graph = helper.make_graph(
        [node], "t", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, c_in, size_in, size_in])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(weight.transpose(3, 0, 1, 2).copy(), "w"),
         onnx.numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": x.transpose(0, 3, 1, 2).copy()})
    np.testing.assert_allclose(y.transpose(0, 2, 3, 1), expected, rtol=1e-5, atol=1e-5)


def test_custom_op_options_parse():
    assert tflite_model.parse_transpose_conv_params(bytes([1, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0])) == ("SAME", 2, 2)
    assert tflite_model.parse_transpose_conv_params(bytes([2, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0])) == ("VALID", 1, 3)
    with pytest.raises(ValueError):
        tflite_model.parse_transpose_conv_params(bytes([0] * 12))


def test_flatbuffer_custom_op(tflite_bytes):
    (spec,) = tflite_model.find_transpose_conv_bias(tflite_model.load_model(tflite_bytes))
    assert (spec.input_shape, spec.output_shape) == ((1, 128, 128, 16), (1, 256, 256, 1))
    assert spec.weight_ohwi.shape == (1, 2, 2, 16) and spec.bias.shape == (1,)
    assert (spec.padding, spec.stride_h, spec.stride_w) == ("SAME", 2, 2)


def test_matches_tflite_interpreter(selfie_dir, tflite_bytes):
    inputs = checks.synthetic_inputs(2, seed=9)
    if validate.have_gstreamer() and validate.SAMPLE_VIDEO.exists():
        inputs.append(validate.to_model_input(validate.sample_frame_and_mask()[0]))
    result, _ = checks.compare(selfie_dir / "selfie_segmentation.onnx", tflite_bytes, inputs)
    assert result.weights_equal
    assert result.output_abs < 1e-3
    assert max(result.logits_rel, result.features_rel, result.numpy_rel) < 1e-4, str(result)


# --------------------------------------------------------------------------- behaviour


def test_blank_grey_image_has_no_person(segmenter):
    for value in (0.5, 0.0, 1.0):
        y = segmenter.run(np.full((1, 256, 256, 3), value, np.float32))
        assert y.mean() < 0.05, value


@pytest.mark.skipif(not (validate.have_gstreamer() and validate.SAMPLE_VIDEO.exists()
                         and validate.SAMPLE_MASK.exists()), reason="needs gst-launch-1.0 and shared media")
def test_person_on_real_frame(segmenter):
    frame, mask = validate.sample_frame_and_mask()
    prob = segmenter.probability(frame)
    score = validate.iou(prob > 0.5, mask)
    assert score >= 0.5, score  # a handstand: ~0.74 (0.90 at threshold 0.3)
    assert prob[~mask].mean() < 0.05  # the white studio stays background


@pytest.mark.skipif(not (validate.have_gstreamer() and validate.MEGAMIND.exists()),
                    reason="needs gst-launch-1.0 and opencv-doc's Megamind.avi")
def test_talking_head_frame(segmenter):
    frame = validate.decode_frame(validate.MEGAMIND, 100)
    assert frame.shape == (528, 720, 3)
    prob = segmenter.probability(frame)
    h, w = prob.shape
    # The speaker sits right of centre: face and chest are person, the top-left corner is not.
    assert prob[h // 3: 2 * h // 3, int(w * 0.6): int(w * 0.75)].mean() > 0.9
    assert prob[: h // 5, : w // 5].mean() < 0.1
