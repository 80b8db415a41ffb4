"""Float16 MatAnyone2 model set for GPUs (optional): the fp32 set converted, precision-critical parts kept fp32.

    python -m tools.matanyone2.fp16 --src MODELS/matanyone2 [--out MODELS/matanyone2-fp16] \
        [--clip VIDEO] [--mask PNG] [--size 512x288] [--check-frames 12]

Every model of the set goes through onnxconverter-common's convert_float_to_float16 with
keep_io_types: weights and activations become float16, while every model input and output stays
float32 with its name and shape, so the element feeds and reads the set as it does the fp32 one.
Kept fp32, on top of the converter's default block list (Resize, Range, TopK, Min, Max, ...):

* normalisations and reductions over many values (FP32_OPS): LayerNormalization (and
  Group/Instance/BatchNormalization should an export have them; BatchNorm is folded into the
  convolutions here, and no norm is decomposed into ReduceMean/Pow/Sqrt chains), ReduceMean (the
  channel attention of readout and maskencoder: a mean over every pixel), ReduceSum and Einsum (the
  object summaries of memframe sum weighted features over every pixel), Div (the summaries'
  normalisation by their summed weights, the encoder's image normalisation), Softmax (the object
  transformer's attention), Exp, Log, Sin, Cos.
* the logit chains (log_chain_nodes): the readout's attention mask starts from
  logit(clamp(p, 1e-7, 1 - 1e-7)); in fp16 1 - 1e-7 rounds to 1, 1 - p to 0 and the logit to
  infinity, so the Clip, Sub, Div (and the Concat feeding them) before each Log stay fp32.
* the decisions (decision_nodes): comparisons of float tensors and the two nodes before them. The
  mask is logit_fg >= max(logit_bg, logit_fg), where ties are the rule; given the operands in fp16,
  ONNX Runtime 1.32's CPU provider turns a third of the mask over (measured: readout output error
  6e-2 of its range, alpha mean |Δα| 0.0156 on test-sample2; with the operands fp32: 1.5e-3 and 0.0013).
* the memory key head (memory_key_nodes): every node from the encoder's f16 output on to its outputs
  key, shrinkage and selection (key projection, d/e projections, Pow, Sigmoid), ~0.4 of the
  encoder's ~10 GMAC at 512x288. These feed the memory affinity, whose top-k softmax over
  -|k_mem - k_query|² magnifies small errors (they stay fp32 in the int8 set too). On the random-init
  test set this changes the deviation by less than 1 % (the head's input f16 is already fp16).
* the sine positional encodings (Range -> Div/Mul -> Einsum -> Sin/Cos): a few hundred values.

Sigmoid and Tanh (GRU gates, attention weights, the uncertainty) stay fp16: their outputs are
bounded, and keeping them fp32 changed the measured deviation by under 1 %. Dropping the
normalisation/reduction blocks above raises it by ~8 % (mean) and doubles the worst pixel (max |Δα|
0.021 instead of 0.010 on 12 frames from frame 12 on). What remains is the backbone: with only the
encoder fp16 the deviation is the whole set's (mean |Δα| 0.0013 at 512x288 on the random-init set;
readout, decoder and maskencoder alone 0.0001 or less each).

Repairs around the converter (onnxconverter-common 1.16.0), needed on these exports and checked on
every model (float32 inputs and outputs with the source's names and shapes, onnx.checker, a load in
ONNX Runtime): the exporter lists initializers in value_info, which makes the converter round a
kept-fp32 node's weights to fp16 and cast them back, so those entries go; a model output the graph
also reads (the encoder's f16, f8, f4, f2, f1) or that a kept-fp32 node writes would come out
float16 or with mistyped readers, so each output is written through an Identity; float initializers
read by both fp32 and fp16 nodes are duplicated; and the fp32 -> fp16 -> fp32 cast pairs the
converter leaves between two kept-fp32 nodes (or a float32 input and one) are removed, so those
values never pass through fp16.

The result is a complete model set (manifest with "precision": "fp16", same file names), by default
`matanyone2-fp16/` beside the fp32 set, which the element runs with `precision=fp16`. It is meant
for GPU execution providers: ONNX Runtime's CPU provider runs it correctly (adding casts where it
has no fp16 kernel) but 1.0-1.25x slower per model than fp32. Its deviation from fp32 is measured
with glue.py on the first --check-frames frames of a real clip, as quantize.py measures int8's
(quantize.deviation), and written to the manifest as `fp16.deviation`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from . import quantize
from .media import sha256_file

CONVERTER = 'onnxconverter-common 1.16.0'
# op types kept fp32 in every model (added to the converter's DEFAULT_OP_BLOCK_LIST)
FP32_OPS = ('LayerNormalization', 'GroupNormalization', 'InstanceNormalization', 'BatchNormalization',
            'LpNormalization', 'MeanVarianceNormalization',
            'ReduceMean', 'ReduceSum', 'ReduceSumSquare', 'ReduceL2', 'ReduceLogSumExp', 'Einsum',
            'Div', 'Softmax', 'LogSoftmax', 'Exp', 'Log', 'Sin', 'Cos')
MEMORY_OUTPUTS = ('key', 'shrinkage', 'selection')  # the encoder's memory key head
MAX_KEY_HEAD_NODES = 16  # export.py's head has 7
LOG_CHAIN_DEPTH = 3  # nodes kept fp32 upstream of each Log (Div <- Sub <- Clip)
DECISION_DEPTH = 2  # nodes kept fp32 upstream of a float comparison (Slice/ReduceMax <- Log)
COMPARISONS = ('Greater', 'GreaterOrEqual', 'Less', 'LessOrEqual', 'Equal')
INNER = '::fp16_inner'  # suffix of the tensor an output's producer writes (read through an Identity)

FLOAT, FLOAT16 = 1, 10  # onnx.TensorProto.FLOAT, FLOAT16


class Fp16Error(RuntimeError):
    pass


# ============================================================================================
# which nodes stay fp32

def _producers(graph) -> dict:
    return {out: node for node in graph.node for out in node.output}


def _consumers(graph) -> dict[str, list]:
    users: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            users.setdefault(name, []).append(node)
    return users


def memory_key_nodes(model) -> list[str]:
    """Names of the nodes between the encoder's last shared feature (another model output, f16) and
    its memory outputs key, shrinkage, selection: the key head. Empty for the other models."""
    graph = model.graph
    outputs = {o.name for o in graph.output}
    targets = [name for name in MEMORY_OUTPUTS if name in outputs]
    stop = (outputs - set(targets)) | {i.name for i in graph.input} | {i.name for i in graph.initializer}
    producers = _producers(graph)
    seen: set[str] = set()
    keep: list[str] = []
    pending = list(targets)
    while pending:
        tensor = pending.pop()
        node = producers.get(tensor)
        if tensor in stop or node is None or node.name in seen:
            continue
        seen.add(node.name)
        keep.append(node.name)
        pending.extend(node.input)
    if len(keep) > MAX_KEY_HEAD_NODES:  # the walk did not stop at a shared feature: not this export
        raise Fp16Error(f'the memory key head has {len(keep)} nodes (at most {MAX_KEY_HEAD_NODES} '
                        'expected): the encoder does not look like export.py\'s')
    return sorted(keep)


def log_chain_nodes(model, depth: int = LOG_CHAIN_DEPTH) -> list[str]:
    """Names of the nodes up to `depth` steps upstream of each Log (its argument's computation: the
    readout's logit(clamp(p, 1e-7, 1 - 1e-7)) = Log(Div(Clip, Sub(1, Clip))))."""
    graph = model.graph
    producers = _producers(graph)
    keep: set[str] = set()
    frontier = [n for n in graph.node if n.op_type == 'Log']
    for _ in range(depth):
        nxt = []
        for node in frontier:
            for tensor in node.input:
                up = producers.get(tensor)
                if up is not None and up.name not in keep:
                    keep.add(up.name)
                    nxt.append(up)
        frontier = nxt
    return sorted(keep)


def decision_nodes(model, depth: int = DECISION_DEPTH) -> list[str]:
    """Names of the comparisons that read float tensors and of the nodes up to `depth` steps
    upstream of them: the readout's foreground/background attention mask is
    logit_fg >= max(logit_bg, logit_fg) = GreaterOrEqual(Slice(Log), ReduceMax(Log)). Ties there are
    the rule (the maximum is one of the two), so both operands must be rounded alike; ONNX Runtime's
    CPU provider, given them in fp16, flips a third of the mask (measured on test-sample2)."""
    import onnx
    graph = onnx.shape_inference.infer_shapes(model).graph
    types = _elem_types(graph)
    producers = _producers(graph)
    keep: set[str] = set()
    frontier = [n for n in graph.node if n.op_type in COMPARISONS
                and any(types.get(t) == FLOAT for t in n.input)]
    keep.update(n.name for n in frontier)
    for _ in range(depth):
        nxt = []
        for node in frontier:
            for tensor in node.input:
                up = producers.get(tensor)
                if up is not None and up.name not in keep and types.get(tensor) == FLOAT:
                    keep.add(up.name)
                    nxt.append(up)
        frontier = nxt
    return sorted(keep)


def positional_encoding_nodes(model) -> list[str]:
    """Names of the nodes between a Range and a Sin/Cos (the sine positional encodings:
    Range -> Div -> Mul -> Einsum -> Sin/Cos), the Sin/Cos included, the Range not."""
    graph = model.graph
    result: set[str] = set()
    for sincos in (n for n in graph.node if n.op_type in ('Sin', 'Cos')):
        result.update(_upstream_until(graph, sincos, 'Range', 6))
    return sorted(result)


def _upstream_until(graph, node, op_type: str, depth: int) -> set[str]:
    """Nodes on paths of at most `depth` steps from a node of `op_type` down to `node` (inclusive)."""
    producers = _producers(graph)
    found: set[str] = set()

    def walk(n, d, path):
        if n.op_type == op_type:
            found.update(path)
            return
        if d == 0:
            return
        for tensor in n.input:
            up = producers.get(tensor)
            if up is not None:
                walk(up, d - 1, path + [n.name])
    walk(node, depth, [])
    return found


def fp32_nodes(model) -> list[str]:
    """Every node kept fp32 by name (on top of FP32_OPS): the memory key head, the Log chains and
    the positional encodings."""
    return sorted(set(memory_key_nodes(model)) | set(log_chain_nodes(model))
                  | set(decision_nodes(model)) | set(positional_encoding_nodes(model)))


# ============================================================================================
# conversion

def _elem_types(graph) -> dict[str, int]:
    types = {v.name: v.type.tensor_type.elem_type
             for v in list(graph.input) + list(graph.value_info) + list(graph.output)}
    types.update({i.name: i.data_type for i in graph.initializer})
    return types


def _prepare(model, blocked_ops: set[str], blocked_nodes: set[str]) -> set[str]:
    """The converter's blind spots, fixed before it runs (see the module doc). Returns the node
    block list to pass to it (blocked_nodes plus the nodes added here)."""
    from onnx import helper, numpy_helper
    graph = model.graph
    if any(a.type in (5, 10) for n in graph.node for a in n.attribute):  # GRAPH, GRAPHS
        raise Fp16Error('sub-graphs (If/Loop/Scan) are not handled')
    blocked = set(blocked_nodes)
    # the exporter lists initializers in value_info too; the converter would then take a kept-fp32
    # node's weights for activations, round them to fp16 and cast them back
    initializers = {i.name for i in graph.initializer}
    for vi in [v for v in graph.value_info if v.name in initializers]:
        graph.value_info.remove(vi)

    def is_blocked(node) -> bool:
        return node.op_type in blocked_ops or node.name in blocked

    # Casts to float that the export wrote (shape arithmetic for Range) keep producing float32
    for node in graph.node:
        if node.op_type == 'Cast' and any(a.name == 'to' and a.i == FLOAT for a in node.attribute):
            blocked.add(node.name)
    users = _consumers(graph)
    for node in graph.node:
        if node.op_type == 'Constant':
            users_of = [u for out in node.output for u in users.get(out, [])]
            if users_of and all(is_blocked(u) for u in users_of):
                blocked.add(node.name)
    # every float output written through an Identity: the graph keeps reading the producer's tensor
    producers = _producers(graph)
    for out in graph.output:
        if out.type.tensor_type.elem_type != FLOAT:
            continue
        producer = producers[out.name]
        inner = out.name + INNER
        for node in graph.node:
            for i, name in enumerate(node.input):
                if name == out.name:
                    node.input[i] = inner
            for i, name in enumerate(node.output):
                if name == out.name:
                    node.output[i] = inner
        identity = helper.make_node('Identity', [inner], [out.name], name=f'{out.name}{INNER}_identity')
        graph.node.append(identity)
        if is_blocked(producer):
            blocked.add(identity.name)
    # float initializers read by both kept-fp32 and fp16 nodes: the fp16 readers get a copy
    users = _consumers(graph)
    for init in list(graph.initializer):
        if init.data_type != FLOAT:
            continue
        readers = users.get(init.name, [])
        fp16_readers = [n for n in readers if not is_blocked(n)]
        if fp16_readers and len(fp16_readers) < len(readers):
            copy = numpy_helper.from_array(numpy_helper.to_array(init), init.name + '::fp16')
            graph.initializer.append(copy)
            for node in fp16_readers:
                for i, name in enumerate(node.input):
                    if name == init.name:
                        node.input[i] = copy.name
    return blocked


def _cast_to(node) -> int | None:
    if node.op_type != 'Cast':
        return None
    return next((a.i for a in node.attribute if a.name == 'to'), None)


def _rename(graph, old: str, new: str) -> None:
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new
        for i, name in enumerate(node.output):
            if name == old:
                node.output[i] = new


def _repair(model) -> None:
    """After the converter: drop fp32 -> fp16 -> fp32 round trips, give outputs written by kept-fp32
    nodes back their float32 type, remove the pre-pass Identities where they can go, clean up."""
    graph = model.graph
    outputs = {o.name: o for o in graph.output}
    # 1. Cast(to fp32) of a Cast(to fp16) of a float32 tensor: its readers read the float32 tensor
    types = _elem_types(graph)
    producers = _producers(graph)
    for node in list(graph.node):
        if _cast_to(node) != FLOAT or node.output[0] in outputs:
            continue
        first = producers.get(node.input[0])
        if first is None or _cast_to(first) != FLOAT16 or types.get(first.input[0]) != FLOAT:
            continue
        _rename_inputs(graph, node.output[0], first.input[0])
        graph.node.remove(node)
    # 2. outputs that came out float16: a Cast to fp16 of a float32 tensor, which is the output now
    producers = _producers(graph)
    users = _consumers(graph)
    for out in graph.output:
        if out.type.tensor_type.elem_type != FLOAT16:
            continue
        cast = producers[out.name]
        if _cast_to(cast) != FLOAT16 or types.get(cast.input[0]) != FLOAT or users.get(out.name):
            raise Fp16Error(f'output {out.name}: unexpected float16 producer {cast.op_type} {cast.name}')
        source = cast.input[0]
        graph.node.remove(cast)
        if users.get(source, [cast]) == [cast]:
            _rename(graph, source, out.name)
        else:
            graph.node.append(_identity(source, out.name))
        out.type.tensor_type.elem_type = FLOAT
    # 3. the pre-pass Identities: gone where the output now comes through a Cast, or where the
    #    producer's tensor has no other reader (it is renamed to the output)
    for node in list(graph.node):
        if node.op_type != 'Identity' or not node.name.endswith(INNER + '_identity'):
            continue
        producers = _producers(graph)
        users = _consumers(graph)
        source, target = node.input[0], node.output[0]
        if target not in outputs:
            graph.node.remove(node)
            _rename_inputs(graph, target, source)
        elif source in producers and users.get(source) == [node] and source not in outputs:
            graph.node.remove(node)
            _rename(graph, source, target)
    # 4. nodes nothing reads any more (casts left dangling by 1.), then value_info of gone tensors
    changed = True
    while changed:
        changed = False
        users = _consumers(graph)
        for node in list(graph.node):
            if node.op_type == 'Cast' and not any(users.get(o) or o in outputs for o in node.output):
                graph.node.remove(node)
                changed = True
    live = {name for node in graph.node for name in list(node.input) + list(node.output)}
    for vi in list(graph.value_info):
        if vi.name not in live:
            graph.value_info.remove(vi)
    # initializers nothing reads (the converter may leave the originals of duplicated ones)
    for init in list(graph.initializer):
        if init.name not in live:
            graph.initializer.remove(init)


def _identity(src: str, dst: str):
    from onnx import helper
    return helper.make_node('Identity', [src], [dst], name=f'{dst}{INNER}_identity')


def _rename_inputs(graph, old: str, new: str) -> None:
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new


def convert_model(model, fp32_ops=FP32_OPS, fp32_node_names=None):
    """ModelProto fp32 -> ModelProto fp16 (float32 inputs and outputs). fp32_node_names: nodes kept
    fp32 by name (default fp32_nodes(model))."""
    import warnings
    from onnx import checker
    from onnxconverter_common import float16
    src_io = _io_signature(model)
    names = set(fp32_nodes(model) if fp32_node_names is None else fp32_node_names)
    ops = set(float16.DEFAULT_OP_BLOCK_LIST) | set(fp32_ops)
    model = type(model).FromString(model.SerializeToString())  # the caller's copy stays as it was
    blocked = _prepare(model, ops, names)
    with warnings.catch_warnings():
        # weights below 1e-7 in magnitude are clamped to ±1e-7 (a warning per tensor)
        warnings.filterwarnings('ignore', message='the float32 number')
        out = float16.convert_float_to_float16(model, keep_io_types=True, op_block_list=sorted(ops),
                                               node_block_list=sorted(blocked))
    _repair(out)
    float16.sort_topology(out.graph)
    if _io_signature(out) != src_io:
        raise Fp16Error(f'inputs/outputs changed: {_io_signature(out)} != {src_io}')
    checker.check_model(out)
    return out


def _io_signature(model) -> list:
    def sig(v):
        t = v.type.tensor_type
        return (v.name, t.elem_type, tuple(d.dim_param or d.dim_value for d in t.shape.dim))
    return [[sig(v) for v in model.graph.input], [sig(v) for v in model.graph.output]]


def convert_file(src: Path, dst: Path, **kwargs) -> dict:
    """Converts one model file; returns the names of the nodes kept fp32 by name (for the manifest)."""
    import onnx
    model = onnx.load(str(src))
    names = fp32_nodes(model)
    out = convert_model(model, fp32_node_names=names, **kwargs)
    onnx.save(out, str(dst))
    return {'nodes': names}


def weight_fractions(path: Path) -> dict:
    """Share of the model's float weights (by element count) stored as float16."""
    import onnx
    model = onnx.load(str(path))
    counts = {FLOAT: 0, FLOAT16: 0}
    for init in model.graph.initializer:
        if init.data_type in counts:
            counts[init.data_type] += int(np.prod(init.dims))
    total = sum(counts.values())
    return {'fp16': counts[FLOAT16] / total if total else 0.0, 'fp32_elements': counts[FLOAT]}


def _check_loads(path: Path) -> None:
    """The converted model loads in ONNX Runtime's CPU provider (which adds casts where it has no
    fp16 kernel)."""
    os.environ.setdefault('ORT_DISABLE_TELEMETRY', '1')
    import onnxruntime as ort
    try:
        ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    except Exception as e:  # onnxruntime raises its own exception types
        raise Fp16Error(f'{path.name}: ONNX Runtime cannot load the fp16 model: {e}') from e


def convert_set(src: Path, out: Path, clip: Path | None = None, mask: Path | None = None,
                size=(512, 288), check_frames: int = 12, log=print) -> dict:
    """Writes the fp16 set of the fp32 set `src` into `out`; returns its manifest. check_frames=0
    skips the deviation measurement (then the manifest has no fp16.deviation)."""
    manifest = json.loads((src / 'manifest.json').read_text())
    if manifest.get('engine') != 'matanyone2' or manifest.get('format') != 1:
        raise Fp16Error(f'{src}: not a MatAnyone2 model set')
    if 'int8' in manifest or manifest.get('precision', 'fp32') != 'fp32':
        raise Fp16Error(f'{src}: not an fp32 set (precision {manifest.get("precision", "int8")})')
    if out.resolve() == src.resolve():
        raise Fp16Error('--out must differ from --src')
    if check_frames:
        if clip is None:
            clip, default_mask = quantize.default_clip()
            mask = mask or default_mask
        for path, what in ((clip, 'clip'), (mask, 'mask')):
            if path is not None and not Path(path).is_file():
                raise Fp16Error(f'{path}: no such file (the {what})')
    width, height = size
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix='m2-fp16-') as tmp:
        tmp = Path(tmp)
        staged = tmp / 'set'
        staged.mkdir()
        kept: dict[str, list[str]] = {}
        for name, info in manifest['models'].items():
            t0 = time.perf_counter()
            kept[name] = convert_file(src / info['file'], staged / info['file'])['nodes']
            _check_loads(staged / info['file'])
            info['sha256'] = sha256_file(staged / info['file'])
            share = weight_fractions(staged / info['file'])['fp16']
            log(f'converted {name} in {time.perf_counter() - t0:.1f} s: {100 * share:.1f} % of the weights '
                f'fp16, {len(kept[name])} nodes kept fp32 by name')
        quantize.copy_notices(src, staged, manifest)
        manifest['precision'] = 'fp16'
        manifest['fp16'] = {
            'converter': CONVERTER, 'io': 'float32 (keep_io_types)',
            'fp32_ops': sorted(FP32_OPS), 'fp32_nodes': {k: v for k, v in kept.items() if v},
            'fp32_source': manifest.get('weights'),
        }
        quantize.write_manifest(staged, manifest)
        dev = None
        if check_frames:
            frames, seed = quantize.load_frames(clip, mask, width, height, check_frames, tmp)
            log(f'measuring the deviation from fp32 on {check_frames} frames of {clip.name} at {width}x{height}')
            dev = quantize.deviation(src, staged, frames, seed)
            if not all(np.isfinite(dev[k]) for k in ('mean_abs', 'p99_abs', 'max_abs')):
                raise Fp16Error('the fp16 set gives non-finite alpha (an activation beyond fp16\'s range '
                                '65504?); keep more of the network fp32')
            dev['clip'] = clip.name
            dev['size'] = [width, height]
        quantize.publish_set(staged, out, manifest, 'fp16', dev, started, log, digits=5)
    return manifest


