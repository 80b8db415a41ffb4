"""Writes a Triton Inference Server model repository that serves MatAnyone2 to `matanyone` elements
(`inference-server=...`): the step model `matanyone2` (Triton's Python backend, one sequence per
stream, see model.py and PROTOCOL.md) and, with `--runner bls`, the six networks as ONNX models for
Triton's onnxruntime backend, which the step model calls through BLS and Triton batches across streams.

    python -m tools.serve.repository --models ~/.local/share/gst-matanyone/models/matanyone2 --out repo
    python -m tools.serve.repository --models ... --out repo --runner bls --gpu [--tensorrt]

The same ONNX files the element runs in-process are what the repository serves.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
GLUE = HERE.parent / 'matanyone2' / 'glue.py'
STEP_MODEL = 'matanyone2'


def _dims(shape, batched: bool) -> str:
    dims = [-1 if isinstance(d, str) else int(d) for d in shape]
    return ', '.join(str(d) for d in (dims[1:] if batched else dims))


def _step_config(name: str, args) -> str:
    kind = 'KIND_GPU' if args.gpu else 'KIND_CPU'
    parameters = {
        'runner': args.runner, 'models': 'models', 'bls_prefix': f'{name}_', 'threads': str(args.threads),
        'max_streams': str(args.max_streams), 'idle_seconds': str(args.idle_seconds),
        'provider': 'cuda' if args.gpu else 'cpu',
    }
    if args.test_delay_ms:
        parameters['test_delay_ms'] = str(args.test_delay_ms)
    lines = [
        f'name: "{name}"', 'backend: "python"', 'max_batch_size: 0',
        'input [',
        '  { name: "OPS" data_type: TYPE_INT32 dims: [ -1 ] },',
        '  { name: "FRAME" data_type: TYPE_FP32 dims: [ 3, -1, -1 ] optional: true },',
        '  { name: "FRAME_U8" data_type: TYPE_UINT8 dims: [ 3, -1, -1 ] optional: true },',
        '  { name: "SEEDS" data_type: TYPE_UINT8 dims: [ -1, -1, -1 ] optional: true }',
        ']',
        'output [',
        '  { name: "ALPHA" data_type: TYPE_UINT8 dims: [ -1, -1, -1 ] },',
        '  { name: "UNCERTAINTY" data_type: TYPE_FP32 dims: [ -1, -1, -1 ] },',
        '  { name: "STATE" data_type: TYPE_INT32 dims: [ -1, 2 ] },',
        '  { name: "TIMING" data_type: TYPE_FP32 dims: [ 8 ] }',
        ']',
        # Each stream's state lives in one instance: the sequence batcher keeps a stream on it, and
        # forgets a stream silent for the idle time (so does model.py).
        'sequence_batching {',
        f'  max_sequence_idle_microseconds: {int(args.idle_seconds * 1_000_000)}',
        f'  oldest {{ max_candidate_sequences: {args.max_streams} }}',
        '  control_input [',
        '    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },',
        '    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },',
        '    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }',
        '  ]',
        '}',
        f'instance_group [ {{ count: {args.instances} kind: {kind} }} ]',
    ]
    lines += [f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in parameters.items()]
    return '\n'.join(lines) + '\n'


def batchable(path: Path, info: dict) -> bool:
    """Whether the ONNX network at `path` runs a batch of two exactly as two batches of one once its
    batch dimension is made symbolic (the export fixes it at 1; some graphs reshape with a literal 1)."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    model = _with_symbolic_batch(onnx.load(str(path)))
    try:
        session = ort.InferenceSession(model.SerializeToString(), providers=['CPUExecutionProvider'])
        rng = np.random.default_rng(0)
        feeds = {}
        for port in info['inputs']:
            shape = [2] + [int(eval(d.replace('H', '64').replace('W', '96'), {})) if isinstance(d, str) else d
                           for d in port['shape'][1:]]
            feeds[port['name']] = rng.random(shape, dtype=np.float32)
        both = session.run(None, feeds)
        first = session.run(None, {k: v[:1] for k, v in feeds.items()})
        second = session.run(None, {k: v[1:] for k, v in feeds.items()})
    except Exception:
        return False
    return all(np.array_equal(b[:1], f) and np.array_equal(b[1:], s) for b, f, s in zip(both, first, second))


