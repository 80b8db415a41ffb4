"""tools/matanyone2/fp16.py: the fp16 set converted from the exported fp32 set."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip('onnx')
pytest.importorskip('onnxruntime')
pytest.importorskip('onnxconverter_common')

from conftest import REPO, _m2_set_is_current, run_module  # noqa: E402
from tools.matanyone2 import fp16, network, quantize  # noqa: E402

FLOAT, FLOAT16 = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16
# One start() of glue.py (seed + 1 warm-up pass) at 512x288, fp16 set against fp32, random-init
# weights. Measured on frames 0, 5, 10, 20, 30 and 39 of test-sample2: mean |Δα| 0.0011-0.0013,
# max 0.0074-0.0089 (12-frame runs from frames 0 and 12: mean 0.0011-0.0013, max 0.0085-0.0106).
# A conversion that lets the readout's attention mask flip measured mean 0.016.
MEAN_BOUND = 0.004
MAX_BOUND = 0.03


@pytest.fixture(scope='module')
def fp32_set(request) -> Path:
    """The random-init fp32 set: $MATANYONE_TEST_MODELS/matanyone2 (default build/test-models) when
    current, else the shared fixture's export."""
    stored = Path(os.environ.get('MATANYONE_TEST_MODELS') or REPO / 'build' / 'test-models') / 'matanyone2'
    if _m2_set_is_current(stored):
        return stored
    return request.getfixturevalue('m2_models')


@pytest.fixture(scope='module')
def frame_and_mask(request):
    """Frame 0 of test-sample2 at 512x288 (uint8 RGB) and its mask, from $MATANYONE_TEST_DATA
    (default build/test-data) or the shared fixture, and the mask's file."""
    from conftest import M2_FRAMES_NAME, M2_HEIGHT, M2_MASK_NAME, M2_WIDTH
    from tools.matanyone2 import media
    data = Path(os.environ.get('MATANYONE_TEST_DATA') or REPO / 'build' / 'test-data')
    if (data / M2_FRAMES_NAME).is_file() and (data / M2_MASK_NAME).is_file():
        frame = media.read_bgra_frames(data / M2_FRAMES_NAME, M2_WIDTH, M2_HEIGHT, 1)[0]
        return frame, media.read_mask(data / M2_MASK_NAME, M2_WIDTH, M2_HEIGHT), data / M2_MASK_NAME
    frames, mask, _, mask_file = request.getfixturevalue('m2_inputs')
    return frames[0], mask, mask_file


@pytest.fixture(scope='module')
def fp16_set(fp32_set, frame_and_mask, tmp_path_factory) -> Path:
    """The test set converted here, its deviation measured on one frame of the test clip."""
    try:
        clip = quantize.default_clip()[0]
    except quantize.QuantizeError as e:
        pytest.skip(str(e))
    out = tmp_path_factory.mktemp('fp16') / 'matanyone2-fp16'
    fp16.convert_set(fp32_set, out, clip=clip, mask=frame_and_mask[2], check_frames=1, log=lambda _: None)
    return out


def _models(path: Path) -> dict[str, Path]:
    manifest = json.loads((path / 'manifest.json').read_text())
    return {name: path / info['file'] for name, info in manifest['models'].items()}


def _types(model) -> dict[str, int]:
    """Element type of every tensor of the model (shape inference fills in the intermediates)."""
    graph = onnx.shape_inference.infer_shapes(model).graph
    types = {v.name: v.type.tensor_type.elem_type
             for v in list(graph.input) + list(graph.value_info) + list(graph.output)}
    types.update({i.name: i.data_type for i in graph.initializer})
    return types