def main(argv=None) -> int:
    os.environ.setdefault('ORT_DISABLE_TELEMETRY', '1')
    p = argparse.ArgumentParser(prog='python -m tools.matanyone2.fp16', description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--src', type=Path, required=True, help='fp32 set (folder with manifest.json)')
    p.add_argument('--out', type=Path, help='folder for the fp16 set (default: matanyone2-fp16 beside --src)')
    p.add_argument('--clip', type=Path, help='clip the deviation is measured on (default: test-sample2 or Megamind)')
    p.add_argument('--mask', type=Path, help="first-frame mask (default: the clip's, or the segmenter's)")
    p.add_argument('--size', default='512x288', help='working size WxH of the check (multiples of 16)')
    p.add_argument('--check-frames', type=int, default=12,
                   help='frames the deviation from fp32 is measured on (0: no measurement)')
    a = p.parse_args(argv)
    width, height = quantize.parse_size(p, a.size)
    if a.check_frames < 0:
        p.error('--check-frames must be >= 0')
    out = a.out or a.src.resolve().parent / 'matanyone2-fp16'
    try:
        convert_set(a.src, out, a.clip, a.mask, (width, height), a.check_frames)
    except (Fp16Error, quantize.QuantizeError, FileNotFoundError, subprocess.CalledProcessError) as e:
        print(f'fp16: {e}', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
