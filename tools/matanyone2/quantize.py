"""Int8 (QDQ) MatAnyone2 model set with static calibration on real frames (optional, CPU).

    python -m tools.matanyone2.quantize --src MODELS/matanyone2 [--out MODELS/matanyone2-int8] \
        [--clip VIDEO] [--mask PNG] [--size 512x288] [--calib-frames 12] [--check-frames 12]

Calibration records what each model actually receives: the fp32 set runs through glue.py (the
reference glue) on the first --calib-frames frames of a real clip, seeded from --mask (or, with no
mask, from the selfie segmenter's first-frame matte), and every model call's inputs are kept.
ONNX Runtime's static quantizer then inserts QuantizeLinear/DequantizeLinear pairs around the
convolutions (weights int8 per output channel, activations uint8 per tensor, min/max ranges).
The small models (uncert, memframe) and the attention inside readout stay fp32: they cost little and
carry the memory state.

--src must be the fp32 set: an fp16 set (manifest "precision": "fp16") is refused, since calibration
and the deviation check are measured against the source. The result is a complete model set (manifest,
same file names, the source's LICENSE/NOTICE files), by default `matanyone2-int8/` beside
the fp32 set, which the element runs with `precision=int8`. Its deviation from fp32 is measured on the next --check-frames frames (not used for
calibration) and written to the manifest as `int8.deviation`; fp32 stays the default.

Why reduce_range: this CPU class (AVX2 without VNNI) multiplies u8 x s8 pairs with 16-bit
saturation; 7-bit weights avoid that overflow.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from . import glue, media
from .media import sha256_file

QUANTIZED = ('encoder', 'readout', 'maskencoder')
SAMPLES_PER_MODEL = 12  # calls kept per model (spread over the calibration frames)
MIN_SEED_COVERAGE = 0.005  # as the element: the share of person pixels that seeds
PERSON_SEARCH_FRAMES = 150  # without --mask, how far into the clip to look for a person
NOTICE_PREFIXES = ('LICENSE', 'LICENCE', 'NOTICE', 'COPYING')  # files a derived set copies (copy_notices)
ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get('MATANYONE_SHARED', ROOT.parent / 'shared'))
DEMO_CLIP = Path('/usr/share/doc/opencv-doc/examples/data/Megamind.avi')
SEGMENTER = Path(os.environ.get('XDG_DATA_HOME', Path.home() / '.local' / 'share')) / \
    'gst-matanyone' / 'models' / 'segmenter'


class QuantizeError(RuntimeError):
    pass


class RecordingModels(glue.Models):
    """glue.Models that keeps a copy of every call's inputs, per model."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.recorded: dict[str, list[dict[str, np.ndarray]]] = {}

    def run(self, name, **inputs):
        self.recorded.setdefault(name, []).append({k: np.array(v, copy=True) for k, v in inputs.items()})
        return super().run(name, **inputs)


def spread(items: list, count: int) -> list:
    """`count` items evenly spaced over the list (all of them if there are fewer)."""
    if len(items) <= count:
        return list(items)
    return [items[int(i)] for i in np.linspace(0, len(items) - 1, count).round()]


def default_clip() -> tuple[Path, Path | None]:
    clip, mask = SHARED / 'media' / 'test-sample2.mp4', SHARED / 'media' / 'test-sample2.png'
    if clip.is_file() and mask.is_file():
        return clip, mask
    if DEMO_CLIP.is_file():
        return DEMO_CLIP, None
    raise QuantizeError('no calibration clip: give --clip (and --mask), or install opencv-doc '
                        '(scripts/setup.sh does) for its Megamind.avi')


def first_person(frames: np.ndarray) -> tuple[int, np.ndarray]:
    """Index of the first frame where the selfie segmenter finds a person, and its thresholded
    matte: what the element's seed=auto does (clips often open on black or titles)."""
    from tools.selfie.validate import Segmenter
    if not (SEGMENTER / 'manifest.json').is_file():
        raise QuantizeError(f'no --mask given and no segmenter at {SEGMENTER} to make one '
                            '(run scripts/setup.sh)')
    segmenter = Segmenter(SEGMENTER)
    for index, frame in enumerate(frames):
        mask = (segmenter.probability(frame) > 0.5).astype(np.uint8) * 255
        if mask.mean() >= 255 * MIN_SEED_COVERAGE:
            return index, mask
    raise QuantizeError(f'the segmenter finds no person in the first {len(frames)} frames; give --mask')