def test_manifest_describes_the_fp16_set(fp16_set, fp32_set):
    manifest = json.loads((fp16_set / 'manifest.json').read_text())
    fp32 = json.loads((fp32_set / 'manifest.json').read_text())
    assert manifest['precision'] == 'fp16' and fp32.get('precision', 'fp32') == 'fp32'
    section = manifest['fp16']
    assert section['fp32_source'] == fp32['weights']
    assert section['fp32_ops'] == sorted(fp16.FP32_OPS)
    assert len(section['fp32_nodes']['encoder']) == 7  # the key head: 4 convolutions, Pow, Add, Sigmoid
    assert manifest['config'] == fp32['config']
    dev = section['deviation']
    assert dev['frames'] == 1 and 0 < dev['mean_abs'] <= dev['p99_abs'] <= dev['max_abs'] <= MAX_BOUND
    assert dev['mean_abs'] <= MEAN_BOUND and dev['iou_at_0.5'] > 0.98
    assert set(manifest['models']) == set(fp32['models'])
    for name, info in manifest['models'].items():
        assert info['file'] == fp32['models'][name]['file']
        assert network.sha256_file(fp16_set / info['file']) == info['sha256'] != fp32['models'][name]['sha256']
        assert info['inputs'] == fp32['models'][name]['inputs'], name
        assert info['outputs'] == fp32['models'][name]['outputs'], name


def test_every_model_keeps_float32_inputs_and_outputs(fp16_set, fp32_set):
    import onnxruntime as ort
    source = _models(fp32_set)
    for name, path in _models(fp16_set).items():
        a, b = onnx.load(str(source[name])), onnx.load(str(path))
        for want, got in ((a.graph.input, b.graph.input), (a.graph.output, b.graph.output)):
            assert [v.name for v in got] == [v.name for v in want], name
            for v, w in zip(got, want):
                assert v.type.tensor_type.elem_type == FLOAT, (name, v.name)
                assert v.type.tensor_type.shape == w.type.tensor_type.shape, (name, v.name)
        session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
        assert {i.type for i in session.get_inputs() + session.get_outputs()} == {'tensor(float)'}, name


def test_weights_are_mostly_fp16(fp16_set):
    total = {FLOAT: 0, FLOAT16: 0}
    for name, path in _models(fp16_set).items():
        model = onnx.load(str(path))
        counts = {FLOAT: 0, FLOAT16: 0}
        tensors = {FLOAT: 0, FLOAT16: 0}
        for init in model.graph.initializer:
            if init.data_type in counts:
                counts[init.data_type] += int(np.prod(init.dims))
                tensors[init.data_type] += 1
        share = counts[FLOAT16] / (counts[FLOAT] + counts[FLOAT16])
        # the encoder keeps its key head (~0.56 M of 9.35 M weights) fp32; the rest only scalars,
        # norm weights and the positional encodings' frequencies
        assert share > (0.9 if name == 'encoder' else 0.999), (name, share)
        assert tensors[FLOAT16] > tensors[FLOAT], name
        for kind in total:
            total[kind] += counts[kind]
        assert abs(fp16.weight_fractions(path)['fp16'] - share) < 1e-12
    assert total[FLOAT16] / sum(total.values()) > 0.98


def test_precision_critical_nodes_stay_fp32(fp16_set, fp32_set):
    """Every node of an FP32_OPS type and every node kept by name computes in float32 (all its
    float inputs and outputs are float32), and the bulk of the convolutions is fp16."""
    source = _models(fp32_set)
    kept_types = set()
    for name, path in _models(fp16_set).items():
        model = onnx.load(str(path))
        types = _types(model)
        by_name = set(fp16.fp32_nodes(onnx.load(str(source[name]))))
        checked = [n for n in model.graph.node if n.op_type in fp16.FP32_OPS or n.name in by_name]
        assert {n.name for n in model.graph.node} >= by_name, name
        for node in checked:
            floats = [types.get(t) for t in list(node.input) + list(node.output) if t]
            assert FLOAT16 not in floats, (name, node.op_type, node.name)
            kept_types.add(node.op_type)
        convs = [n for n in model.graph.node if n.op_type == 'Conv']
        half = [n for n in convs if types.get(n.input[1]) == FLOAT16]
        assert len(half) == len(convs) - (4 if name == 'encoder' else 0), name
    # what the test set actually contains of them
    assert {'LayerNormalization', 'Softmax', 'ReduceMean', 'ReduceSum', 'Einsum', 'Div', 'Log',
            'GreaterOrEqual', 'Pow', 'Sigmoid', 'Sin', 'Cos'} <= kept_types