def _with_symbolic_batch(model):
    for value in list(model.graph.input) + list(model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = 'batch'
    return model


def _network_config(name: str, model: str, info: dict, batched: bool, args) -> str:
    kind = 'KIND_GPU' if args.gpu else 'KIND_CPU'
    lines = [f'name: "{name}"', 'backend: "onnxruntime"', f'max_batch_size: {args.max_batch if batched else 0}', 'input [']
    lines += [f'  {{ name: "{p["name"]}" data_type: TYPE_FP32 dims: [ {_dims(p["shape"], batched)} ] }},' for p in info['inputs']]
    lines[-1] = lines[-1].rstrip(',')
    lines += [']', 'output [']
    lines += [f'  {{ name: "{p["name"]}" data_type: TYPE_FP32 dims: [ {_dims(p["shape"], batched)} ] }},' for p in info['outputs']]
    lines[-1] = lines[-1].rstrip(',')
    lines += [']']
    if batched:
        # Streams' calls of this network arriving within 2 ms run as one batch (same working size).
        lines += ['dynamic_batching { max_queue_delay_microseconds: 2000 }']
    lines += [f'instance_group [ {{ count: 1 kind: {kind} }} ]']
    if args.tensorrt and model != 'memframe':
        lines += ['optimization { execution_accelerators { gpu_execution_accelerator: [ { name: "tensorrt"',
                  '  parameters { key: "precision_mode" value: "FP16" }',
                  '  parameters { key: "max_workspace_size_bytes" value: "2147483648" } } ] } }']
    return '\n'.join(lines) + '\n'


def _place(source: Path, target: Path, link: bool):
    if target.exists() or target.is_symlink():
        target.unlink()
    if link:
        target.symlink_to(source.resolve())
    else:
        shutil.copyfile(source, target)


def write(args) -> dict:
    models = Path(args.models)
    manifest_path = models / 'manifest.json'
    if not manifest_path.is_file():
        raise SystemExit(f'{models}: no manifest.json (a MatAnyone2 model set: scripts/install-matanyone2.sh makes one)')
    manifest = json.loads(manifest_path.read_text())
    if manifest.get('engine') != 'matanyone2' or manifest.get('format') != 1:
        raise SystemExit(f'{manifest_path}: not a MatAnyone2 model set (format 1)')
    out = Path(args.out)
    name = args.model_name
    step = out / name / '1'
    if (out / name).exists():
        shutil.rmtree(out / name)
    (step / 'models').mkdir(parents=True)
    for source in (HERE / 'model.py', HERE / 'tracker.py', GLUE):
        shutil.copyfile(source, step / source.name)
    shutil.copyfile(manifest_path, step / 'models' / 'manifest.json')
    for extra in ('LICENSE', 'LICENSE-S-Lab-1.0.txt', 'NOTICE'):
        if (models / extra).is_file():
            shutil.copyfile(models / extra, out / name / extra)
    (out / name / 'config.pbtxt').write_text(_step_config(name, args))
    summary = {'repository': str(out), 'step_model': name, 'runner': args.runner, 'networks': {}}
    for model, info in manifest['models'].items():
        source = models / info['file']
        if args.runner == 'onnxruntime':
            _place(source, step / 'models' / info['file'], args.link)
            continue
        network = f'{name}_{model}'
        folder = out / network / '1'
        if (out / network).exists():
            shutil.rmtree(out / network)
        folder.mkdir(parents=True)
        batched = args.max_batch > 0 and batchable(source, info)
        if batched:
            import onnx
            onnx.save(_with_symbolic_batch(onnx.load(str(source))), str(folder / 'model.onnx'))
        else:
            _place(source, folder / 'model.onnx', args.link)
        (out / network / 'config.pbtxt').write_text(_network_config(network, model, info, batched, args))
        summary['networks'][network] = {'batched_across_streams': batched}
    return summary


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--models', required=True, help='a MatAnyone2 model set (the folder with manifest.json)')
    parser.add_argument('--out', required=True, help='the model repository to write (its MatAnyone2 models are replaced)')
    parser.add_argument('--runner', choices=('onnxruntime', 'bls'), default='onnxruntime',
                        help='onnxruntime: the networks run inside the step model; bls: as onnxruntime-backend models')
    parser.add_argument('--gpu', action='store_true', help='instances on the GPU (KIND_GPU; CUDA for the in-process runner)')
    parser.add_argument('--tensorrt', action='store_true', help='bls: TensorRT (fp16) as the networks\' GPU accelerator')
    parser.add_argument('--instances', type=int, default=1, help='step model instances (each serves its own streams)')
    parser.add_argument('--max-batch', type=int, default=8, help='bls: the largest batch across streams (0: none)')
    parser.add_argument('--max-streams', type=int, default=64, help='streams one instance serves at once')
    parser.add_argument('--idle-seconds', type=float, default=60, help='a stream silent this long is forgotten')
    parser.add_argument('--threads', type=int, default=0, help='onnxruntime runner: threads per network (0: one per core)')
    parser.add_argument('--model-name', default=STEP_MODEL, help='the step model\'s name (the element\'s server-model)')
    parser.add_argument('--link', action='store_true', help='link the ONNX files instead of copying them (same machine)')
    parser.add_argument('--test-delay-ms', type=float, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tensorrt and (args.runner != 'bls' or not args.gpu):
        parser.error('--tensorrt needs --runner bls --gpu')
    summary = write(args)
    print(json.dumps(summary, indent=1))


if __name__ == '__main__':
    sys.exit(main())
