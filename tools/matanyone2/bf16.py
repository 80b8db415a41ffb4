"""Bfloat16 MatAnyone2 model set for CPUs that compute bf16 (optional): the fp32 files, run by OpenVINO.

    .venv-openvino/bin/python -m tools.matanyone2.bf16 --src MODELS/matanyone2 \
        [--out MODELS/matanyone2-bf16] [--clip VIDEO] [--mask PNG] [--size 512x288] \
        [--skip-frames 8] [--check-frames 8] [--models readout,decoder,maskencoder]

The set's files are the fp32 set's, byte for byte (hard links where the file system allows). What
makes it bf16 is how the element runs them: the models listed in the manifest's `bf16.models` go to
ONNX Runtime's OpenVINO execution provider on the CPU with OpenVINO's inference precision hint bf16
(weights and activations of convolutions and matrix products in bfloat16, accumulation in fp32);
the others run on ONNX Runtime's CPU provider in fp32. Both come from one library, the
`onnxruntime-openvino` wheel's, which scripts/setup.sh installs into `.venv-openvino/` and, for the
element, into the data folder (`onnxruntime-openvino/`).

Kept fp32 by default, by measurement: the `encoder`, `uncert` and `memframe`. Deviation from fp32 on 8
held-out frames of test-sample2 at 512x288 (random-init weights, frames 8-15 seeded at frame 0), with
only the named models in bf16: encoder 0.0108 mean |Δα| (p99 0.040), decoder 0.0020, readout 0.0010,
maskencoder 0.0005; readout+decoder+maskencoder 0.0022 (p99 0.008); all four 0.0118. The encoder's
error is in its features, not its memory key head: with its key, shrinkage and selection taken from
fp32 it is unchanged (0.0115), with f16..f1 taken from fp32 it halves. So the encoder alone would
break the 0.01 target, and stays fp32 (--models adds it back, e.g. for trained weights, whose
activations are better scaled than random ones: measure with this tool). `uncert` and `memframe` cost
little (1 ms and 20 ms of ~430 ms) and write the state that every later frame reads. The
memory keys and the affinity, the top-k softmax and the readout's normalisation are the Swift glue's,
always fp32; OpenVINO itself keeps its normalisations, softmax and reductions in fp32 under the
hint. The deviation of the alpha from fp32 is measured here, on real frames after the first
--skip-frames (both sets run from the same first-frame mask; only the later, held-out frames count,
so the drift that bf16 memory accumulates is in the figure), and written to the manifest as
`bf16.deviation` (mean, p99 and max |Δα|, IoU at 0.5), as int8 and fp16 record theirs.

Needs a CPU that computes bf16 (AVX512_BF16 or AMX-BF16: `grep -o 'avx512_bf16\\|amx_bf16'
/proc/cpuinfo`): elsewhere OpenVINO would run the hint in fp32 and the measured deviation would say
nothing, so the tool stops with an error (the element refuses precision=bf16 there too).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from . import glue, media
from .quantize import QuantizeError, check_fp32_source, copy_notices, default_clip, load_frames, parse_size, \
    set_arguments, write_manifest

BF16_MODELS = ('readout', 'decoder', 'maskencoder')  # measured: see the module's text
HINT = 'bf16'  # OpenVINO's INFERENCE_PRECISION_HINT for the bf16 models
# Deviation targets (issue #20): above them the set is still written, and the tool says so.
MEAN_BOUND, P99_BOUND = 0.01, 0.05


class Bf16Error(RuntimeError):
    pass


def bf16_flags(flags) -> list[str]:
    """Of a CPU's flags, the bf16 arithmetic it offers: ['amx_bf16', 'avx512_bf16'], a subset, or []."""
    return [f for f in ('amx_bf16', 'avx512_bf16') if f in flags]


def cpu_bf16_features(cpuinfo: str) -> list[str]:
    """`bf16_flags` of /proc/cpuinfo text (the first processor's flags; all cores of one machine share them)."""
    for line in cpuinfo.splitlines():
        if line.startswith('flags'):
            return bf16_flags(set(line.partition(':')[2].split()))
    return []


def openvino_options(threads: int = 0) -> dict:
    """OpenVINO execution provider options for a bf16 model on the CPU (the element passes the same)."""
    options = {'device_type': 'CPU', 'load_config': json.dumps({'CPU': {'INFERENCE_PRECISION_HINT': HINT}})}
    if threads > 0:
        options['num_of_threads'] = str(threads)
    return options


def providers_for(bf16_models, threads: int = 0) -> dict:
    return {name: [('OpenVINOExecutionProvider', openvino_options(threads))] for name in bf16_models}


def check_runtime() -> str:
    """The onnxruntime this Python has must carry OpenVINO; returns its version."""
    os.environ.setdefault('ORT_DISABLE_TELEMETRY', '1')
    import onnxruntime as ort
    if 'OpenVINOExecutionProvider' not in ort.get_available_providers():
        raise Bf16Error(f'this Python\'s onnxruntime ({ort.__version__}) has no OpenVINO execution provider: run the '
                        'tool with .venv-openvino/bin/python (scripts/setup.sh makes it)')
    return ort.__version__


