"""tools/matanyone2/quantize.py: the int8 (QDQ) set made from the exported fp32 set."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip('onnx')
pytest.importorskip('onnxruntime')

from conftest import run_module  # noqa: E402
from tools.matanyone2 import network, quantize  # noqa: E402


@pytest.fixture(scope='session')
def int8_set(m2_models, m2_inputs, tmp_path_factory) -> Path:
    """The int8 set scripts/test.sh made beside the fp32 one when it is current, else one made here
    from the test clip's frames (fewer frames: the tests check structure and bounds)."""
    stored = m2_models.parent / 'matanyone2-int8'
    if os.environ.get('MATANYONE_TEST_MODELS') and (stored / 'manifest.json').is_file():
        manifest = json.loads((stored / 'manifest.json').read_text())
        fp32 = json.loads((m2_models / 'manifest.json').read_text())
        if manifest.get('int8', {}).get('fp32_source') == fp32['weights'] and all(
                network.sha256_file(stored / info['file']) == info['sha256']
                for info in manifest['models'].values()):
            return stored
    out = tmp_path_factory.mktemp('int8') / 'matanyone2-int8'
    _, _, _, mask_file = m2_inputs
    quantize.quantize_set(m2_models, out, mask=mask_file, calib_frames=4, check_frames=3,
                          clip=quantize.default_clip()[0])
    return out


def test_manifest_describes_the_int8_set(int8_set, m2_models):
    manifest = json.loads((int8_set / 'manifest.json').read_text())
    fp32 = json.loads((m2_models / 'manifest.json').read_text())
    section = manifest['int8']
    assert section['format'] == 'QDQ'
    assert section['quantized'] == [m for m in fp32['models'] if m in quantize.QUANTIZED]
    assert section['fp32_source'] == fp32['weights']
    dev = section['deviation']
    assert dev['frames'] >= 1 and 0 <= dev['mean_abs'] <= dev['p99_abs'] <= dev['max_abs'] <= 1
    assert 0 < dev['iou_at_0.5'] <= 1
    for name, info in manifest['models'].items():
        assert network.sha256_file(int8_set / info['file']) == info['sha256']
        same = info['sha256'] == fp32['models'][name]['sha256']
        # quantized models are new files; the rest are the fp32 bytes
        assert same == (name not in section['quantized']), name
        assert info['inputs'] == fp32['models'][name]['inputs'], name


def test_quantized_models_carry_qdq_and_keep_the_key_heads_fp32(int8_set, m2_models):
    model = onnx.load(str(int8_set / 'encoder.onnx'))
    dequantized = {n.output[0] for n in model.graph.node if n.op_type == 'DequantizeLinear'}
    convs = [n for n in model.graph.node if n.op_type == 'Conv']
    quantized = [n for n in convs if n.input[0] in dequantized]
    kept = quantize.precision_critical_convs(m2_models / 'encoder.onnx')
    # the stem (on the image f1), the first convolutions of stages 2 and 3 (on f4, f8: conv1 and
    # the downsample each) and the 5 stride-16 heads on f16 (pix_feat, key projection, d/e/key)
    assert len(kept) == 10
    returned = {o.name for o in model.graph.output}
    by_name = {n.name: n for n in convs}
    assert sum(by_name[k].input[0] in returned for k in kept) == 7
    assert len(quantized) == len(convs) - len(kept) > 30
    assert not {n.name for n in quantized} & set(kept)
    onnx.checker.check_model(model)


def test_int8_set_runs_close_to_fp32_in_the_reference_glue(int8_set, m2_models, m2_inputs):
    from tools.matanyone2 import glue
    frames, mask = m2_inputs[:2]
    a = glue.MatAnyone2Glue(m2_models, warmup=1).run(frames[:3], mask)
    b = glue.MatAnyone2Glue(int8_set, warmup=1).run(frames[:3], mask)
    d = np.abs(a - b)
    assert d.max() > 1e-3          # really a different set
    assert d.mean() < 0.1          # random weights: ~0.03 measured; a broken calibration is ~0.3+


def test_refuses_bad_requests(int8_set, m2_models, tmp_path):
    with pytest.raises(quantize.QuantizeError, match='already an int8 set'):
        quantize.quantize_set(int8_set, tmp_path / 'x')
    with pytest.raises(quantize.QuantizeError, match='--out must differ'):
        quantize.quantize_set(m2_models, m2_models)
    with pytest.raises(quantize.QuantizeError, match='no such file'):
        quantize.quantize_set(m2_models, tmp_path / 'w', clip=tmp_path / 'none.mp4')
    with pytest.raises(quantize.QuantizeError, match='unknown model'):
        quantize.quantize_set(m2_models, tmp_path / 'y', models=['nope'])
    (tmp_path / 'seg').mkdir()
    (tmp_path / 'seg' / 'manifest.json').write_text(json.dumps({'format': 1, 'engine': 'segmenter', 'models': {}}))
    r = run_module('tools.matanyone2.quantize', '--src', str(tmp_path / 'seg'), '--out', str(tmp_path / 'z'))
    assert r.returncode == 1 and 'not a MatAnyone2 model set' in r.stderr