def load_frames(clip: Path, mask_path: Path | None, width: int, height: int, count: int,
                work: Path) -> tuple[np.ndarray, np.ndarray]:
    """`count` frames of the clip and the mask that seeds the first of them: from the clip's start
    with --mask, else from the first frame the segmenter finds a person in."""
    search = 0 if mask_path is not None else PERSON_SEARCH_FRAMES
    raw = media.decode_video_bgra(clip, work / 'frames.bgra', width, height, count=count + search, timeout=600)
    available = raw.stat().st_size // (width * height * 4)
    if available < count:
        raise QuantizeError(f'{clip}: {available} frames, {count} needed')
    frames = media.read_bgra_frames(raw, width, height, available)
    if mask_path is not None:
        return frames[:count], media.resize_mask_nearest(media.read_mask(mask_path), width, height)
    start, mask = first_person(frames[:available - count + 1])
    return frames[start:start + count], mask


def calibrate(src: Path, frames: np.ndarray, mask: np.ndarray) -> tuple[dict[str, list[dict]], np.ndarray]:
    """Each model's recorded inputs (spread over the run) and the fp32 alphas of the frames."""
    models = RecordingModels(src)
    alphas = glue.MatAnyone2Glue(src, models=models).run(frames, mask)
    feeds = {name: spread(calls, SAMPLES_PER_MODEL) for name, calls in models.recorded.items()}
    return feeds, alphas


class _Reader:
    """onnxruntime.quantization CalibrationDataReader over recorded feeds."""

    def __init__(self, feeds: list[dict]):
        self.feeds = iter(feeds)

    def get_next(self):
        return next(self.feeds, None)


def precision_critical_convs(path: Path) -> list[str]:
    """Convolutions left in fp32: those reading a tensor the model also returns (on the encoder:
    the stem on the image, the first convolutions of stages 2 and 3 on f4 and f8, the pix_feat and
    key heads on f16) and the convolutions fed by those heads. The key, shrinkage and selection
    feed the memory affinity, whose top-k softmax magnifies small errors. They cost ~1.5 of the
    encoder's 10 GMAC; measured on test-sample2, leaving them fp32 cuts the alpha error by a quarter."""
    import onnx
    model = onnx.load(str(path), load_external_data=False)
    returned = {o.name for o in model.graph.output}
    keep: list[str] = []
    fp32_tensors: set[str] = set()
    for node in model.graph.node:
        if node.op_type == 'Conv' and (node.input[0] in returned or node.input[0] in fp32_tensors):
            keep.append(node.name)
            fp32_tensors.update(node.output)
    return keep


def quantize_model(src: Path, dst: Path, feeds: list[dict]) -> None:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    quantize_static(
        str(src), str(dst), _Reader(feeds),
        quant_format=QuantFormat.QDQ,
        op_types_to_quantize=['Conv'],
        nodes_to_exclude=precision_critical_convs(src),
        per_channel=True,
        reduce_range=True,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        calibrate_method=CalibrationMethod.MinMax)


def deviation(fp32: Path, int8: Path, frames: np.ndarray, mask: np.ndarray) -> dict:
    """Alpha of the int8 set against fp32 on the same frames (both seeded from the same mask)."""
    a = glue.MatAnyone2Glue(fp32).run(frames, mask)
    b = glue.MatAnyone2Glue(int8).run(frames, mask)
    return {'frames': int(len(frames)), **media.alpha_deviation(b, a)}


# ============================================================================================
# what quantize.py and fp16.py share: writing out a derived set

