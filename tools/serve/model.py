"""MatAnyone2 as a Triton Inference Server model (Python backend): one request per frame of a
stream, the stream's state held here between requests (Triton's sequence batcher keeps each stream
on one instance of this model). `tools/serve/repository.py` writes it into a model repository with
`glue.py` and `tracker.py` beside it; PROTOCOL.md says what crosses the wire.

The six networks run either in ONNX Runtime inside this process (runner `onnxruntime`: a CPU or a
CUDA server, and the test server) or as models of their own served by Triton's onnxruntime backend
and called through BLS (runner `bls`: Triton batches their calls across streams).
"""

import json
import os
import sys
import time
from collections import defaultdict

import numpy as np
import triton_python_backend_utils as pb_utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from glue import Models  # noqa: E402
from tracker import ProtocolError, Request, Streams  # noqa: E402


class BlsModels:
    """The six networks as Triton models of their own (`<prefix><name>`), called through BLS; the
    same `run(name, **inputs)` as glue.Models."""

    def __init__(self, manifest: dict, prefix: str):
        self.manifest = manifest
        self.prefix = prefix
        self.outputs = {name: [o['name'] for o in info['outputs']] for name, info in manifest['models'].items()}
        self.seconds = defaultdict(float)
        self.calls = defaultdict(int)

    def run(self, name, **inputs):
        started = time.perf_counter()
        request = pb_utils.InferenceRequest(
            model_name=self.prefix + name, requested_output_names=self.outputs[name],
            inputs=[pb_utils.Tensor(key, np.ascontiguousarray(value, np.float32)) for key, value in inputs.items()])
        response = request.exec()
        if response.has_error():
            raise RuntimeError(f'{self.prefix}{name}: {response.error().message()}')
        out = {key: pb_utils.get_output_tensor_by_name(response, key).as_numpy() for key in self.outputs[name]}
        self.seconds[name] += time.perf_counter() - started
        self.calls[name] += 1
        return out


def _invalid_argument(message: str):
    code = getattr(pb_utils.TritonError, 'INVALID_ARG', None)
    return pb_utils.TritonError(message) if code is None else pb_utils.TritonError(message, code)


def _parameter(config: dict, key: str, default: str) -> str:
    return config.get('parameters', {}).get(key, {}).get('string_value', default)


class TritonPythonModel:
    def initialize(self, args):
        os.environ.setdefault('ORT_DISABLE_TELEMETRY', '1')
        config = json.loads(args['model_config'])
        here = os.path.join(args['model_repository'], args['model_version'])
        model_dir = os.path.join(here, _parameter(config, 'models', 'models'))
        runner = _parameter(config, 'runner', 'onnxruntime')
        if runner == 'bls':
            with open(os.path.join(model_dir, 'manifest.json')) as f:
                models = BlsModels(json.load(f), _parameter(config, 'bls_prefix', 'matanyone2_'))
        elif runner == 'onnxruntime':
            providers = None
            if _parameter(config, 'provider', 'cpu') == 'cuda' or args.get('model_instance_kind') == 'GPU':
                device = int(args.get('model_instance_device_id', 0))
                chain = [('CUDAExecutionProvider', {'device_id': device}), 'CPUExecutionProvider']
                providers = {name: chain for name in ('encoder', 'uncert', 'readout', 'decoder', 'maskencoder', 'memframe')}
            models = Models(model_dir, int(_parameter(config, 'threads', '0')), providers)
        else:
            raise ValueError(f'parameter runner={runner!r}: onnxruntime or bls')
        self.streams = Streams(models, max_streams=int(_parameter(config, 'max_streams', '64')),
                               idle_seconds=float(_parameter(config, 'idle_seconds', '60')))
        # For tests of a slow server only (an artificial delay before each request): 0 in any real repository.
        self.delay = float(_parameter(config, 'test_delay_ms', '0')) / 1000

    def execute(self, requests):
        return [self._one(request) for request in requests]

    def _one(self, request):
        try:
            if self.delay:
                time.sleep(self.delay)
            result = self._handle(request)
            return pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor('ALPHA', result.alpha), pb_utils.Tensor('UNCERTAINTY', result.uncertainty),
                pb_utils.Tensor('STATE', result.state), pb_utils.Tensor('TIMING', result.timing)])
        except ProtocolError as error:
            # A request the client got wrong (or a stream this server lost): HTTP 400, not Triton's default
            # INTERNAL (500), which a client rightly takes for a server in trouble.
            return pb_utils.InferenceResponse(output_tensors=[], error=_invalid_argument(str(error)))
        except Exception as error:  # a model that fails must answer the request, not take the server down
            return pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(f'matanyone2 step failed: {error}'))

    def _handle(self, request):
        control = {name: pb_utils.get_input_tensor_by_name(request, name) for name in ('START', 'END', 'CORRID')}
        sequence = int(control['CORRID'].as_numpy().reshape(-1)[0])
        start = bool(control['START'].as_numpy().reshape(-1)[0])
        end = bool(control['END'].as_numpy().reshape(-1)[0])
        parameters = json.loads(request.parameters() or '{}')
        frame = None
        for name, scale in (('FRAME', None), ('FRAME_U8', np.float32(1 / 255))):
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is not None:
                if frame is not None:
                    raise ProtocolError('FRAME and FRAME_U8 both given: send one')
                frame = tensor.as_numpy()
                frame = frame.astype(np.float32) * scale if scale is not None else frame
        ops = pb_utils.get_input_tensor_by_name(request, 'OPS').as_numpy().astype(np.int64)
        seeds = pb_utils.get_input_tensor_by_name(request, 'SEEDS')
        warmup = parameters.get('warmup_now')
        if warmup is not None and (isinstance(warmup, bool) or not isinstance(warmup, int) or not 0 <= warmup <= 100_000):
            raise ProtocolError(f'parameter warmup_now={warmup!r} must be an integer from 0 to 100000')
        if frame is not None and frame.ndim != 3:
            raise ProtocolError(f'FRAME has shape {list(frame.shape)}; [3, H, W] expected')
        size = tuple(frame.shape[1:]) if frame is not None else None
        decoded = Request(ops=ops, frame=frame, seeds=None if seeds is None else seeds.as_numpy(), warmup=warmup)
        return self.streams.handle(sequence, start, end, parameters, decoded, size)
