"""Reading (and, for validation only, rewriting) the selfie segmentation TFLite flatbuffer.

The MediaPipe selfie segmentation model ends in a MediaPipe custom op,
``Convolution2DTransposeBias``, that neither TensorFlow Lite's stock interpreter nor
tf2onnx knows.  Its semantics (MediaPipe's ``transpose_conv_bias.cc``, a modified copy of
TFLite's reference ``TransposeConv``) are a transposed convolution plus a bias:

* inputs: ``x`` [N, H, W, C_in] float32, ``weights`` [C_out, kH, kW, C_in] (OHWI: the
  filter is indexed ``[out_channel, filter_y, filter_x, in_channel]``), ``bias`` [C_out];
* ``custom_options``: the raw bytes of the C struct ``TfLiteTransposeConvParams``
  as it was in 2020 -- three little-endian int32 ``padding`` (the C enum
  ``TfLitePadding``: 1 = SAME, 2 = VALID; *not* the flatbuffer ``Padding`` enum),
  ``stride_width``, ``stride_height``;
* output: [N, H_out, W_out, C_out] with, per spatial axis, ``full = stride * (in - 1) +
  kernel``, ``crop = max(0, kernel - (in - 1) % stride - 1)`` for SAME (0 for VALID),
  ``out = full - crop``; input pixel ``i`` scatters its ``kernel`` taps to output rows
  ``i * stride - crop // 2 + k``, and taps that fall outside are dropped.

For the selfie model: x [1, 128, 128, 16], kernel 2x2, stride 2, SAME -> crop 0, out 256.

In this model both weight and bias are stored as FLOAT16 constants and reach the op
through ``DEQUANTIZE`` ops; :func:`constant_value` follows those.

This module uses TensorFlow's generated flatbuffer object API
(``tensorflow.lite.python.schema_py_generated``); TensorFlow is needed for the
conversion anyway (tf2onnx imports it).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

CUSTOM_OP = "Convolution2DTransposeBias"

# C enum TfLitePadding (tensorflow/lite/core/c/builtin_op_data.h).
_C_PADDING = {1: "SAME", 2: "VALID"}


def _schema():
    from tensorflow.lite.python import schema_py_generated as schema  # heavy import

    return schema


def load_model(data: bytes):
    """Parse a .tflite flatbuffer into the mutable object API (``ModelT``)."""
    schema = _schema()
    return schema.ModelT.InitFromObj(schema.Model.GetRootAs(bytearray(data), 0))


def serialize_model(model) -> bytes:
    import flatbuffers

    builder = flatbuffers.Builder(1 << 20)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _op_name(model, op) -> str:
    schema = _schema()
    code = model.operatorCodes[op.opcodeIndex]
    builtin = max(code.builtinCode, code.deprecatedBuiltinCode)
    if builtin == schema.BuiltinOperator.CUSTOM:
        return code.customCode.decode() if isinstance(code.customCode, bytes) else str(code.customCode)
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    return names[builtin]


def _tensor_name(tensor) -> str:
    name = tensor.name
    return name.decode() if isinstance(name, bytes) else str(name)


_NP_TYPES = {0: np.float32, 1: np.float16, 2: np.int32, 4: np.int64, 9: np.int8, 3: np.uint8}


def constant_value(model, subgraph, index: int) -> np.ndarray:
    """Value of a constant tensor, following DEQUANTIZE (float16 or affine int8/uint8).

    Raises ValueError when the tensor is computed from the graph input.
    """
    tensor = subgraph.tensors[index]
    buf = model.buffers[tensor.buffer] if tensor.buffer < len(model.buffers) else None
    if buf is not None and buf.data is not None and len(buf.data) > 0:
        dtype = _NP_TYPES.get(tensor.type)
        if dtype is None:
            raise ValueError(f"tensor {_tensor_name(tensor)}: unsupported type {tensor.type}")
        raw = np.asarray(buf.data, dtype=np.uint8).tobytes()
        return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).reshape(tensor.shape).copy()
    for op in subgraph.operators:
        if op.outputs is not None and index in list(op.outputs):
            if _op_name(model, op) != "DEQUANTIZE":
                break
            source_index = int(op.inputs[0])
            value = constant_value(model, subgraph, source_index)
            quant = subgraph.tensors[source_index].quantization
            if value.dtype == np.float16:
                return value.astype(np.float32)
            if quant is not None and quant.scale is not None and len(quant.scale) > 0:
                scale = np.asarray(quant.scale, np.float32)
                zero = np.asarray(quant.zeroPoint, np.float32)
                if scale.size > 1:  # per-axis
                    shape = [1] * value.ndim
                    shape[quant.quantizedDimension] = -1
                    scale, zero = scale.reshape(shape), zero.reshape(shape)
                return ((value.astype(np.float32) - zero) * scale).astype(np.float32)
            raise ValueError(f"cannot dequantize tensor {_tensor_name(subgraph.tensors[source_index])}")
    raise ValueError(f"tensor {_tensor_name(tensor)} is not a constant")


def parse_transpose_conv_params(custom_options) -> tuple[str, int, int]:
    """(padding, stride_h, stride_w) from the op's raw ``TfLiteTransposeConvParams`` bytes."""
    if isinstance(custom_options, (bytes, bytearray)):
        raw = bytes(custom_options)
    else:  # the object API gives a numpy uint8 array (or a list of ints)
        raw = np.asarray(custom_options, dtype=np.uint8).tobytes()
    if len(raw) < 12:
        raise ValueError(f"{CUSTOM_OP}: expected >= 12 bytes of custom options, got {len(raw)}")
    padding, stride_w, stride_h = struct.unpack_from("<iii", raw, 0)
    if padding not in _C_PADDING or stride_w < 1 or stride_h < 1:
        raise ValueError(f"{CUSTOM_OP}: implausible options padding={padding} strides={stride_w}x{stride_h}")
    return _C_PADDING[padding], stride_h, stride_w