def test_alpha_stays_close_to_fp32(fp16_set, fp32_set, frame_and_mask):
    from tools.matanyone2 import glue
    frame, mask, _ = frame_and_mask
    a = glue.MatAnyone2Glue(fp32_set, warmup=1).start(frame, mask)
    b = glue.MatAnyone2Glue(fp16_set, warmup=1).start(frame, mask)
    d = np.abs(a - b)
    assert d.max() > 1e-4          # really a different set
    assert d.mean() < MEAN_BOUND and d.max() < MAX_BOUND, (d.mean(), d.max())


def test_converter_repairs_on_a_small_graph():
    """An output also read inside the graph, an output written by a kept-fp32 node, an initializer
    shared by fp32 and fp16 nodes: all come out float32 and the values match."""
    import onnxruntime as ort
    from onnx import helper, numpy_helper
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), 'w')
    one = numpy_helper.from_array(np.array(0.9999999, np.float32), 'one')
    nodes = [helper.make_node('MatMul', ['x', 'w'], ['h'], name='mm'),
             helper.make_node('Softmax', ['h'], ['p'], name='sm', axis=-1),
             helper.make_node('Mul', ['p', 'one'], ['q'], name='scale_fp32'),
             helper.make_node('Add', ['h', 'one'], ['r'], name='shift_fp16')]
    value = [helper.make_tensor_value_info(n, FLOAT, [2, 8]) for n in ('x', 'h', 'q', 'r')]
    graph = helper.make_graph(nodes, 'g', value[:1], value[1:], [w, one])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 18)])
    model.ir_version = 8
    out = fp16.convert_model(model, fp32_node_names=['scale_fp32'])
    assert [(v.name, v.type.tensor_type.elem_type) for v in out.graph.output] == \
        [('h', FLOAT), ('q', FLOAT), ('r', FLOAT)]
    types = _types(out)
    assert types['w'] == FLOAT16 and types['one'] == FLOAT  # the fp16 Add reads its own copy
    x = rng.standard_normal((2, 8)).astype(np.float32)
    ref = ort.InferenceSession(model.SerializeToString(), providers=['CPUExecutionProvider']).run(None, {'x': x})
    got = ort.InferenceSession(out.SerializeToString(), providers=['CPUExecutionProvider']).run(None, {'x': x})
    for r, g in zip(ref, got):
        assert g.dtype == np.float32 and np.allclose(r, g, rtol=5e-3, atol=5e-3)


def test_refuses_bad_requests(fp16_set, fp32_set, tmp_path):
    with pytest.raises(fp16.Fp16Error, match='not an fp32 set'):
        fp16.convert_set(fp16_set, tmp_path / 'x', check_frames=0)
    with pytest.raises(fp16.Fp16Error, match='--out must differ'):
        fp16.convert_set(fp32_set, fp32_set, check_frames=0)
    with pytest.raises(fp16.Fp16Error, match='no such file'):
        fp16.convert_set(fp32_set, tmp_path / 'w', clip=tmp_path / 'none.mp4')
    (tmp_path / 'seg').mkdir()
    (tmp_path / 'seg' / 'manifest.json').write_text(json.dumps({'format': 1, 'engine': 'segmenter', 'models': {}}))
    r = run_module('tools.matanyone2.fp16', '--src', str(tmp_path / 'seg'), '--out', str(tmp_path / 'z'))
    assert r.returncode == 1 and 'not a MatAnyone2 model set' in r.stderr
