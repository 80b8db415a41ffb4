"""tools/matanyone2/export.py and network.py: the exported set and checkpoint validation."""

from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip('onnx')
ort = pytest.importorskip('onnxruntime')

from conftest import run_module  # noqa: E402
from tools.matanyone2 import network  # noqa: E402

NAMES = ['encoder', 'uncert', 'readout', 'decoder', 'maskencoder', 'memframe']


def _shape(value_info):
    return [d.dim_param if d.dim_param else d.dim_value
            for d in value_info.type.tensor_type.shape.dim]


def test_manifest_matches_files(m2_models):
    m = json.loads((m2_models / 'manifest.json').read_text())
    assert m['format'] == 1 and m['engine'] == 'matanyone2'
    assert m['weights'] == 'random-init seed 0'
    assert m['license'] == 'random weights (no licence restriction)'
    assert 'license_file' not in m
    assert m['opset'] == 18 and m['dynamic_size'] is True and m['size_multiple'] == 16
    assert m['config'] == {'key_dim': 64, 'value_dim': 256, 'sensory_dim': 256, 'num_queries': 16,
                           'top_k': 30, 'mem_every': 5, 'max_mem_frames': 5, 'stagger_updates': 5,
                           'warmup': 10, 'seed_dilate': 10, 'seed_erode': 10}
    assert sorted(m['models']) == sorted(NAMES)
    for name, info in m['models'].items():
        path = m2_models / info['file']
        assert path.is_file(), path
        assert network.sha256_file(path) == info['sha256'], name
        model = onnx.load(str(path))
        assert model.ir_version <= 10
        assert {o.domain or 'ai.onnx': o.version for o in model.opset_import}['ai.onnx'] == 18
        for kind, values in (('inputs', model.graph.input), ('outputs', model.graph.output)):
            got = [{'name': v.name, 'shape': _shape(v), 'dtype': 'float32'} for v in values]
            assert all(v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT for v in values)
            assert got == info[kind], (name, kind)
            # and the names/shapes are the documented ones
            assert [[n, s] for n, s in network.IO_SPEC[name][0 if kind == 'inputs' else 1]] == \
                [[g['name'], g['shape']] for g in got]
        sess = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
        assert [i.name for i in sess.get_inputs()] == [i['name'] for i in info['inputs']]
        assert [o.name for o in sess.get_outputs()] == [o['name'] for o in info['outputs']]


@pytest.mark.parametrize('height,width', [(96, 160), (288, 512), (512, 288)])
def test_dynamic_sizes(m2_models, height, width):
    """Every model runs at several sizes (multiples of 16) and returns the manifest's shapes."""
    m = json.loads((m2_models / 'manifest.json').read_text())
    for name in NAMES:
        info = m['models'][name]
        sess = ort.InferenceSession(str(m2_models / info['file']), providers=['CPUExecutionProvider'])
        feeds = {n: a.numpy() for (n, _), a in
                 zip(network.IO_SPEC[name][0], network.example_inputs(name, height, width))}
        outs = sess.run(None, feeds)
        for out, spec in zip(outs, info['outputs']):
            assert list(out.shape) == network.concrete_shape(spec['shape'], height, width), (name, spec)
            assert np.isfinite(out).all(), (name, spec['name'])


def test_onnx_matches_pytorch_submodules(m2_models, m2_built):
    """Each ONNX model against the PyTorch sub-network it was exported from (non-export size)."""
    from tools.matanyone2 import export
    for name in NAMES:
        err = export.verify_model(m2_built.net, name, m2_models / f'{name}.onnx', 160, 224)
        assert err < export.VERIFY_TOL, (name, err)


@pytest.mark.parametrize('height,width', [(288, 512), (96, 160)])
def test_decoder_matches_upstream_segment(m2_built, height, width):
    """The exported decoder (4-D, object dimension dropped) computes what upstream's segment()
    computes, alpha and sensory update, bit for bit up to float reassociation."""
    import torch
    args = network.example_inputs('decoder', height, width, seed=2)
    with torch.no_grad():
        ours = network.DecoderNet(m2_built.net)(*args)
        theirs = network.UpstreamDecoderNet(m2_built.net)(*args)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape
        assert float((a - b).abs().max()) <= 1e-5 * max(float(b.abs().max()), 1.0)
    # and the check can fail: a different sensory input changes the result
    args[5].add_(0.5)
    with torch.no_grad():
        moved = network.DecoderNet(m2_built.net)(*args)
    assert float((moved[1] - theirs[1]).abs().max()) > 1e-3