@dataclass(frozen=True)
class TransposeConvBias:
    """One ``Convolution2DTransposeBias`` node, with its constants resolved."""

    op_index: int
    input_name: str  # tensor names as tf2onnx uses them for ONNX value names
    output_name: str
    input_shape: tuple[int, ...]  # NHWC
    output_shape: tuple[int, ...]  # NHWC
    weight_ohwi: np.ndarray  # float32 [C_out, kH, kW, C_in]
    bias: np.ndarray  # float32 [C_out]
    padding: str  # "SAME" | "VALID"
    stride_h: int
    stride_w: int

    @property
    def kernel_hw(self) -> tuple[int, int]:
        return int(self.weight_ohwi.shape[1]), int(self.weight_ohwi.shape[2])

    def pads(self) -> tuple[int, int, int, int]:
        """ONNX ``pads`` (top, left, bottom, right): the crop from the full transposed-conv
        output to ``output_shape``, ``crop // 2`` at the start as MediaPipe's kernel does."""
        result = []
        for axis, (stride, kernel) in enumerate(zip((self.stride_h, self.stride_w), self.kernel_hw)):
            size_in, size_out = self.input_shape[1 + axis], self.output_shape[1 + axis]
            total = (size_in - 1) * stride + kernel - size_out
            if total < 0:  # would need ONNX output_padding; no such case in MediaPipe models
                raise ValueError(f"{CUSTOM_OP}: output {self.output_shape} larger than the full result")
            result.append((total // 2, total - total // 2))
        (top, bottom), (left, right) = result
        return top, left, bottom, right


def find_transpose_conv_bias(model) -> list[TransposeConvBias]:
    """All ``Convolution2DTransposeBias`` ops of the model's main subgraph."""
    subgraph = model.subgraphs[0]
    found = []
    for op_index, op in enumerate(subgraph.operators):
        if _op_name(model, op) != CUSTOM_OP:
            continue
        inputs = [int(i) for i in op.inputs]
        if len(inputs) != 3 or len(op.outputs) != 1:
            raise ValueError(f"{CUSTOM_OP} #{op_index}: expected 3 inputs and 1 output")
        x, out = subgraph.tensors[inputs[0]], subgraph.tensors[int(op.outputs[0])]
        weight = constant_value(model, subgraph, inputs[1]).astype(np.float32)
        bias = constant_value(model, subgraph, inputs[2]).astype(np.float32).reshape(-1)
        padding, stride_h, stride_w = parse_transpose_conv_params(op.customOptions)
        x_shape, out_shape = tuple(int(d) for d in x.shape), tuple(int(d) for d in out.shape)
        if weight.ndim != 4 or weight.shape[3] != x_shape[3] or weight.shape[0] != out_shape[3]:
            raise ValueError(f"{CUSTOM_OP} #{op_index}: weight {weight.shape} does not fit {x_shape}->{out_shape}")
        if bias.shape != (out_shape[3],):
            raise ValueError(f"{CUSTOM_OP} #{op_index}: bias {bias.shape} does not fit {out_shape}")
        for axis, stride in ((1, stride_h), (2, stride_w)):
            size_in, kernel = x_shape[axis], weight.shape[axis]
            crop = max(0, kernel - (size_in - 1) % stride - 1) if padding == "SAME" else 0
            if stride * (size_in - 1) + kernel - crop != out_shape[axis]:
                raise ValueError(f"{CUSTOM_OP} #{op_index}: declared output {out_shape} is not what "
                                 f"MediaPipe's kernel computes for {x_shape}, kernel {weight.shape}")
        found.append(TransposeConvBias(
            op_index=op_index, input_name=_tensor_name(x), output_name=_tensor_name(out),
            input_shape=x_shape, output_shape=out_shape, weight_ohwi=weight, bias=bias,
            padding=padding, stride_h=stride_h, stride_w=stride_w))
    return found


def with_builtin_transpose_conv(data: bytes) -> bytes:
    """A copy of the model whose custom ops are the stock TFLite ``TRANSPOSE_CONV`` (with bias).

    Used only as a *reference* for validation: TensorFlow's own interpreter then runs the
    whole original graph, so the ONNX conversion can be compared end to end.  Weight and
    bias become plain float32 constants; ``output_shape`` becomes a new int32 constant.
    """
    schema = _schema()
    model = load_model(data)
    specs = {spec.op_index: spec for spec in find_transpose_conv_bias(model)}
    subgraph = model.subgraphs[0]

    opcode = schema.OperatorCodeT()
    opcode.builtinCode = schema.BuiltinOperator.TRANSPOSE_CONV
    opcode.deprecatedBuiltinCode = min(schema.BuiltinOperator.TRANSPOSE_CONV, 127)
    opcode.version = 3  # version 3 added the optional bias input
    model.operatorCodes.append(opcode)
    opcode_index = len(model.operatorCodes) - 1

    def add_constant(name: str, value: np.ndarray, tensor_type: int) -> int:
        buffer = schema.BufferT()
        buffer.data = np.frombuffer(value.tobytes(), dtype=np.uint8)
        model.buffers.append(buffer)
        tensor = schema.TensorT()
        tensor.name, tensor.shape, tensor.type = name.encode(), list(value.shape), tensor_type
        tensor.buffer = len(model.buffers) - 1
        subgraph.tensors.append(tensor)
        return len(subgraph.tensors) - 1

    for op_index, spec in specs.items():
        op = subgraph.operators[op_index]
        shape = add_constant(f"{spec.output_name}/output_shape",
                             np.asarray(spec.output_shape, dtype="<i4"), schema.TensorType.INT32)
        weight = add_constant(f"{spec.output_name}/weight", spec.weight_ohwi.astype("<f4"), schema.TensorType.FLOAT32)
        bias = add_constant(f"{spec.output_name}/bias", spec.bias.astype("<f4"), schema.TensorType.FLOAT32)
        options = schema.TransposeConvOptionsT()
        options.padding = schema.Padding.SAME if spec.padding == "SAME" else schema.Padding.VALID
        options.strideH, options.strideW = spec.stride_h, spec.stride_w
        op.opcodeIndex = opcode_index
        op.inputs = [shape, weight, int(op.inputs[0]), bias]
        op.builtinOptionsType = schema.BuiltinOptions.TransposeConvOptions
        op.builtinOptions = options
        op.customOptions = None
    return serialize_model(model)


def transpose_conv_bias_numpy(x: np.ndarray, spec: TransposeConvBias) -> np.ndarray:
    """Straightforward numpy reference of the custom op (NHWC in, NHWC out, float64 math).

    Every input pixel scatters ``x[n, i, j, :] @ W[o, kh, kw, :]`` to output position
    ``(i * stride_h + kh, j * stride_w + kw)`` of the *full* output, which is then cropped
    (:meth:`TransposeConvBias.pads`) and offset by the bias.
    """
    n, h, w, _ = x.shape
    c_out, k_h, k_w, _ = spec.weight_ohwi.shape
    full = np.zeros((n, (h - 1) * spec.stride_h + k_h, (w - 1) * spec.stride_w + k_w, c_out))
    xd, wd = x.astype(np.float64), spec.weight_ohwi.astype(np.float64)
    for kh in range(k_h):
        for kw in range(k_w):
            contribution = np.einsum("nhwc,oc->nhwo", xd, wd[:, kh, kw, :])
            full[:, kh:kh + (h - 1) * spec.stride_h + 1:spec.stride_h,
                 kw:kw + (w - 1) * spec.stride_w + 1:spec.stride_w, :] += contribution
    top, left, _, _ = spec.pads()
    out_h, out_w = spec.output_shape[1], spec.output_shape[2]
    return full[:, top:top + out_h, left:left + out_w, :] + spec.bias.astype(np.float64)
