"""Numerical comparison of the converted model with the original TFLite graph.

Two probes, both returning NHWC float32 arrays:

* :func:`onnx_probe` -- the converted ONNX model in ONNX Runtime, with the input and output
  of its ConvTranspose (the custom op's replacement) exposed as extra graph outputs;
* :func:`tflite_probe` -- TensorFlow's interpreter on the original graph, the custom op
  swapped for the stock ``TRANSPOSE_CONV`` (same OHWI filter, bias as 4th input), with all
  intermediate tensors kept so the custom op's input and output can be read.

:func:`compare` runs both on some inputs.  The sigmoid output saturates to 0 or 1 on most
pixels (the logits reach several hundred), so the comparison also looks at the logits
(the custom op's output) relative to their magnitude; that is what catches a layout bug.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, replace

import numpy as np

from tools.selfie import tflite_model
from tools.selfie.tflite_model import TransposeConvBias


def onnx_probe(model):
    """``(run, spec)`` for a converted model (path, bytes or ``onnx.ModelProto``).

    ``run(x)`` -> ``(output, ConvTranspose input, ConvTranspose output)`` for an input
    ``x`` [1, 256, 256, 3]; ``spec`` describes that ConvTranspose with the ONNX file's own
    weights (as OHWI), so :func:`tflite_model.transpose_conv_bias_numpy` can redo it.
    """
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    if isinstance(model, (bytes, bytearray)):
        model = onnx.load_from_string(bytes(model))
    elif not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model))
    else:
        model = onnx.ModelProto.FromString(model.SerializeToString())
    (node,) = [n for n in model.graph.node if n.op_type == "ConvTranspose"]
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    weight_iohw, bias = inits[node.input[1]], inits[node.input[2]]
    input_name, output_name = model.graph.input[0].name, model.graph.output[0].name
    for name in (node.input[0], node.output[0]):
        model.graph.output.add().name = name
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])

    def run(x: np.ndarray):
        y, pre, seg = session.run([output_name, node.input[0], node.output[0]], {input_name: x})
        return y, pre.transpose(0, 2, 3, 1), seg.transpose(0, 2, 3, 1)

    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    _, pre, seg = run(np.zeros(shape, np.float32))
    spec = TransposeConvBias(
        op_index=-1, input_name=node.input[0], output_name=node.output[0],
        input_shape=pre.shape, output_shape=seg.shape,
        weight_ohwi=weight_iohw.transpose(1, 2, 3, 0), bias=bias, padding="SAME",
        stride_h=int(attrs["strides"][0]), stride_w=int(attrs["strides"][1]))
    pads = tuple(attrs.get("pads", [0, 0, 0, 0]))
    if spec.pads() != pads:  # then the spec would not describe the node; say so
        raise AssertionError(f"ConvTranspose pads {pads} are not MediaPipe's crop {spec.pads()}")
    return run, spec


def tflite_probe(tflite: bytes):
    """``(run, spec)`` for the original flatbuffer: ``run(x)`` -> ``(output, custom-op input,
    custom-op output)``; ``spec`` is the custom op as read from the flatbuffer."""
    import tensorflow as tf

    (spec,) = tflite_model.find_transpose_conv_bias(tflite_model.load_model(tflite))
    with warnings.catch_warnings():  # "tf.lite.Interpreter is deprecated": fine for a check
        warnings.simplefilter("ignore")
        # No default delegate: XNNPACK would not keep the intermediate tensors.
        interpreter = tf.lite.Interpreter(
            model_content=tflite_model.with_builtin_transpose_conv(tflite),
            experimental_preserve_all_tensors=True,
            experimental_op_resolver_type=tf.lite.experimental.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    index = {d["name"]: d["index"] for d in interpreter.get_tensor_details()}

    def run(x: np.ndarray):
        interpreter.set_tensor(inp["index"], x)
        interpreter.invoke()
        return (interpreter.get_tensor(out["index"]).copy(),
                interpreter.get_tensor(index[spec.input_name]).copy(),
                interpreter.get_tensor(index[spec.output_name]).copy())

    return run, spec


@dataclass
class Comparison:
    """Worst cases over the inputs compared (relative = max abs diff / max abs value)."""

    output_abs: float = 0.0  # final probabilities, ONNX vs TFLite
    logits_rel: float = 0.0  # custom-op output, ONNX ConvTranspose vs TFLite TRANSPOSE_CONV
    features_rel: float = 0.0  # custom-op input, ONNX vs TFLite
    numpy_rel: float = 0.0  # ONNX ConvTranspose vs numpy on the ONNX graph's own input
    weights_equal: bool = True  # ONNX ConvTranspose weights == the flatbuffer's (dequantized)

    def worst(self, other: "Comparison") -> "Comparison":
        return Comparison(max(self.output_abs, other.output_abs), max(self.logits_rel, other.logits_rel),
                          max(self.features_rel, other.features_rel), max(self.numpy_rel, other.numpy_rel),
                          self.weights_equal and other.weights_equal)

    def __str__(self) -> str:
        return (f"output max abs diff {self.output_abs:.1e}, logits rel {self.logits_rel:.1e}, "
                f"features rel {self.features_rel:.1e}, ConvTranspose vs numpy rel {self.numpy_rel:.1e}, "
                f"weights {'identical' if self.weights_equal else 'DIFFERENT'}")


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(float(np.abs(b).max()), 1e-12))


def compare(onnx_model, tflite: bytes, inputs: list[np.ndarray], probes=None) -> tuple[Comparison, list]:
    """Compare on each input; returns (worst case, per-input Comparisons).

    ``probes`` may pass ``(onnx_probe(...), tflite_probe(...))`` results to reuse them.
    """
    (run_onnx, onnx_spec), (run_tfl, tfl_spec) = probes or (onnx_probe(onnx_model), tflite_probe(tflite))
    weights_equal = (np.array_equal(onnx_spec.weight_ohwi, tfl_spec.weight_ohwi)
                     and np.array_equal(onnx_spec.bias, tfl_spec.bias))
    numpy_spec = replace(onnx_spec, output_shape=tuple(tfl_spec.output_shape))
    rows = []
    for x in inputs:
        y_onnx, pre_onnx, seg_onnx = run_onnx(x)
        y_tfl, pre_tfl, seg_tfl = run_tfl(x)
        rows.append(Comparison(
            output_abs=float(np.abs(y_onnx - y_tfl).max()),
            logits_rel=_rel(seg_onnx, seg_tfl),
            features_rel=_rel(pre_onnx, pre_tfl),
            numpy_rel=_rel(seg_onnx, tflite_model.transpose_conv_bias_numpy(pre_onnx, numpy_spec)),
            weights_equal=weights_equal))
    total = Comparison(weights_equal=weights_equal)
    for row in rows:
        total = total.worst(row)
    return total, rows


def synthetic_inputs(count: int = 3, seed: int = 1234) -> list[np.ndarray]:
    """A smooth colour gradient and uniform noise, float32 [1, 256, 256, 3] in [0, 1]."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:256, 0:256] / 255.0
    inputs = [np.stack([yy, xx, 1 - yy], -1)[None].astype(np.float32)]
    inputs += [rng.random((1, 256, 256, 3), dtype=np.float32) for _ in range(count - 1)]
    return inputs