def test_random_init_is_deterministic_and_finite(m2_built):
    """Same seed -> same weights; BatchNorm statistics calibrated (not the 0/1 defaults)."""
    import torch
    again = network.build_network(random_init_seed=0)
    a, b = m2_built.net.state_dict(), again.net.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    bn = m2_built.net.pixel_encoder.bn1
    assert not torch.allclose(bn.running_var, torch.ones_like(bn.running_var))
    assert all(torch.isfinite(v).all() for v in a.values() if v.is_floating_point())


def _fake_resnet_state(path):
    import torch
    state = {'conv1.weight': torch.zeros(64, 3, 7, 7), 'bn1.weight': torch.ones(64),
             'bn1.bias': torch.zeros(64), 'fc.weight': torch.zeros(1000, 512),
             'fc.bias': torch.zeros(1000)}
    torch.save(state, path)


def test_foreign_checkpoint_is_rejected(tmp_path):
    pytest.importorskip('torch')
    ck = tmp_path / 'resnet18.pth'
    _fake_resnet_state(ck)
    r = run_module('tools.matanyone2.export', '--out', str(tmp_path / 'out'), '--checkpoint', str(ck),
                   timeout=300)
    assert r.returncode == 2, r.stderr
    assert 'is not a MatAnyone2 checkpoint' in r.stderr
    assert 'required keys missing' in r.stderr and 'by module: pixel_encoder' in r.stderr
    assert 'unexpected keys: ' in r.stderr and 'fc.weight' in r.stderr
    assert not (tmp_path / 'out' / 'manifest.json').exists()


def test_broken_checkpoints_are_rejected(tmp_path, m2_built):
    import torch
    garbage = tmp_path / 'garbage.pth'
    garbage.write_bytes(b'not a checkpoint at all')
    with pytest.raises(network.CheckpointError, match='not a loadable PyTorch checkpoint'):
        network.build_network(checkpoint=garbage)
    with pytest.raises(network.CheckpointError, match='no such file'):
        network.build_network(checkpoint=tmp_path / 'absent.pth')
    # right keys, one wrong shape
    state = {k: v.clone() for k, v in m2_built.net.state_dict().items()}
    state['key_proj.key_proj.weight'] = torch.zeros(32, 256, 3, 3)
    bad = tmp_path / 'bad-shape.pth'
    torch.save(state, bad)
    with pytest.raises(network.CheckpointError, match=r'shape mismatches: key_proj\.key_proj\.weight'):
        network.build_network(checkpoint=bad)
    # one key missing
    state = {k: v for k, v in m2_built.net.state_dict().items() if k != 'mask_decoder.pred_mat.bias'}
    missing = tmp_path / 'missing.pth'
    torch.save(state, missing)
    with pytest.raises(network.CheckpointError, match=r'1 of \d+ required keys missing: mask_decoder\.pred_mat\.bias'):
        network.build_network(checkpoint=missing)


def test_checkpoint_roundtrip_and_license(tmp_path, m2_built):
    """A genuine MatAnyone2 state dict loads (all weights identical) and its export carries the
    S-Lab licence."""
    import torch
    from tools.matanyone2 import export
    ck = tmp_path / 'matanyone2.pth'
    torch.save(m2_built.net.state_dict(), ck)
    built = network.build_network(checkpoint=ck)
    assert built.weights == f'checkpoint sha256 {network.sha256_file(ck)}'
    assert built.license == 'NTU S-Lab License 1.0 (non-commercial)'
    a, b = m2_built.net.state_dict(), built.net.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    m = export.export_all(tmp_path / 'set', built=built, only=['uncert'], log=lambda s: None)
    assert m['license'] == 'NTU S-Lab License 1.0 (non-commercial)'
    assert m['license_file'] == 'LICENSE.txt'
    text = (tmp_path / 'set' / 'LICENSE.txt').read_text()
    assert 'S-Lab License 1.0' in text and 'non-commercial' in text
    assert json.loads((tmp_path / 'set' / 'manifest.json').read_text()) == m
