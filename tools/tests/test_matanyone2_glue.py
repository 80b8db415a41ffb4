"""tools/matanyone2/glue.py: the numpy + onnxruntime step schedule against upstream PyTorch.

The parity runs use the random-init set (seed 0) and the dancer clip at 512x288 (W x H): 30
consecutive frames after the seed step and 11 warm-up passes, so memory frames at t = 5, 10, 15,
20, 25 and a FIFO eviction at t = 25. Both sides read the same bytes.

Tolerances (per frame): max |d alpha| <= 2e-3, mean |d alpha| <= 1e-4. What is left after a
correct port is float32 noise (~1e-6) plus the odd top-k near-tie: the 30th and 31st best memory
tokens of a query lie within the rounding difference of the two encoders (ORT vs PyTorch, ~1e-4
relative on the key), so the two sides pick different ones; that moves alpha by up to ~1e-3 near
one stride-16 cell. An error in the schedule moves whole frames by >1e-2.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from tools.matanyone2 import glue  # noqa: E402

MAX_TOL, MEAN_TOL = 2e-3, 1e-4


# --------------------------------------------------------------------------------------------
# pieces against upstream / OpenCV

def test_ellipse_kernel_matches_opencv():
    cv2 = pytest.importorskip('cv2')
    for k in range(1, 22):
        want = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (k, k))
        assert np.array_equal(glue.ellipse_kernel(k), want), k


def test_seed_mask_matches_upstream_script():
    """prepare_seed_mask == upstream gen_dilate + gen_erosion (OpenCV) / 255."""
    pytest.importorskip('cv2')
    from tools.matanyone2 import network
    network.import_upstream()
    from matanyone2.utils.inference_utils import gen_dilate, gen_erosion
    rng = np.random.default_rng(5)
    masks = []
    for _ in range(3):
        m = np.zeros((70, 90), np.uint8)
        for _ in range(6):
            y, x = rng.integers(0, 70), rng.integers(0, 90)
            m[max(y - 8, 0):y + rng.integers(1, 12), max(x - 8, 0):x + rng.integers(1, 12)] = 255
        m[rng.random(m.shape) < 0.02] = 255           # specks, also at the borders
        m[rng.random(m.shape) < 0.02] = 128           # soft values
        masks.append(m)
    masks.append(np.full((40, 50), 255, np.uint8))   # all foreground: borders must not erode
    for m in masks:
        for d, e in ((10, 10), (10, 0), (0, 10), (3, 7), (0, 0)):
            up = m.astype(np.float32)
            if d > 0:
                up = gen_dilate(up, d, d)
            if e > 0:
                up = gen_erosion(up, e, e)
            want = (up / 255.0).astype(np.float32)
            got = glue.prepare_seed_mask(m, d, e)
            assert got.dtype == np.float32
            assert np.array_equal(got, want), (d, e)


def test_padding_matches_upstream():
    torch = pytest.importorskip('torch')
    from tools.matanyone2 import network
    network.import_upstream()
    from matanyone2.utils.tensor_utils import pad_divide_by, unpad
    for h, w in ((288, 512), (115, 201), (100, 100), (17, 31), (16, 33)):
        x = torch.rand(3, h, w)
        padded, pads = pad_divide_by(x, 16)
        top, bottom, left, right = glue.pad_amounts(h, w)
        assert pads == (left, right, top, bottom)
        ours = glue.pad_chw(x.numpy(), (top, bottom, left, right))
        assert np.array_equal(ours, padded.numpy())
        assert np.array_equal(glue.unpad_hw(ours[0], (top, bottom, left, right)),
                              unpad(padded, pads)[0].numpy())


def test_memory_read_matches_upstream():
    """similarity + top-k softmax + sparse readout == upstream get_similarity / do_softmax /
    dense value @ affinity, on well-separated random data."""
    torch = pytest.importorskip('torch')
    from tools.matanyone2 import network
    network.import_upstream()
    from matanyone2.model.utils.memory_utils import do_softmax, get_similarity
    rng = np.random.default_rng(1)
    ck, cv, n, hw = 64, 256, 3 * 40, 40
    mk = rng.normal(size=(ck, n)).astype(np.float32)
    ms = (1 + rng.random(n) ** 2).astype(np.float32)
    qk = rng.normal(size=(ck, hw)).astype(np.float32) * 0.3
    qe = (1 / (1 + np.exp(-rng.normal(size=(ck, hw))))).astype(np.float32)
    mv = rng.normal(size=(cv, n)).astype(np.float32)
    s_up = get_similarity(torch.from_numpy(mk)[None], torch.from_numpy(ms)[None, None],
                          torch.from_numpy(qk)[None], torch.from_numpy(qe)[None])[0]
    s = glue.similarity(mk, ms, qk, qe)
    np.testing.assert_allclose(s, s_up.numpy(), rtol=1e-5, atol=1e-4)
    s_up = s_up * 0.05  # keep upstream's un-shifted exp finite
    aff = do_softmax(s_up[None].clone(), top_k=30)[0]
    idx, w = glue.topk_softmax(s_up.numpy(), 30)
    assert idx.shape == (30, hw) and w.shape == (30, hw)
    dense = np.zeros((n, hw), np.float32)
    np.put_along_axis(dense, idx, w, axis=0)
    np.testing.assert_allclose(dense, aff.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(glue.sparse_readout(mv, idx, w), mv @ aff.numpy(), rtol=1e-4, atol=1e-5)
    # the max subtraction keeps it finite where upstream's plain exp() would give 0/0
    idx, w = glue.topk_softmax(s_up.numpy() - 500.0, 30)
    assert np.isfinite(w).all() and np.allclose(w.sum(0), 1.0, atol=1e-6)


def test_working_memory_fifo():
    mem = glue.WorkingMemory(max_mem_frames=5)
    for i in range(8):
        mem.add(np.full((2, 3), i, np.float32), np.full(3, i, np.float32), np.full((4, 3), i, np.float32))
    k, s, v = mem.concat()
    assert mem.frames == 5 and mem.evicted == 3
    assert k.shape == (2, 15) and s.shape == (15,) and v.shape == (4, 15)
    assert list(s[::3]) == [0, 4, 5, 6, 7]   # permanent first, then oldest -> newest


# --------------------------------------------------------------------------------------------
# parity with upstream

def _check(ref: np.ndarray, ours: np.ndarray):
    d = np.abs(ref.astype(np.float64) - ours.astype(np.float64)).reshape(ref.shape[0], -1)
    mx, mean = d.max(1), d.mean(1)
    report = ', '.join(f'{t}:{a:.1e}/{b:.1e}' for t, (a, b) in enumerate(zip(mx, mean)))
    print(f'\nper-frame max/mean |d alpha|: {report}')
    bad = [t for t in range(len(mx)) if mx[t] > MAX_TOL or mean[t] > MEAN_TOL]
    assert not bad, f'frames {bad} out of tolerance: ' + report
    return mx, mean


def test_reference_is_a_finite_matte(m2_reference):
    assert m2_reference.shape == (30, 288, 512) and m2_reference.dtype == np.float32
    assert np.isfinite(m2_reference).all()
    assert m2_reference.min() >= 0.0 and m2_reference.max() <= 1.0
    # a real matte, not a constant: both low and high alpha on every frame
    for a in m2_reference:
        assert (a < 0.4).any() and (a > 0.6).any()
        assert ((a > 0.0) & (a < 1.0)).mean() > 0.5


def test_glue_matches_upstream_30_frames(m2_models, m2_inputs, m2_reference):
    frames, mask = m2_inputs[:2]
    g = glue.MatAnyone2Glue(m2_models)
    t0 = time.perf_counter()
    ours = np.stack([g.start(frames[0], mask)] + [g.step(f) for f in frames[1:]])
    elapsed = time.perf_counter() - t0
    print(f'glue: {elapsed / g.passes:.3f} s per pass ({g.passes} passes)')
    assert g.passes == 1 + 11 + 29          # seed, 11 first-frame passes, frames 1..29
    assert g.t == 29 and g.last_mem_t == 25
    assert g.memory.frames == 5 and g.memory.evicted == 1   # t=5 dropped at t=25
    assert g.models.calls['memframe'] == 1 + 11 + 5
    assert g.models.calls['uncert'] == 29
    _check(m2_reference, ours)


def test_glue_matches_upstream_with_padding(m2_models, m2_inputs, m2_built):
    """A size that is no multiple of 16 (201 x 115 -> padded 208 x 128, uneven margins), a short
    warm-up (3) and different seed-mask radii, 11 frames (memory frames at 5 and 10)."""
    from tools.matanyone2 import reference
    frames, mask = m2_inputs[:2]
    ys, xs = np.nonzero(mask > 127)
    y0 = int(np.clip(ys.mean() - 57, 0, 288 - 115))
    x0 = int(np.clip(xs.mean() - 100, 0, 512 - 201))
    crop = np.ascontiguousarray(frames[:11, y0:y0 + 115, x0:x0 + 201])
    cmask = np.ascontiguousarray(mask[y0:y0 + 115, x0:x0 + 201])
    assert (cmask > 127).mean() > 0.05
    opts = dict(warmup=3, dilate=6, erode=4)
    ref = reference.run_reference(m2_built.net, crop, cmask, **opts)
    ours, g = reference.run_glue(m2_models, crop, cmask, **opts)
    assert g.pads == (6, 7, 3, 4)
    assert ours.shape == ref.shape == (11, 115, 201)
    assert np.isfinite(ref).all()
    _check(ref, ours)


def test_reference_cli_runs_both(m2_models, m2_inputs, tmp_path):
    """reference.py CLI: PyTorch and glue on 3 frames (1 warm-up pass), comparison printed."""
    from conftest import run_module
    _, _, frames_file, mask_file = m2_inputs
    out = tmp_path / 'ref.npy'
    r = run_module('tools.matanyone2.reference', '--random-init', '0', '--onnx-dir', str(m2_models),
                   '--frames-bgra', str(frames_file), '--width', '512', '--height', '288',
                   '--count', '3', '--warmup', '1', '--mask', str(mask_file), '--out', str(out),
                   '--onnx-out', str(tmp_path / 'glue.npy'))
    assert r.returncode == 0, r.stderr
    assert 'frame   2: max |d|' in r.stdout and 'overall: max' in r.stdout
    ref, ours = np.load(out), np.load(tmp_path / 'glue.npy')
    assert ref.shape == ours.shape == (3, 288, 512)
    assert out.with_suffix('.json').is_file()
    assert np.abs(ref - ours).max() <= MAX_TOL


def test_reference_runner_options(m2_built, m2_inputs):
    """run_reference's device/autocast/count/on_frame (what scripts/gpu-proof/upstream.py drives):
    count loops a short list of frames, on_frame sees every alpha with its time, the default is the
    plain fp32 run, autocast=dtype changes the numbers and upstream's safe_autocast switch is put back."""
    import torch
    from tools.matanyone2 import reference
    import matanyone2.utils.device as upstream_device
    frames, mask = m2_inputs[:2]
    small = [np.ascontiguousarray(f[::4, ::4]) for f in frames[:2]]   # 72 x 128
    smask = np.ascontiguousarray(mask[::4, ::4])
    opts = dict(warmup=1, dilate=3, erode=3)
    seen = []
    switch = upstream_device._autocast_enabled
    looped = reference.run_reference(m2_built.net, small, smask, device='cpu', count=5,
                                     on_frame=lambda i, a, s: seen.append((i, a.copy(), s)), **opts)
    assert upstream_device._autocast_enabled is switch
    plain = reference.run_reference(m2_built.net, np.stack([small[i % 2] for i in range(5)]), smask, **opts)
    assert looped.shape == plain.shape == (5, 72, 128)
    assert np.array_equal(looped, plain)
    assert [i for i, _, _ in seen] == list(range(5)) and all(s > 0 for _, _, s in seen)
    assert all(np.array_equal(a, looped[i]) for i, a, _ in seen)
    half = reference.run_reference(m2_built.net, small, smask, autocast=torch.bfloat16, count=3, **opts)
    assert upstream_device._autocast_enabled is switch
    assert np.isfinite(half).all() and not np.array_equal(half, plain[:3])