def test_segmenter_seeding_skips_frames_without_a_person(m2_inputs):
    """Without --mask calibration starts where the segmenter first sees a person, as seed=auto does."""
    if not (quantize.SEGMENTER / 'manifest.json').is_file():
        pytest.fail(f'no segmenter at {quantize.SEGMENTER}: scripts/setup.sh installs it')
    frames = m2_inputs[0]
    black = np.zeros_like(frames[:2])
    index, mask = quantize.first_person(np.concatenate([black, frames[:2]]))
    assert index == 2
    assert mask.shape == frames.shape[1:3] and 0.005 < (mask > 0).mean() < 0.9
    with pytest.raises(quantize.QuantizeError, match='no person in the first 2 frames'):
        quantize.first_person(black)


def test_spread_picks_evenly():
    assert quantize.spread(list(range(10)), 4) == [0, 3, 6, 9]
    assert quantize.spread([1, 2], 5) == [1, 2]


def _fake_set(folder: Path, **fields) -> Path:
    folder.mkdir(parents=True)
    manifest = {'format': 1, 'engine': 'matanyone2', 'weights': 'random-init seed 0', 'models': {}, **fields}
    (folder / 'manifest.json').write_text(json.dumps(manifest))
    return folder


def test_refuses_an_fp16_source_and_names_the_fp32_set(tmp_path):
    """Calibration and the deviation check measure against the source, so it must be fp32 (a
    manifest without "precision" is fp32). The clip does not exist: a source that got past the
    check would fail on it, not on its precision."""
    fp32 = _fake_set(tmp_path / 'matanyone2')
    fp16 = _fake_set(tmp_path / 'matanyone2-fp16', precision='fp16',
                     fp16={'fp32_source': 'random-init seed 0'})
    with pytest.raises(quantize.QuantizeError, match=r'not an fp32 set .*"fp16".*--src ' + re.escape(str(fp32.resolve()))):
        quantize.quantize_set(fp16, tmp_path / 'x', clip=tmp_path / 'none.mp4')
    # no fp32 set of the same weights beside it: the message names the weights
    other = _fake_set(tmp_path / 'elsewhere' / 'matanyone2-fp16', precision='fp16',
                      fp16={'fp32_source': 'checkpoint sha256 abc'})
    with pytest.raises(quantize.QuantizeError, match="fp32 set of the weights 'checkpoint sha256 abc'"):
        quantize.quantize_set(other, tmp_path / 'y', clip=tmp_path / 'none.mp4')
    for explicit in ('fp32', None):  # an fp32 source gets past the check (to the missing clip)
        fields = {'precision': explicit} if explicit else {}
        src = _fake_set(tmp_path / f'fp32-{explicit}', **fields)
        with pytest.raises(quantize.QuantizeError, match='no such file'):
            quantize.quantize_set(src, tmp_path / 'z', clip=tmp_path / 'none.mp4', models=[])
    r = run_module('tools.matanyone2.quantize', '--src', str(fp16), '--out', str(tmp_path / 'w'))
    assert r.returncode == 1 and 'not an fp32 set' in r.stderr and str(fp32.resolve()) in r.stderr
    assert not (tmp_path / 'w').exists()


def test_int8_set_keeps_the_licence_files(m2_models, m2_inputs, tmp_path):
    """A set made from licensed weights carries their LICENSE.txt (export.py writes it for a
    checkpoint) and any other notice file into the int8 set. Small size, one quantized model:
    the set's assembly is what is checked."""
    import shutil
    src = tmp_path / 'matanyone2'
    shutil.copytree(m2_models, src)
    manifest = json.loads((src / 'manifest.json').read_text())
    manifest['license_file'] = 'LICENSE.txt'
    (src / 'manifest.json').write_text(json.dumps(manifest))
    (src / 'LICENSE.txt').write_text('the weights\' licence\n')
    (src / 'NOTICE').write_text('a notice\n')
    (src / 'README.txt').write_text('not a licence\n')
    out = tmp_path / 'matanyone2-int8'
    quantize.quantize_set(src, out, clip=quantize.default_clip()[0], mask=m2_inputs[3], size=(128, 64),
                          calib_frames=2, check_frames=1, models=['maskencoder'], log=lambda _: None)
    assert (out / 'LICENSE.txt').read_text() == 'the weights\' licence\n'
    assert (out / 'NOTICE').read_text() == 'a notice\n'
    assert not (out / 'README.txt').exists()
    int8 = json.loads((out / 'manifest.json').read_text())
    assert int8['license_file'] == 'LICENSE.txt' and int8['int8']['quantized'] == ['maskencoder']


def test_copy_notices_takes_the_named_licence_file_too(tmp_path):
    src, dst = tmp_path / 'src', tmp_path / 'dst'
    src.mkdir()
    dst.mkdir()
    for name in ('terms.txt', 'licence.md', 'COPYING', 'encoder.onnx', 'manifest.json'):
        (src / name).write_text(name)
    assert quantize.copy_notices(src, dst, {'license_file': 'terms.txt'}) == ['COPYING', 'licence.md', 'terms.txt']
    assert sorted(p.name for p in dst.iterdir()) == ['COPYING', 'licence.md', 'terms.txt']
    assert quantize.copy_notices(src, tmp_path, {}) == ['COPYING', 'licence.md']
