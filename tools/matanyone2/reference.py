"""Run MatAnyone2 on raw BGRA frames + a first-frame mask; write per-frame alphas (.npy).

Upstream PyTorch InferenceCore (fp32, autocast off, CPU), same weights as an exported set:
    python -m tools.matanyone2.reference --random-init 0 \
        --frames-bgra frames.bgra --width 512 --height 288 --count 30 --mask mask.png --out ref.npy

The numpy + onnxruntime glue (glue.py) on an exported set:
    python -m tools.matanyone2.reference --onnx-dir models/ \
        --frames-bgra frames.bgra --width 512 --height 288 --count 30 --mask mask.png --out glue.npy

Both at once (prints per-frame max/mean |difference|):
    python -m tools.matanyone2.reference --random-init 0 --onnx-dir models/ ... \
        --out ref.npy --onnx-out glue.npy

Frames: the raw file of `... ! video/x-raw,format=BGRA,width=W,height=H ! filesink` (media.py).
Mask: a PNG at W x H, read as upstream does (convert('L')); upstream's script dilates then erodes
it (10 px ellipses) before the seed step; --dilate/--erode change that (0 = off).
Output: float32 [T, H, W] alphas; frame 0's alpha is the last of the warm-up passes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import numpy as np

from . import media


def run_reference(net, frames, mask: np.ndarray, *, warmup: int = 10, dilate: int = 10, erode: int = 10,
                  log=None, device: str = 'cpu', autocast=None, count: int | None = None,
                  on_frame=None) -> np.ndarray:
    """Upstream InferenceCore, driven exactly like upstream's inference_matanyone2.py main():
    seed step with the (dilated, eroded) mask, warmup + 1 first-frame passes on frame 0, then one
    step per frame. frames uint8 RGB [T,H,W,3] (or a sequence of [H,W,3]), mask uint8 [H,W] ->
    alphas float32 [count,H,W].

    device: where InferenceCore runs (a torch device: 'cpu', 'cuda', 'cuda:1'; it moves the network
    there). autocast: None runs fp32 with autocast off, upstream's
    safe_autocast included (it would switch autocast on for CUDA in process_video); a dtype
    (torch.float16) runs every step under torch.autocast(<device type>, dtype), as upstream's
    process_video does on a CUDA device. count: steps to run (default len(frames)); step i reads
    frames[i % len(frames)], so a few frames can loop. on_frame(i, alpha, seconds), if given, is
    called after each frame with its alpha (float32 [H,W], on the host) and the seconds from the
    uint8 frame on the host to the alpha back on the host (upload, normalisation, the step(s), the
    download; frame 0 includes the seed step and the warm-up passes)."""
    import torch
    from . import network as N
    N.import_upstream()
    from matanyone2.inference.inference_core import InferenceCore
    from matanyone2.utils.inference_utils import gen_dilate, gen_erosion

    n = len(frames)
    count = n if count is None else count
    N.reset_positional_caches(net)
    core = InferenceCore(net, cfg=net.cfg, device=device)
    m = mask
    if dilate > 0:
        m = gen_dilate(m, dilate, dilate)
    if erode > 0:
        m = gen_erosion(m, erode, erode)
    mask_t = torch.from_numpy(np.asarray(m, dtype=np.float32)).to(device)
    out = np.empty((count, *frames[0].shape[:2]), np.float32)
    t0 = time.perf_counter()
    with torch.inference_mode(), _autocast(torch.device(device).type, autocast):
        for ti in range(count):
            start = time.perf_counter()
            frame = torch.from_numpy(frames[ti % n]).to(device)
            image = frame.permute(2, 0, 1).float() / 255.
            if ti == 0:
                core.step(image, mask_t, objects=[1])
                for _ in range(warmup + 1):
                    prob = core.step(image, first_frame_pred=True)
            else:
                prob = core.step(image)
            alpha = core.output_prob_to_mask(prob).float().cpu().numpy()
            seconds = time.perf_counter() - start  # before the copy into `out`
            out[ti] = alpha
            if on_frame:
                on_frame(ti, alpha, seconds)
            if log:
                log(f'reference frame {ti}: {time.perf_counter() - t0:.1f} s')
    core.image_feature_store.no_warning = True
    N.reset_positional_caches(net)
    return out


@contextlib.contextmanager
def _autocast(device_type: str, dtype):
    """torch.autocast(device_type, dtype) for a dtype; for None autocast off, upstream's
    safe_autocast included (its switch is read at call time, and on for CUDA)."""
    import torch
    import matanyone2.utils.device as upstream_device
    if dtype is not None:
        with torch.amp.autocast(device_type, dtype=dtype):
            yield
        return
    original = upstream_device._autocast_enabled
    upstream_device._autocast_enabled = lambda _device, _enabled: False
    try:
        with torch.amp.autocast(device_type, enabled=False):
            yield
    finally:
        upstream_device._autocast_enabled = original


def run_glue(model_dir, frames: np.ndarray, mask: np.ndarray, *, warmup: int = 10,
             dilate: int = 10, erode: int = 10, log=None):
    """glue.py on an exported set -> (alphas float32 [T,H,W], MatAnyone2Glue instance)."""
    from .glue import MatAnyone2Glue
    g = MatAnyone2Glue(model_dir, warmup=warmup, seed_dilate=dilate, seed_erode=erode)
    out = np.empty(frames.shape[:3], np.float32)
    t0 = time.perf_counter()
    for ti in range(frames.shape[0]):
        out[ti] = g.start(frames[0], mask) if ti == 0 else g.step(frames[ti])
        if log:
            log(f'glue frame {ti}: {time.perf_counter() - t0:.1f} s')
    return out, g


def metadata(weights: str, frames: np.ndarray, mask: np.ndarray, *, warmup: int, dilate: int,
             erode: int) -> dict:
    """What a reference run depends on; written beside its .npy as <name>.json so that a later
    run (e.g. the test suite) can tell whether a stored reference still applies."""
    import hashlib
    import torch
    here = Path(__file__).resolve().parent
    code = hashlib.sha256()
    for name in ('network.py', 'reference.py'):
        code.update((here / name).read_bytes())
    try:
        from importlib.metadata import version
        upstream = version('matanyone2-runtime')
    except Exception:  # pragma: no cover - not installed from a wheel
        upstream = 'unknown'
    return {
        'weights': weights,
        'frames_sha256': hashlib.sha256(np.ascontiguousarray(frames).tobytes()).hexdigest(),
        'mask_sha256': hashlib.sha256(np.ascontiguousarray(mask).tobytes()).hexdigest(),
        'count': int(frames.shape[0]), 'height': int(frames.shape[1]), 'width': int(frames.shape[2]),
        'warmup': warmup, 'dilate': dilate, 'erode': erode,
        'code_sha256': code.hexdigest(), 'torch': torch.__version__, 'upstream': upstream,
    }


def compare(a: np.ndarray, b: np.ndarray):
    """-> per-frame max and mean |a - b| (float64 arrays [T])."""
    d = np.abs(a.astype(np.float64) - b.astype(np.float64))
    return d.reshape(d.shape[0], -1).max(1), d.reshape(d.shape[0], -1).mean(1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog='python -m tools.matanyone2.reference', description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--frames-bgra', required=True, type=Path)
    ap.add_argument('--width', required=True, type=int)
    ap.add_argument('--height', required=True, type=int)
    ap.add_argument('--count', type=int, help='frames to process (default: all)')
    ap.add_argument('--start', type=int, default=0, help='first frame in the file')
    ap.add_argument('--mask', required=True, type=Path, help='first-frame mask PNG at W x H')
    ap.add_argument('--checkpoint', type=Path, help='run PyTorch with these weights')
    ap.add_argument('--random-init', type=int, metavar='SEED',
                    help='run PyTorch with the random weights of export.py --random-init SEED')
    ap.add_argument('--onnx-dir', type=Path, help='run glue.py on this exported set')
    ap.add_argument('--out', required=True, type=Path,
                    help='alphas .npy (PyTorch if it runs, otherwise glue)')
    ap.add_argument('--onnx-out', type=Path, help='glue alphas .npy when both run')
    ap.add_argument('--warmup', type=int, default=10)
    ap.add_argument('--dilate', type=int, default=10)
    ap.add_argument('--erode', type=int, default=10)
    ap.add_argument('--threads', type=int, help='torch intra-op threads')
    ap.add_argument('-v', '--verbose', action='store_true', help='per-frame progress')
    args = ap.parse_args(argv)
    if args.checkpoint is not None and args.random_init is not None:
        ap.error('give at most one of --checkpoint / --random-init')
    use_torch = args.checkpoint is not None or args.random_init is not None
    if not use_torch and args.onnx_dir is None:
        ap.error('give --checkpoint or --random-init (PyTorch) and/or --onnx-dir (glue)')

    frames = media.read_bgra_frames(args.frames_bgra, args.width, args.height, args.count, args.start)
    mask = media.read_mask(args.mask, args.width, args.height)
    log = (lambda s: print(s, file=sys.stderr)) if args.verbose else None
    opts = dict(warmup=args.warmup, dilate=args.dilate, erode=args.erode, log=log)
    T = frames.shape[0]
    passes = T + args.warmup + 1  # network passes: warm-up passes + frames 1..T-1 (+ frame 0)
    ref = glue_out = None
    if use_torch:
        import torch
        from . import network as N
        if args.threads:
            torch.set_num_threads(args.threads)
        t0 = time.perf_counter()
        try:
            built = N.build_network(checkpoint=args.checkpoint, random_init_seed=args.random_init)
        except N.CheckpointError as e:
            print(f'error: {e}', file=sys.stderr)
            return 2
        t1 = time.perf_counter()
        ref = run_reference(built.net, frames, mask, **opts)
        t2 = time.perf_counter()
        print(f'PyTorch reference ({built.weights}): build {t1 - t0:.1f} s, {T} frames in '
              f'{t2 - t1:.1f} s = {(t2 - t1) / passes:.3f} s per network pass')
        if not np.isfinite(ref).all():
            print('warning: the reference produced non-finite alphas', file=sys.stderr)
        np.save(args.out, ref)
        meta = metadata(built.weights, frames, mask, warmup=args.warmup, dilate=args.dilate,
                        erode=args.erode)
        args.out.with_suffix('.json').write_text(json.dumps(meta, indent=2) + '\n')
    if args.onnx_dir is not None:
        t0 = time.perf_counter()
        glue_out, g = run_glue(args.onnx_dir, frames, mask, **opts)
        t1 = time.perf_counter()
        per = ', '.join(f'{k} {v / max(g.models.calls[k], 1) * 1e3:.0f} ms'
                        for k, v in g.models.seconds.items())
        print(f'glue ({args.onnx_dir}): {T} frames in {t1 - t0:.1f} s = '
              f'{(t1 - t0) / passes:.3f} s per network pass ({per} per call)')
        np.save(args.onnx_out if (use_torch and args.onnx_out) else
                (args.out if not use_torch else args.out.with_suffix('.glue.npy')), glue_out)
    if ref is not None and glue_out is not None:
        mx, mean = compare(ref, glue_out)
        for ti in range(T):
            print(f'frame {ti:3d}: max |d| {mx[ti]:.2e}  mean |d| {mean[ti]:.2e}')
        print(f'overall: max {mx.max():.2e}, worst frame mean {mean.max():.2e}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
