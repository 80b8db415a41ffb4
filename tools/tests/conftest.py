"""Shared fixtures of the Python tool tests (MatAnyone2 part: names start with m2_).

Environment (all optional; scripts/test.sh sets them):
  MATANYONE_TEST_MODELS  folder with model sets; the MatAnyone2 random-init set is taken from
                         $MATANYONE_TEST_MODELS/matanyone2 when its manifest is current, otherwise
                         one export per session is written there (or into a temporary folder).
  MATANYONE_TEST_DATA    test-sample2-512x288.bgra / test-sample2-mask-512x288.png and a stored
                         upstream reference (matanyone2-reference.npy + .json), reused when its
                         .json says it was made from the same weights, frames, mask and code.
  MATANYONE_SHARED       folder holding media/test-sample2.{mp4,png} (default: <repo>/../shared).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ.setdefault('ORT_DISABLE_TELEMETRY', '1')

M2_SEED = 0
M2_WIDTH, M2_HEIGHT, M2_COUNT = 512, 288, 30
M2_FRAMES_NAME = 'test-sample2-512x288.bgra'
M2_MASK_NAME = 'test-sample2-mask-512x288.png'
M2_REFERENCE_NAME = 'matanyone2-reference.npy'


def _shared() -> Path:
    return Path(os.environ.get('MATANYONE_SHARED', REPO.parent / 'shared'))


def _m2_set_is_current(path: Path) -> bool:
    """A stored set is reused only if it is the random-init set of M2_SEED, written by the current
    export/network code, with every file intact."""
    manifest = path / 'manifest.json'
    if not manifest.is_file():
        return False
    try:
        from tools.matanyone2 import export, network
        m = json.loads(manifest.read_text())
        if m.get('weights') != f'random-init seed {M2_SEED}':
            return False
        if m.get('exporter', {}).get('code_sha256') != export.exporter_info()['code_sha256']:
            return False
        return all(network.sha256_file(path / info['file']) == info['sha256']
                   for info in m['models'].values())
    except Exception:
        return False


@pytest.fixture(scope='session')
def m2_built():
    """The upstream PyTorch network with the random-init weights of seed M2_SEED."""
    pytest.importorskip('torch')
    pytest.importorskip('matanyone2')
    from tools.matanyone2 import network
    return network.build_network(random_init_seed=M2_SEED)


@pytest.fixture(scope='session')
def m2_models(tmp_path_factory, request) -> Path:
    """Folder of the exported random-init set (exported at most once per session)."""
    env = os.environ.get('MATANYONE_TEST_MODELS')
    if env:
        target = Path(env) / 'matanyone2'
        if _m2_set_is_current(target):
            return target
    else:
        target = tmp_path_factory.mktemp('m2models')
    built = request.getfixturevalue('m2_built')
    from tools.matanyone2 import export
    if target.exists():
        shutil.rmtree(target)
    export.export_all(target, random_init=M2_SEED, built=built, log=lambda s: print(s))
    return target


@pytest.fixture(scope='session')
def m2_inputs(tmp_path_factory):
    """(frames uint8 RGB [30,288,512,3], mask uint8 [288,512], frames file, mask file).

    The same bytes scripts/test.sh prepares: GStreamer-decoded and -scaled BGRA frames, the mask
    resized bilinearly with Pillow. Taken from $MATANYONE_TEST_DATA when present there."""
    from tools.matanyone2 import media
    data = os.environ.get('MATANYONE_TEST_DATA')
    frames_file = mask_file = None
    if data and (Path(data) / M2_FRAMES_NAME).is_file() and (Path(data) / M2_MASK_NAME).is_file():
        frames_file, mask_file = Path(data) / M2_FRAMES_NAME, Path(data) / M2_MASK_NAME
    else:
        media_dir = _shared() / 'media'
        video, png = media_dir / 'test-sample2.mp4', media_dir / 'test-sample2.png'
        if not video.is_file() or not png.is_file():
            pytest.skip(f'test media not found in {media_dir}')
        out = tmp_path_factory.mktemp('m2data')
        frames_file, mask_file = out / M2_FRAMES_NAME, out / M2_MASK_NAME
        if shutil.which('gst-launch-1.0'):
            media.decode_video_bgra(video, frames_file, M2_WIDTH, M2_HEIGHT)
        else:  # no GStreamer: OpenCV decode + area resize (both sides still get the same bytes)
            cv2 = pytest.importorskip('cv2')
            cap = cv2.VideoCapture(str(video))
            with open(frames_file, 'wb') as f:
                for _ in range(M2_COUNT):
                    ok, bgr = cap.read()
                    if not ok:
                        break
                    bgr = cv2.resize(bgr, (M2_WIDTH, M2_HEIGHT), interpolation=cv2.INTER_AREA)
                    f.write(cv2.cvtColor(bgr, cv2.COLOR_BGR2BGRA).tobytes())
        from PIL import Image
        Image.open(png).convert('L').resize((M2_WIDTH, M2_HEIGHT), Image.BILINEAR).save(mask_file)
    frames = media.read_bgra_frames(frames_file, M2_WIDTH, M2_HEIGHT, M2_COUNT)
    mask = media.read_mask(mask_file, M2_WIDTH, M2_HEIGHT)
    return frames, mask, frames_file, mask_file


@pytest.fixture(scope='session')
def m2_reference(m2_inputs, tmp_path_factory, request) -> np.ndarray:
    """Upstream PyTorch alphas float32 [30,288,512] for m2_inputs with the random-init weights:
    the stored $MATANYONE_TEST_DATA/matanyone2-reference.npy when its metadata matches, else
    computed here (one run per session)."""
    pytest.importorskip('torch')
    pytest.importorskip('matanyone2')
    from tools.matanyone2 import reference
    frames, mask = m2_inputs[:2]
    want = reference.metadata(f'random-init seed {M2_SEED}', frames, mask,
                              warmup=10, dilate=10, erode=10)
    data = os.environ.get('MATANYONE_TEST_DATA')
    if data:
        stored = Path(data) / M2_REFERENCE_NAME
        meta = stored.with_suffix('.json')
        if stored.is_file() and meta.is_file():
            try:
                if json.loads(meta.read_text()) == want:
                    alphas = np.load(stored)
                    if alphas.shape == frames.shape[:3]:
                        return alphas
            except (ValueError, OSError):
                pass
    built = request.getfixturevalue('m2_built')
    return reference.run_reference(built.net, frames, mask)


def run_module(module: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """python -m <module> args... in the repository root, output captured."""
    env = {**os.environ, 'PYTHONPATH': str(REPO)}
    return subprocess.run([sys.executable, '-m', module, *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)