def copy_notices(src: Path, staged: Path, manifest: dict) -> list[str]:
    """Copies the source set's licence and notice files into the staged set (a derived set stays
    under the licence of the weights it was made from): the file the manifest names as
    "license_file" and every file whose name starts with LICENSE, LICENCE, NOTICE or COPYING
    (any case). Returns their names."""
    names = {p.name for p in src.iterdir() if p.is_file() and p.name.upper().startswith(NOTICE_PREFIXES)}
    if manifest.get('license_file') and (src / manifest['license_file']).is_file():
        names.add(manifest['license_file'])
    for name in sorted(names):
        (staged / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / name, staged / name)
    return sorted(names)


def fp32_source_hint(src: Path, manifest: dict, precision: str) -> str:
    """Where the fp32 set a derived set was made from is likely to be: `matanyone2` beside it when
    that folder holds the fp32 set of the same weights, else the weights' name."""
    weights = (manifest.get(precision) or {}).get('fp32_source') or manifest.get('weights')
    candidate = src.resolve().parent / 'matanyone2'
    try:
        fp32 = json.loads((candidate / 'manifest.json').read_text())
        if fp32.get('precision', 'fp32') == 'fp32' and 'int8' not in fp32 and fp32.get('weights') == weights:
            return f'--src {candidate}'
    except (OSError, ValueError):
        pass
    return f"the fp32 set of the weights '{weights}' it was made from"


def check_fp32_source(src: Path, out: Path, manifest: dict, models, made: str, error=QuantizeError) -> None:
    """A derived set (`made`: int8, fp16, bf16) is made from an fp32 MatAnyone2 set that has `models`,
    into another folder: its calibration and deviation are measured against that set."""
    if manifest.get('engine') != 'matanyone2' or manifest.get('format') != 1:
        raise error(f'{src}: not a MatAnyone2 model set')
    precision = manifest.get('precision', 'int8' if 'int8' in manifest else 'fp32')
    if precision != 'fp32':
        raise error(f'{src}: not an fp32 set (its manifest says "precision": "{precision}"); {made} is '
                    f'made from the fp32 set: {fp32_source_hint(src, manifest, precision)}')
    unknown = set(models) - set(manifest['models'])
    if unknown:
        raise error(f'unknown model(s) {sorted(unknown)}; the set has {sorted(manifest["models"])}')
    if out.resolve() == src.resolve():
        raise error('--out must differ from --src')


def write_manifest(folder: Path, manifest: dict) -> None:
    (folder / 'manifest.json').write_text(json.dumps(manifest, indent=2) + '\n')


def publish_set(staged: Path, out: Path, manifest: dict, key: str, dev: dict | None, started: float,
                log=print, frames_label: str = 'frames', digits: int = 4) -> None:
    """The end of making a derived set (int8, fp16) in the folder `staged`: its deviation from fp32
    (None: not measured) goes into manifest[key]['deviation'] and the staged manifest and is logged;
    then `out` is replaced by a copy of the staged set."""
    if dev is not None:
        manifest[key]['deviation'] = dev
        write_manifest(staged, manifest)
        log(f'deviation from fp32 on {dev["frames"]} {frames_label}: mean |Δα| {dev["mean_abs"]:.{digits}f}, '
            f'p99 {dev["p99_abs"]:.{digits}f}, max {dev["max_abs"]:.{digits}f}, IoU@0.5 {dev["iou_at_0.5"]:.4f}')
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(staged, out)
    log(f'wrote {out} ({time.perf_counter() - started:.0f} s in all)')