def stage_files(src: Path, staged: Path, manifest: dict) -> None:
    """The fp32 files into the staged set, hard-linked where possible (same bytes, no second copy)."""
    for info in manifest['models'].values():
        target = staged / info['file']
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src / info['file'], target)
        except OSError:
            shutil.copyfile(src / info['file'], target)


def make_set(src: Path, out: Path, clip: Path | None = None, mask: Path | None = None, size=(512, 288),
             skip_frames: int = 8, check_frames: int = 8, models=BF16_MODELS, cpuinfo: str | None = None,
             log=print) -> dict:
    manifest = json.loads((src / 'manifest.json').read_text())
    check_fp32_source(src, out, manifest, models, 'bf16', Bf16Error)
    if cpuinfo is None:
        cpuinfo = Path('/proc/cpuinfo').read_text()
    features = cpu_bf16_features(cpuinfo)
    if not features:
        raise Bf16Error('this CPU has neither AVX512_BF16 nor AMX-BF16: OpenVINO would run the bf16 hint in fp32 '
                        'and the deviation could not be measured; make the set on a CPU that computes bf16')
    version = check_runtime()
    if clip is None:
        clip, default_mask = default_clip()
        mask = mask or default_mask
    width, height = size
    started = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f'.{out.name}.', dir=out.parent))  # beside out: links and a rename
    try:
        stage_files(src, staged, manifest)
        copy_notices(src, staged, manifest)
        manifest['precision'] = 'bf16'
        manifest['bf16'] = {
            'models': [m for m in manifest['models'] if m in models],
            'fp32_models': [m for m in manifest['models'] if m not in models],
            'runtime': f'onnxruntime-openvino {version}, OpenVINOExecutionProvider on the CPU',
            'inference_precision_hint': HINT,
            'fp32_source': manifest.get('weights'),
        }
        write_manifest(staged, manifest)
        with tempfile.TemporaryDirectory(prefix='m2-bf16-') as tmp:
            frames, seed = load_frames(clip, mask, width, height, skip_frames + check_frames, Path(tmp))
        log(f'running fp32 and bf16 ({", ".join(manifest["bf16"]["models"])}) on {skip_frames + check_frames} frames '
            f'of {clip.name} at {width}x{height} ({"/".join(features)})')
        fp32_models = glue.Models(src)
        bf16_models = glue.Models(staged, providers=providers_for(models))
        reference = glue.MatAnyone2Glue(src, models=fp32_models).run(frames, seed)
        test = glue.MatAnyone2Glue(staged, models=bf16_models).run(frames, seed)
        dev = {'frames': int(check_frames), 'skipped': int(skip_frames), 'clip': clip.name, 'size': [width, height],
               'cpu_bf16': features, **media.alpha_deviation(test[skip_frames:], reference[skip_frames:])}
        manifest['bf16']['deviation'] = dev
        write_manifest(staged, manifest)
        for name in manifest['models']:
            if fp32_models.calls[name]:
                log(f'  {name:12s} fp32 {1000 * fp32_models.seconds[name] / fp32_models.calls[name]:7.1f} ms/call   '
                    f'{"bf16" if name in models else "fp32"} {1000 * bf16_models.seconds[name] / bf16_models.calls[name]:7.1f} ms/call')
        log(f'deviation from fp32 on {check_frames} held-out frames: mean |Δα| {dev["mean_abs"]:.4f}, '
            f'p99 {dev["p99_abs"]:.4f}, max {dev["max_abs"]:.4f}, IoU@0.5 {dev["iou_at_0.5"]:.4f}')
        if dev['mean_abs'] > MEAN_BOUND or dev['p99_abs'] > P99_BOUND:
            log(f'warning: above the targets (mean {MEAN_BOUND}, p99 {P99_BOUND}): keep more models fp32 (--models)')
        if out.exists():
            shutil.rmtree(out)
        staged.rename(out)
    finally:
        if staged.exists():
            shutil.rmtree(staged)
    log(f'wrote {out} ({time.perf_counter() - started:.0f} s in all)')
    return manifest


def main(argv=None) -> int:
    p = set_arguments(__doc__, 'bf16', 'clip for the deviation check')
    p.add_argument('--skip-frames', type=int, default=8, help='frames run but not counted (the int8 calibration frames)')
    p.add_argument('--check-frames', type=int, default=8, help='held-out frames the deviation is measured on')
    p.add_argument('--models', default=','.join(BF16_MODELS), help='models to run in bf16, comma-separated (the rest fp32)')
    a = p.parse_args(argv)
    width, height = parse_size(p, a.size)
    if a.skip_frames < 0 or a.check_frames < 1:
        p.error('--skip-frames must be >= 0 and --check-frames >= 1')
    out = a.out or a.src.resolve().parent / 'matanyone2-bf16'
    try:
        make_set(a.src, out, a.clip, a.mask, (width, height), a.skip_frames, a.check_frames,
                 [m for m in a.models.split(',') if m])
    except (Bf16Error, QuantizeError, FileNotFoundError) as e:
        print(f'bf16: {e}', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
