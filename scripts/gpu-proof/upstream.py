"""Upstream PyTorch MatAnyone2 (InferenceCore of the `matanyone2` package) on the frames the element
gets, timed per frame, on a CUDA device (or the CPU for the smoke test).

    python scripts/gpu-proof/upstream.py --frames-dir DIR --width W --height H --count N --skip S \
        --mask MASK.png --device cuda --modes fp32,amp --json OUT.json

DIR holds NNN.bgra files (one raw BGRA frame each, at W x H, the working size); frame i of the run is
file i mod (number of files), as the element's multifilesrc loop plays them. The network is built by
tools/matanyone2/network.py with the random-init weights of the exported set (seed 0) and driven
by tools/matanyone2/reference.py's run_reference (seed step with the dilated/eroded mask, warm-up +
1 first-frame passes, then one step per frame) on --device:

* fp32: autocast off everywhere (upstream's `safe_autocast` would switch it on for CUDA in
  process_video; step() itself does not, but the switch is forced off here so nothing runs fp16);
* amp: the whole step under torch.autocast('cuda', float16), as upstream's own process_video runs
  on a CUDA device (its `@safe_autocast()`).

A frame's time runs from the uint8 frame on the host to its alpha back on the host (which waits for
the GPU): upload, normalisation, the step, and the download. Frame 0 holds the seeding; the first
--skip frames are left out of the figures (the memory bank fills over the first ~25 frames).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def read_frames(folder: Path, width: int, height: int) -> list[np.ndarray]:
    files = sorted(folder.glob('*.bgra'))
    if not files:
        raise SystemExit(f'upstream: no .bgra frames in {folder}')
    frames = []
    for f in files:
        bgra = np.fromfile(f, dtype=np.uint8).reshape(height, width, 4)
        frames.append(np.ascontiguousarray(bgra[..., [2, 1, 0]]))  # RGB, as media.read_bgra_frames
    return frames


def run(net, frames, mask: np.ndarray, count: int, device: str, mode: str, warmup: int = 10) -> list[float]:
    """Seconds per frame (frame 0 includes seeding) of `count` steps in `mode` (fp32 | amp):
    tools/matanyone2/reference.py's run_reference on `device`, autocast off (fp32) or float16 (amp,
    on CUDA only; on the CPU amp runs as fp32)."""
    import torch
    from tools.matanyone2.reference import run_reference

    times: list[float] = []

    def frame_done(ti: int, alpha: np.ndarray, seconds: float) -> None:
        times.append(seconds)
        if not np.isfinite(alpha).all():
            print(f'upstream {mode}: non-finite alpha at frame {ti}', file=sys.stderr)

    amp = mode == 'amp' and device.startswith('cuda')
    run_reference(net, frames, mask, warmup=warmup, device=device, autocast=torch.float16 if amp else None,
                  count=count, on_frame=frame_done)
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--frames-dir', type=Path, required=True)
    ap.add_argument('--width', type=int, required=True)
    ap.add_argument('--height', type=int, required=True)
    ap.add_argument('--count', type=int, default=150)
    ap.add_argument('--skip', type=int, default=30)
    ap.add_argument('--mask', type=Path, required=True, help='first-frame mask PNG at W x H')
    ap.add_argument('--device', default='cuda')
    ap.add_argument('--modes', default='fp32,amp')
    ap.add_argument('--threads', type=int, default=0)
    ap.add_argument('--json', type=Path, required=True)
    args = ap.parse_args(argv)

    import torch
    from tools.matanyone2 import media, network as N
    if args.threads:
        torch.set_num_threads(args.threads)
    info = {'torch': torch.__version__, 'device': args.device, 'working_size': [args.width, args.height],
            'count': args.count, 'skip': args.skip, 'modes': {}}
    if args.device.startswith('cuda'):
        if not torch.cuda.is_available():
            raise SystemExit('upstream: torch sees no CUDA device')
        info['gpu'] = torch.cuda.get_device_name(0)
        info['cuda'] = torch.version.cuda
        info['cudnn'] = torch.backends.cudnn.version()
        # PyTorch's defaults, left as they are: TF32 in cuDNN convolutions on, in matmuls off
        info['allow_tf32'] = {'cudnn': torch.backends.cudnn.allow_tf32,
                              'matmul': torch.backends.cuda.matmul.allow_tf32,
                              'cudnn_benchmark': torch.backends.cudnn.benchmark}
    frames = read_frames(args.frames_dir, args.width, args.height)
    seed = media.read_mask(args.mask, args.width, args.height)
    t0 = time.perf_counter()
    net = N.build_network(random_init_seed=0).net
    info['build_s'] = time.perf_counter() - t0
    print(f'upstream: network built in {info["build_s"]:.1f} s (torch {torch.__version__}, {args.device})', flush=True)
    for mode in [m for m in args.modes.split(',') if m]:
        try:
            if args.device.startswith('cuda'):
                torch.cuda.reset_peak_memory_stats()
            times = run(net, frames, seed, args.count, args.device, mode)
        except Exception as e:  # report and go on with the next mode
            print(f'upstream {mode}: failed: {type(e).__name__}: {e}', file=sys.stderr, flush=True)
            info['modes'][mode] = {'error': f'{type(e).__name__}: {e}'}
            continue
        measured = [t * 1000 for t in times[args.skip:]] or [t * 1000 for t in times[1:]]
        ordered = sorted(measured)
        result = {
            'median_ms': statistics.median(ordered),
            'p95_ms': ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))],
            'mean_ms': statistics.mean(ordered),
            'fps': 1000 / statistics.mean(ordered),
            'frames_measured': len(measured),
            'seed_ms': times[0] * 1000,
        }
        if args.device.startswith('cuda'):
            result['peak_gpu_mib'] = torch.cuda.max_memory_allocated() / 2 ** 20
        info['modes'][mode] = result
        print(f'upstream {mode}: {result["median_ms"]:.2f} ms/frame median, p95 {result["p95_ms"]:.2f}, '
              f'{result["fps"]:.1f} fps ({len(measured)} frames after {args.skip})', flush=True)
        args.json.write_text(json.dumps(info, indent=2))
    args.json.write_text(json.dumps(info, indent=2))
    return 0


if __name__ == '__main__':
    sys.exit(main())
