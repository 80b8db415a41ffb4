"""Export MatAnyone2's stateless sub-networks to ONNX and write manifest.json.

    python -m tools.matanyone2.export --out DIR --random-init 0
    python -m tools.matanyone2.export --out DIR --checkpoint matanyone2.pth

Six models (see network.py and GLUE.md): encoder, uncert, readout, decoder, maskencoder, memframe.
Dynamic H and W (multiples of 16), opset 18, IR version 10, fp32. All state (memory bank,
affinity/top-k/readout, sensory, object memory, last mask/pix_feat/mask value, warm-up schedule)
stays outside the models: glue.py is the reference implementation of that glue.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from . import network as N

OPSET = 18
MAX_IR_VERSION = 10
SIZE_MULTIPLE = 16
MAX_GRID = 256  # dynamic stride-16 grid up to 256 x 256 cells (4096 x 4096 pixels)
VERIFY_SIZE = (288, 512)  # H, W used to check each ONNX model against PyTorch after export
# max |ORT - PyTorch| / max |PyTorch| allowed in that check: float32 reordering through ResNet-50
# reaches ~1e-4 on noise images; an export bug is off by far more
VERIFY_TOL = 1e-3

ROLES = {
    'encoder': 'every frame: image -> multi-scale features, pix_feat, key/shrinkage/selection',
    'uncert': 'ordinary frames (t >= 1): uncertainty of the memory readout (sigmoid prob)',
    'readout': 'every pass: pixel fusion (pixel memory + sensory + last mask) + object transformer',
    'decoder': 'every pass: alpha (clamped to [0,1]) + decoder sensory update',
    'maskencoder': 'every pass: mask value of (image, alpha)',
    'memframe': 'memory frames only: deep sensory update + object summary',
}

_DTYPES = {1: 'float32', 10: 'float16', 7: 'int64', 6: 'int32', 9: 'bool'}


def _quiet():
    """torch.onnx is chatty (progress lines, warnings about torchvision ops); keep errors only."""
    for name in ('torch.onnx', 'torch.onnx._internal.exporter._registration', 'torch.export',
                 'torch._dynamo', 'onnxscript'):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings('ignore')


def _dynamic_shapes(name: str):
    import torch
    h16 = torch.export.Dim('h16', min=1, max=MAX_GRID)
    w16 = torch.export.Dim('w16', min=1, max=MAX_GRID)
    dyn = {}
    for iname, shape in N.IO_SPEC[name][0]:
        dims = {}
        for i, s in enumerate(shape):
            if isinstance(s, str):
                base = h16 if s.startswith('H') else w16
                factor = 16 // N._DIV[s]
                dims[i] = base * factor if factor > 1 else base
        dyn[iname] = dims
    return dyn


def _rename_dims(model, name: str) -> None:
    """Give the graph's symbolic dims readable names ('H', 'W/16', ...) instead of the exporter's
    ('16*h16', 's76', ...), consistently in inputs, outputs and value_info."""
    ins, outs = N.IO_SPEC[name]
    mapping = {}
    for values, spec in ((model.graph.input, ins), (model.graph.output, outs)):
        assert [v.name for v in values] == [n for n, _ in spec], (name, [v.name for v in values])
        for v, (_, shape) in zip(values, spec):
            dims = v.type.tensor_type.shape.dim
            assert len(dims) == len(shape), (name, v.name)
            for d, want in zip(dims, shape):
                if isinstance(want, str):
                    if not d.dim_param:
                        raise RuntimeError(f'{name}.{v.name}: expected a dynamic dim for {want}')
                    if mapping.setdefault(d.dim_param, want) != want:
                        raise RuntimeError(f'{name}: symbol {d.dim_param} is both '
                                           f'{mapping[d.dim_param]} and {want}')
                elif d.dim_value != want:
                    raise RuntimeError(f'{name}.{v.name}: dim {d.dim_value or d.dim_param} != {want}')
    for values in (model.graph.input, model.graph.output, model.graph.value_info):
        for v in values:
            for d in v.type.tensor_type.shape.dim:
                if d.dim_param in mapping:
                    d.dim_param = mapping[d.dim_param]


def _strip_metadata(graph) -> None:
    """Drop the exporter's per-node metadata (Python stack traces with local paths, object
    addresses): it makes otherwise identical exports differ byte for byte."""
    for node in graph.node:
        del node.metadata_props[:]
        node.doc_string = ''
        for attr in node.attribute:
            if attr.HasField('g'):
                _strip_metadata(attr.g)
            for g in attr.graphs:
                _strip_metadata(g)
    for v in list(graph.value_info) + list(graph.input) + list(graph.output):
        del v.metadata_props[:]
    for init in graph.initializer:
        del init.metadata_props[:]
    del graph.metadata_props[:]   # exported-program signature with per-run node counters


def _io(values) -> list:
    out = []
    for v in values:
        shape = [d.dim_param if d.dim_param else d.dim_value for d in v.type.tensor_type.shape.dim]
        out.append({'name': v.name, 'shape': shape,
                    'dtype': _DTYPES.get(v.type.tensor_type.elem_type, str(v.type.tensor_type.elem_type))})
    return out


def export_model(net, name: str, path: Path) -> dict:
    import onnx
    import torch
    module = N.SUBNETS[name](net).eval()
    args = N.example_inputs(name, *VERIFY_SIZE)
    ins, outs = N.IO_SPEC[name]
    N.reset_positional_caches(net)
    tmp = path.with_suffix('.tmp.onnx')
    with torch.no_grad():
        torch.onnx.export(module, args, str(tmp), dynamo=True, opset_version=OPSET,
                          input_names=[n for n, _ in ins], output_names=[n for n, _ in outs],
                          dynamic_shapes=_dynamic_shapes(name), external_data=False,
                          verbose=False)
    N.reset_positional_caches(net)
    model = onnx.load(str(tmp))
    tmp.unlink()
    if model.ir_version > MAX_IR_VERSION:
        model.ir_version = MAX_IR_VERSION
    opsets = {o.domain: o.version for o in model.opset_import}
    if opsets.get('', opsets.get('ai.onnx')) != OPSET:
        raise RuntimeError(f'{name}: exported opset {opsets}, wanted {OPSET}')
    _rename_dims(model, name)
    _strip_metadata(model.graph)
    del model.metadata_props[:]
    model.producer_name = 'gst-matanyone tools/matanyone2/export.py'
    model.doc_string = f'MatAnyone2 {name}: {ROLES[name]}'
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return {'file': path.name, 'sha256': N.sha256_file(path), 'role': ROLES[name],
            'inputs': _io(model.graph.input), 'outputs': _io(model.graph.output)}


def verify_model(net, name: str, path: Path, height: int, width: int) -> float:
    """Max |ONNX Runtime - PyTorch| relative to max |PyTorch| over all outputs, on example inputs."""
    os.environ.setdefault('ORT_DISABLE_TELEMETRY', '1')
    import onnxruntime as ort
    import torch
    module = N.SUBNETS[name](net).eval()
    args = N.example_inputs(name, height, width, seed=1)
    N.reset_positional_caches(net)
    with torch.no_grad():
        ref = module(*args)
    N.reset_positional_caches(net)
    ref = (ref,) if isinstance(ref, torch.Tensor) else ref
    sess = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    got = sess.run(None, {n: a.numpy() for (n, _), a in zip(N.IO_SPEC[name][0], args)})
    worst = 0.0
    for g, r in zip(got, ref):
        r = r.numpy()
        if g.shape != r.shape:
            raise RuntimeError(f'{name}: ONNX output shape {g.shape} != PyTorch {r.shape}')
        worst = max(worst, float(np.abs(g - r).max()) / max(float(np.abs(r).max()), 1e-6))
    return worst


def exporter_info() -> dict:
    """Which code and versions wrote the set (lets tests and scripts tell a stale set)."""
    import hashlib
    import onnx
    import torch
    code = hashlib.sha256()
    for name in ('network.py', 'export.py'):
        code.update((Path(__file__).resolve().parent / name).read_bytes())
    return {'tool': 'tools/matanyone2/export.py', 'code_sha256': code.hexdigest(),
            'torch': torch.__version__, 'onnx': onnx.__version__}


def _dumps(manifest: dict) -> str:
    """JSON with two-space indentation, but each model input/output on one line."""
    text = json.dumps(manifest, indent=2)
    for m in manifest['models'].values():
        for io in m['inputs'] + m['outputs']:
            text = text.replace(json.dumps(io, indent=2).replace('\n', '\n        '),
                                json.dumps(io), 1)
    assert json.loads(text) == manifest
    return text


def export_all(out: Path, checkpoint=None, random_init=None, verify: bool = True,
               log=print, built: N.BuiltNetwork | None = None, only=None) -> dict:
    """Export the set into `out`; returns the manifest. `built` reuses an already built network
    (it must come from the same checkpoint / seed); `only` restricts the models (tests)."""
    _quiet()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if built is None:
        built = N.build_network(checkpoint=checkpoint, random_init_seed=random_init)
        log(f'built network ({built.weights}) in {time.perf_counter() - t0:.1f} s')
    cfg = N.config_summary(built.net.cfg)
    manifest = {
        'format': 1,
        'engine': 'matanyone2',
        'weights': built.weights,
        'license': built.license,
        **({'license_file': 'LICENSE.txt'} if built.from_checkpoint else {}),
        'opset': OPSET,
        'dynamic_size': True,
        'size_multiple': SIZE_MULTIPLE,
        'config': {**cfg, 'warmup': 10, 'seed_dilate': 10, 'seed_erode': 10},
        'exporter': exporter_info(),
        'models': {},
    }
    if built.from_checkpoint:
        shutil.copyfile(N.LICENSE_TEXT_FILE, out / 'LICENSE.txt')
    for name in N.SUBNETS:
        if only is not None and name not in only:
            continue
        t1 = time.perf_counter()
        path = out / f'{name}.onnx'
        manifest['models'][name] = export_model(built.net, name, path)
        msg = f'exported {name} in {time.perf_counter() - t1:.1f} s'
        if verify:
            err = verify_model(built.net, name, path, *VERIFY_SIZE)
            err2 = verify_model(built.net, name, path, 96, 160)
            msg += f'; max rel. error vs PyTorch {err:.1e} at 512x288, {err2:.1e} at 160x96'
            if max(err, err2) > VERIFY_TOL:
                raise RuntimeError(f'{name}: ONNX output differs from PyTorch ({err}, {err2})')
        log(msg)
    (out / 'manifest.json').write_text(_dumps(manifest) + '\n')
    log(f'wrote {out / "manifest.json"} ({time.perf_counter() - t0:.1f} s in all)')
    return manifest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog='python -m tools.matanyone2.export', description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--out', required=True, type=Path, help='output directory')
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument('--checkpoint', type=Path, help='official matanyone2.pth')
    src.add_argument('--random-init', type=int, metavar='SEED',
                     help='deterministic well-conditioned random weights (for tests)')
    ap.add_argument('--no-verify', action='store_true',
                    help='skip the ONNX Runtime vs PyTorch check of each model')
    args = ap.parse_args(argv)
    try:
        export_all(args.out, checkpoint=args.checkpoint, random_init=args.random_init,
                   verify=not args.no_verify)
    except N.CheckpointError as e:
        print(f'error: {e}', file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main())