def set_arguments(description: str, made: str, clip: str) -> argparse.ArgumentParser:
    """The command line a derived set's tool (int8, bf16) starts from: the fp32 set, the output folder,
    the clip and mask it measures on, and the working size."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--src', type=Path, required=True, help='fp32 set (folder with manifest.json)')
    p.add_argument('--out', type=Path, help=f'folder for the {made} set (default: matanyone2-{made} beside --src)')
    p.add_argument('--clip', type=Path, help=f'{clip} (default: test-sample2 or Megamind)')
    p.add_argument('--mask', type=Path, help="first-frame mask (default: the clip's, or the segmenter's)")
    p.add_argument('--size', default='512x288', help='working size WxH (multiples of 16)')
    return p


def parse_size(parser: argparse.ArgumentParser, text: str) -> tuple[int, int]:
    """--size WxH -> (width, height); a parser error otherwise."""
    try:
        width, height = (int(v) for v in text.lower().split('x'))
    except ValueError:
        parser.error(f'--size {text!r}: expected WxH, e.g. 512x288')
    return width, height


def quantize_set(src: Path, out: Path, clip: Path | None = None, mask: Path | None = None,
                 size=(512, 288), calib_frames: int = 12, check_frames: int = 12,
                 models=QUANTIZED, log=print) -> dict:
    manifest = json.loads((src / 'manifest.json').read_text())
    if 'int8' in manifest:
        raise QuantizeError(f'{src}: already an int8 set')
    check_fp32_source(src, out, manifest, models, 'int8')
    if clip is None:
        clip, default_mask = default_clip()
        mask = mask or default_mask
    for path, what in ((clip, 'calibration clip'), (mask, 'mask')):
        if path is not None and not Path(path).is_file():
            raise QuantizeError(f'{path}: no such file (the {what})')
    width, height = size
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix='m2-quant-') as tmp:
        tmp = Path(tmp)
        frames, seed = load_frames(clip, mask, width, height, calib_frames + check_frames, tmp)
        log(f'calibrating on {calib_frames} frames of {clip.name} at {width}x{height}')
        feeds, calib_alphas = calibrate(src, frames[:calib_frames], seed)
        staged = tmp / 'set'
        staged.mkdir()
        for name, info in manifest['models'].items():
            if name in models:
                t0 = time.perf_counter()
                quantize_model(src / info['file'], staged / info['file'], feeds[name])
                log(f'quantized {name} ({len(feeds[name])} calibration calls) in '
                    f'{time.perf_counter() - t0:.0f} s')
            else:
                shutil.copyfile(src / info['file'], staged / info['file'])
            info['sha256'] = sha256_file(staged / info['file'])
        copy_notices(src, staged, manifest)
        manifest['int8'] = {
            'format': 'QDQ', 'quantized': [m for m in manifest['models'] if m in models], 'ops': ['Conv'],
            'weights': 'int8 per channel (reduce_range)', 'activations': 'uint8 per tensor, MinMax',
            'calibration': {'clip': clip.name, 'frames': calib_frames, 'size': [width, height],
                            'mask': mask.name if mask else 'selfie segmenter, first frame with a person'},
            'fp32_source': manifest.get('weights'),
        }
        write_manifest(staged, manifest)
        # the check uses the next frames, seeded from the fp32 matte of the last calibration frame
        check = frames[calib_frames:]
        seed_check = (calib_alphas[-1] > 0.5).astype(np.uint8) * 255
        dev = deviation(src, staged, check, seed_check)
        publish_set(staged, out, manifest, 'int8', dev, started, log, frames_label='held-out frames')
    return manifest


def main(argv=None) -> int:
    os.environ.setdefault('ORT_DISABLE_TELEMETRY', '1')
    # onnxruntime.quantization logs advice (pre-processing, per-node notes) on the root logger
    logging.basicConfig(level=logging.ERROR)
    p = set_arguments(__doc__, 'int8', 'calibration video')
    p.add_argument('--calib-frames', type=int, default=12)
    p.add_argument('--check-frames', type=int, default=12)
    p.add_argument('--models', default=','.join(QUANTIZED),
                   help='models to quantize, comma-separated (the rest stay fp32)')
    a = p.parse_args(argv)
    width, height = parse_size(p, a.size)
    if a.calib_frames < 2 or a.check_frames < 1:
        p.error('--calib-frames must be >= 2 and --check-frames >= 1')
    out = a.out or a.src.resolve().parent / 'matanyone2-int8'
    try:
        quantize_set(a.src, out, a.clip, a.mask, (width, height), a.calib_frames, a.check_frames,
                     [m for m in a.models.split(',') if m])
    except (QuantizeError, FileNotFoundError, subprocess.CalledProcessError) as e:
        print(f'quantize: {e}', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