def test_gpu_proof_upstream_script_on_the_cpu(m2_inputs, tmp_path):
    """scripts/gpu-proof/upstream.py (run on the GPU machine by measure.py) on the CPU: its command
    line and its JSON, as measure.py reads them."""
    import json
    import subprocess
    import sys
    from PIL import Image
    from conftest import REPO
    frames, mask = m2_inputs[:2]
    folder = tmp_path / 'frames'
    folder.mkdir()
    for i in range(2):
        rgb = frames[i, ::4, ::4]
        bgra = np.concatenate([rgb[..., ::-1], np.full(rgb.shape[:2] + (1,), 255, np.uint8)], axis=-1)
        np.ascontiguousarray(bgra).tofile(folder / f'{i:03d}.bgra')
    Image.fromarray(np.ascontiguousarray(mask[::4, ::4])).save(tmp_path / 'mask.png')
    out = tmp_path / 'upstream.json'
    r = subprocess.run([sys.executable, str(REPO / 'scripts' / 'gpu-proof' / 'upstream.py'),
                        '--frames-dir', str(folder), '--width', '128', '--height', '72', '--count', '4',
                        '--skip', '1', '--mask', str(tmp_path / 'mask.png'), '--device', 'cpu',
                        '--modes', 'fp32,amp', '--json', str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert 'upstream fp32:' in r.stdout and 'upstream amp:' in r.stdout and 'failed' not in r.stderr
    info = json.loads(out.read_text())
    assert info['device'] == 'cpu' and info['working_size'] == [128, 72] and info['count'] == 4
    for mode in ('fp32', 'amp'):
        result = info['modes'][mode]
        assert result['frames_measured'] == 3 and result['seed_ms'] > 0
        assert 0 < result['median_ms'] <= result['p95_ms'] and result['fps'] > 0
