"""GPU proof, the measurements (started by run.sh on the device once everything is unpacked).

For each working size (512x288 from 1080p frames, 1920x1088 from 1920x1088 frames) and each
precision the plugin and the model sets offer (fp32, fp16): the element in a real pipeline

    multifilesrc (the clip's frames, looped) ! rawvideoparse ! queue ! identity eos-after=N
        ! matanyone execution-provider=cuda precision=P working-size=S stats-interval=1
        ! GRAY8 ! tee ! queue ! fakesink  (+ the first K alphas to a file)

with fps from the element's matanyone-stats messages (1000 / mean total-ms, as tools/bench.py) and
from the wall clock (messages timestamped as they arrive: the pipeline's throughput), the first
--skip frames left out (seeding, cuDNN's algorithm search, the memory bank filling); then the same K
frames through the element on the CPU and the GPU-vs-CPU alpha deviation; then upstream PyTorch on
the same GPU on the same frames (upstream.py); then TensorRT if its libraries are on the machine.
Each step has a timeout and a place in a time budget: a step that fails or no longer fits is
reported and skipped, and the next one runs. Results: OUT/bench/gpu-<provider>-<size>.json and
OUT/summary.txt.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tools.bench import parse_stats, summary  # noqa: E402  (numpy only)
from tools.matanyone2.media import alpha_deviation  # noqa: E402

START = time.perf_counter()
TARGET_FPS = {'512x288': 300.0, '1920x1088': 60.0}
TARGET_SPEEDUP = 3.0


def log(message: str) -> None:
    print(f'[{time.perf_counter() - START:6.1f} s] {message}', flush=True)


class Budget:
    def __init__(self, seconds: float):
        self.end = START + seconds

    def left(self) -> float:
        return self.end - time.perf_counter()

    def allows(self, need: float, what: str) -> bool:
        if self.left() >= need:
            return True
        log(f'SKIPPED {what}: {self.left():.0f} s of the budget left, it needs up to {need:.0f} s')
        return False


# ------------------------------------------------------------------------------------------------
# set-up


def prepare_frames(mp4: Path, work: Path, count: int, sizes: list[tuple[int, int]]) -> dict:
    """The clip's first `count` frames as one raw BGRA file per frame, at each size, decoded with
    OpenCV (the device has no GStreamer decoders). Falls back to synthetic frames (a moving blob on
    a gradient: the models' cost does not depend on the picture) if OpenCV cannot decode."""
    folders = {size: work / 'frames' / f'{size[0]}x{size[1]}' for size in sizes}
    done = work / 'frames' / f'done-{count}'
    if done.exists():
        return json.loads(done.read_text())
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
        for f in folder.glob('*.bgra'):
            f.unlink()
    source, written = 'synthetic', 0
    try:
        import cv2
        capture = cv2.VideoCapture(str(mp4))
        while written < count:
            ok, bgr = capture.read()
            if not ok:
                break
            for (w, h), folder in folders.items():
                img = bgr if (bgr.shape[1], bgr.shape[0]) == (w, h) else cv2.resize(bgr, (w, h), interpolation=cv2.INTER_AREA)
                cv2.cvtColor(img, cv2.COLOR_BGR2BGRA).tofile(folder / f'{written:03d}.bgra')
            written += 1
        if written:
            source = f'{mp4.name} decoded with OpenCV {cv2.__version__}'
    except Exception as e:  # no cv2, or no decoder in it
        log(f'OpenCV could not decode {mp4}: {type(e).__name__}: {e}; synthetic frames instead')
    if not written:
        yy, xx = np.mgrid[0:1088, 0:1920].astype(np.float32)
        for i in range(count):
            cx, cy = 960 + 400 * np.sin(i / 10), 540 + 200 * np.cos(i / 13)
            blob = np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * 180 ** 2))
            rgb = np.stack([xx / 1920 * 255, yy / 1088 * 255, blob * 255], -1).astype(np.uint8)
            for (w, h), folder in folders.items():
                img = rgb[:h, :w] if h <= 1088 and w <= 1920 else rgb
                bgra = np.concatenate([img[..., ::-1], np.full(img.shape[:2] + (1,), 255, np.uint8)], -1)
                np.ascontiguousarray(bgra).tofile(folder / f'{i:03d}.bgra')
        written = count
    info = {'source': source, 'frames': written, 'folders': {f'{w}x{h}': str(p) for (w, h), p in folders.items()}}
    done.write_text(json.dumps(info))
    return info


def prepare_masks(png: Path, work: Path, sizes: list[tuple[int, int]]) -> dict:
    from PIL import Image
    out = {}
    mask = Image.open(png).convert('L')
    for w, h in sizes:
        path = work / f'mask-{w}x{h}.png'
        mask.resize((w, h), Image.NEAREST).save(path)
        out[f'{w}x{h}'] = path
    return out


def gst_env(prefix: Path, work: Path, nvidia_on_ld: bool) -> dict:
    env = os.environ.copy()
    libdir = prefix / 'gst' / 'usr' / 'lib' / 'x86_64-linux-gnu'
    # (some Debian 12 packages, libselinux1 and libcap2 among them, still put their libraries in /lib)
    ld = [str(libdir), str(libdir / 'openblas-pthread'), str(prefix / 'gst' / 'lib' / 'x86_64-linux-gnu')]
    if nvidia_on_ld:
        ld.append(str(prefix / 'ort' / 'nvidia'))
    if env.get('LD_LIBRARY_PATH'):
        ld.append(env['LD_LIBRARY_PATH'])  # the driver's folder may be named there
    plugins = str(libdir / 'gstreamer-1.0')
    scanner = str(libdir / 'gstreamer1.0' / 'gstreamer-1.0' / 'gst-plugin-scanner')
    env.update({
        'LD_LIBRARY_PATH': ':'.join(ld),
        'PATH': str(prefix / 'gst' / 'usr' / 'bin') + ':' + env.get('PATH', '/usr/bin:/bin'),
        'GST_PLUGIN_SYSTEM_PATH_1_0': plugins, 'GST_PLUGIN_SYSTEM_PATH': plugins,
        'GST_PLUGIN_PATH_1_0': str(prefix / 'plugins'), 'GST_PLUGIN_PATH': str(prefix / 'plugins'),
        'GST_PLUGIN_SCANNER_1_0': scanner, 'GST_PLUGIN_SCANNER': scanner,
        'GST_REGISTRY_1_0': str(work / 'registry.bin'), 'GST_REGISTRY': str(work / 'registry.bin'),
        'XDG_DATA_HOME': str(work / 'xdg'),  # the element's data root: nothing installed there
        'MATANYONE_ONNXRUNTIME': str(prefix / 'ort' / 'libonnxruntime.so.1'),
        'ORT_DISABLE_TELEMETRY': '1',
        'GST_DEBUG': os.environ.get('GPU_PROOF_GST_DEBUG', 'matanyone:4'),
        'GST_DEBUG_NO_COLOR': '1',
    })
    if (prefix / 'ort' / 'nvidia').is_dir():
        env['MATANYONE_CUDA_LIBS'] = str(prefix / 'ort' / 'nvidia')
    env.pop('PYTHONPATH', None)
    return env


def check_libraries(env: dict, prefix: Path, work: Path, smoke: bool) -> dict:
    """gst-inspect-1.0 matanyone, with the loader listing every library it initialises: which come
    from the unpacked prefix, which from the machine."""
    env = dict(env, LD_DEBUG='libs', LD_DEBUG_OUTPUT=str(work / 'ld-debug'))
    for old in work.glob('ld-debug*'):
        old.unlink()
    result = subprocess.run(['gst-inspect-1.0', 'matanyone'], env=env, capture_output=True, text=True, timeout=120)
    inspect = result.stdout
    loaded = set()
    for f in work.glob('ld-debug*'):
        for line in f.read_text(errors='replace').splitlines():
            if 'calling init:' in line:
                loaded.add(line.split('calling init:', 1)[1].strip())
    env.pop('LD_DEBUG')
    ours = sorted(p for p in loaded if p.startswith(str(prefix)))
    outside = sorted(p for p in loaded if not p.startswith(str(prefix)))
    suspicious = [p for p in outside if any(k in os.path.basename(p) for k in ('gst', 'glib', 'gobject', 'openblas', 'orc', 'matanyone'))]
    log(f'gst-inspect-1.0 matanyone: rc {result.returncode}; {len(ours)} libraries from the prefix, '
        f'{len(outside)} from the machine: {", ".join(os.path.basename(p) for p in outside)}')
    if suspicious:
        log(f'WARNING: GStreamer/GLib/OpenBLAS libraries came from outside the prefix: {suspicious}')
    if result.returncode != 0:
        log('gst-inspect-1.0 failed:\n' + (result.stdout + result.stderr)[-3000:])
    precisions = []
    in_precision = False
    for line in inspect.splitlines():
        if line.strip().startswith('precision'):
            in_precision = True
        elif in_precision and line.strip().startswith('('):
            precisions.append(line.split(':', 1)[1].split('-', 1)[0].strip())
        elif in_precision and line.strip() and not line.startswith(' ' * 10):
            in_precision = False
    filename = next((l.split()[-1] for l in inspect.splitlines() if l.strip().startswith('Filename')), None)
    return {'ok': result.returncode == 0, 'precisions': precisions or ['fp32'], 'plugin_file': filename,
            'from_prefix': [os.path.basename(p) for p in ours], 'from_machine': outside,
            'outside_suspicious': suspicious}


def gpu_info() -> dict:
    info = {}
    try:
        out = subprocess.run(['nvidia-smi', '--query-gpu=name,driver_version,memory.total,clocks.max.sm,pci.bus_id',
                              '--format=csv,noheader'], capture_output=True, text=True, timeout=30).stdout.strip()
        if out:
            name, driver, memory, clock, bus = [v.strip() for v in out.splitlines()[0].split(',')]
            info = {'name': name, 'driver': driver, 'memory': memory, 'max_sm_clock': clock, 'pci': bus}
        full = subprocess.run(['nvidia-smi'], capture_output=True, text=True, timeout=30).stdout
        print(full, flush=True)
        for line in full.splitlines():
            if 'CUDA Version' in line:
                info['cuda_driver_api'] = line.split('CUDA Version:')[1].split()[0]
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        info['error'] = f'nvidia-smi: {e}'
    return info


def machine() -> dict:
    cpu = 'unknown'
    try:
        cpu = next(l.split(':', 1)[1].strip() for l in Path('/proc/cpuinfo').read_text().splitlines() if l.startswith('model name'))
    except (OSError, StopIteration):
        pass
    return {'cpu': cpu, 'cores': os.cpu_count(), 'platform': platform.platform(), 'python': platform.python_version()}


# ------------------------------------------------------------------------------------------------
# the element


def element_run(env: dict, label: str, *, frames: Path, n_files: int, in_w: int, in_h: int, working: int,
                provider: str, precision: str, models: Path, mask: Path, total: int,
                alpha_path: Path | None, alpha_frames: int, timeout: float, logs: Path, engine: str = 'matanyone2') -> dict:
    if engine == 'rvm':  # (no seed, no working size: the frame at its own size, downsample-ratio from it)
        element = f'matanyone engine=rvm model-dir={models} execution-provider={provider} stats-interval=1'
    else:
        element = (f'matanyone engine=matanyone2 model-dir={models} seed=mask seed-mask={mask} '
                   f'execution-provider={provider} precision={precision} working-size={working} stats-interval=1')
    source = (f'multifilesrc location={frames}/%03d.bgra index=0 start-index=0 stop-index={n_files - 1} loop=true '
              f'! rawvideoparse format=bgra width={in_w} height={in_h} framerate=30/1 '
              f'! queue max-size-buffers=4 ! identity eos-after={total + 1}')
    if alpha_path is not None:
        # every alpha goes to the file (a tee with a branch that ends after K frames would stop the
        # whole stream: tee passes the branch's EOS upstream); the file is cut to K frames afterwards
        sink = f'video/x-raw,format=GRAY8 ! queue max-size-buffers=64 ! filesink location={alpha_path}'
    else:
        sink = 'video/x-raw,format=GRAY8 ! fakesink sync=false'
    pipeline = f'{source} ! {element} ! {sink}'
    err_path = logs / f'{label}.stderr.log'
    log(f'{label}: {total} frames, {in_w}x{in_h} in, working size {working}, {provider} {precision} (timeout {timeout:.0f} s)')
    started = time.perf_counter()
    rows, other = [], []
    with open(err_path, 'w') as err:
        process = subprocess.Popen(['gst-launch-1.0', '-m'] + pipeline.split(), stdout=subprocess.PIPE, stderr=err,
                                   env=env, text=True, bufsize=1)
        timer = threading.Timer(timeout, process.kill)
        timer.start()
        try:
            for line in process.stdout:
                stamp = time.perf_counter()
                parsed = parse_stats(line)
                if parsed:
                    parsed[0]['_t'] = stamp
                    rows.append(parsed[0])
                else:
                    other.append(line.rstrip())
                    other = other[-200:]
            returncode = process.wait()
        finally:
            timer.cancel()
    wall = time.perf_counter() - started
    if alpha_path is not None and alpha_path.exists():
        os.truncate(alpha_path, min(alpha_path.stat().st_size, alpha_frames * in_w * in_h))
    timed_out = wall >= timeout - 0.5 and returncode != 0
    result = {'label': label, 'rc': returncode, 'timed_out': timed_out, 'wall_s': wall, 'rows': rows,
              'stderr_log': str(err_path)}
    if returncode != 0 or not rows:
        tail = '\n'.join(other[-30:])
        err_tail = err_path.read_text(errors='replace')[-4000:]
        log(f'{label}: FAILED (rc {returncode}{", timed out" if timed_out else ""}, {len(rows)} stats messages)\n'
            f'--- stdout tail ---\n{tail}\n--- stderr tail ---\n{err_tail}')
        result['error'] = (err_tail or tail)[-1500:]
    return result


def element_figures(run: dict, skip: int, provider: str, precision: str, total: int) -> dict:
    rows = run['rows']
    # (a buffer queued behind identity's EOS can still reach the element: frame total + 1, out of
    # sequence; it is left out)
    measured = [r for r in rows if skip < r.get('frame', 0) <= total]
    out = {'frames_total': len(rows), 'frames_measured': len(measured), 'skipped': skip, 'wall_s': run['wall_s'],
           'rc': run['rc']}
    if rows:
        out['provider_reported'] = rows[-1].get('provider')
        out['precision_reported'] = rows[-1].get('precision')
        out['data_reported'] = rows[-1].get('data')  # 'device': only the frame up, the alpha down
        out['frames_dropped'] = rows[-1].get('frames-dropped')
        out['seed_ms'] = next((r['seed-ms'] for r in rows if 'seed-ms' in r), None)
        out['valid'] = out['provider_reported'] == provider and out['precision_reported'] == precision
        if not out['valid']:
            log(f'WARNING: asked for {provider} {precision}, the element reports '
                f'{out["provider_reported"]} {out["precision_reported"]}: not counted')
    if len(measured) < 2:
        out['valid'] = False
        return out
    totals = [r['total-ms'] for r in measured]
    out['fps'] = 1000.0 / statistics.mean(totals)
    span = measured[-1]['_t'] - measured[0]['_t']
    out['fps_wall'] = (len(measured) - 1) / span if span > 0 else None
    model_fields = [k for k in measured[0] if k.endswith('-ms') and k not in
                    ('preprocess-ms', 'inference-ms', 'postprocess-ms', 'total-ms', 'memory-ms', 'latency-ms', 'seed-ms')]
    stages = {'preprocess': summary([r['preprocess-ms'] for r in measured])}
    for field in model_fields:
        values = [r[field] for r in measured if r.get(field, 0) > 0]
        if values:
            stages[field[:-3]] = summary(values)
    stages['memory match + readout'] = summary([r.get('memory-ms', 0.0) for r in measured])
    stages['postprocess'] = summary([r['postprocess-ms'] for r in measured])
    stages['total'] = summary(totals)
    out['stages_ms'] = stages
    return out


def deviation(test: Path, reference: Path, width: int, height: int, frames: int) -> dict | None:
    size = width * height
    try:
        a = np.fromfile(test, dtype=np.uint8)
        b = np.fromfile(reference, dtype=np.uint8)
    except OSError:
        return None
    n = min(a.size, b.size, frames * size) // size
    if n < 1:
        return None
    a = a[:n * size].astype(np.float32).reshape(n, -1) / 255
    b = b[:n * size].astype(np.float32).reshape(n, -1) / 255
    result = {'frames': n, **alpha_deviation(a, b)}
    result['per_frame_max_abs'] = [float(np.abs(a[i] - b[i]).max()) for i in range(n)]
    return result


# ------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--prefix', type=Path, required=True, help='where run.sh unpacked everything')
    ap.add_argument('--work', type=Path, required=True)
    ap.add_argument('--out', type=Path, required=True)
    ap.add_argument('--budget-s', type=float, default=540, help='time for all measurements, from the start of run.sh')
    ap.add_argument('--elapsed-s', type=float, default=0, help='seconds run.sh spent before this script')
    ap.add_argument('--python', default=sys.executable, help='interpreter for upstream.py and the fp16 tool')
    ap.add_argument('--pythonpath', default='', help='PYTHONPATH for those (the carried packages)')
    ap.add_argument('--tensorrt', action='store_true', help="TensorRT's libraries are on this machine")
    ap.add_argument('--cpu-smoke', action='store_true', help='CPU only, a few frames, small size (no GPU needed)')
    ap.add_argument('--skip', type=int, default=30)
    args = ap.parse_args(argv)

    budget = Budget(args.budget_s - args.elapsed_s)
    prefix, work, out = args.prefix, args.work, args.out
    logs = work / 'logs'
    logs.mkdir(parents=True, exist_ok=True)
    (out / 'bench').mkdir(parents=True, exist_ok=True)
    smoke = args.cpu_smoke
    # the alphas of the timed runs (2 MB a 1080p frame, all of them, cut to K frames after each run),
    # inside the project's folder like everything this proof writes
    alphas = work / 'alphas'
    alphas.mkdir(parents=True, exist_ok=True)
    log(f'alpha files in {alphas}')
    provider = 'cpu' if smoke else 'cuda'
    models = prefix / 'models'
    # size key -> (input w, h, working size, frames in the timed run, K alphas compared with the CPU)
    if smoke:
        sizes = {'256x144': (1920, 1080, 144, 10, 4)}
        skip, clip_frames = 3, 6
    else:
        sizes = {'512x288': (1920, 1080, 288, 630, 12), '1920x1088': (1920, 1088, 1088, 270, 6)}
        skip, clip_frames = args.skip, 96
    work_sizes = {key: tuple(int(v) for v in key.split('x')) for key in sizes}
    in_sizes = sorted({(w, h) for w, h, *_ in sizes.values()} | set(work_sizes.values()))

    results: dict[str, dict] = {}
    notes: list[str] = []
    gpu = {} if smoke else gpu_info()
    log(f'GPU: {gpu or "(none: CPU smoke test)"}')

    frames = prepare_frames(prefix / 'media' / 'test-sample2.mp4', work, clip_frames, in_sizes)
    log(f'frames: {frames["frames"]} ({frames["source"]})')
    masks = prepare_masks(prefix / 'media' / 'test-sample2.png', work, in_sizes)

    nvidia_on_ld = False
    env = gst_env(prefix, work, nvidia_on_ld)
    libs = check_libraries(env, prefix, work, smoke)
    if not libs['ok']:
        notes.append('gst-inspect-1.0 matanyone failed: the element does not load')
    precisions = [p for p in ('fp32', 'fp16') if p in libs['precisions']]
    if 'fp16' not in precisions:
        notes.append(f'fp16: this plugin build offers precision {libs["precisions"]} only')
    if 'fp16' in precisions and not (models / 'matanyone2-fp16' / 'manifest.json').is_file():
        tried = budget.allows(60, 'making the fp16 set')
        if tried:
            pyenv = dict(os.environ, PYTHONPATH=args.pythonpath)
            log('making the fp16 set: tools.matanyone2.fp16 --check-frames 0')
            made = subprocess.run([args.python, '-m', 'tools.matanyone2.fp16', '--src', str(models / 'matanyone2'),
                                   '--out', str(models / 'matanyone2-fp16'), '--check-frames', '0'],
                                  cwd=ROOT, env=pyenv, capture_output=True, text=True,
                                  timeout=max(30, min(180, budget.left() - 5)))
            print(made.stdout[-2000:], made.stderr[-2000:], flush=True)
        if not (models / 'matanyone2-fp16' / 'manifest.json').is_file():
            notes.append('fp16: no fp16 set (' + ('tools.matanyone2.fp16 failed' if tried else 'no time left to make it') + ')')
            precisions.remove('fp16')

    gpu_runs: dict[tuple[str, str], dict] = {}
    # 1. the element on the GPU: every precision at every size
    for key, (in_w, in_h, working, total, k) in sizes.items():
        folder = Path(frames['folders'][f'{in_w}x{in_h}'])
        for precision in precisions:
            label = f'{provider}-{precision}-{key}'
            need = 40 + total / (TARGET_FPS.get(key, 30) / 4)
            if not budget.allows(need, label):
                continue
            run_args = dict(frames=folder, n_files=frames['frames'], in_w=in_w, in_h=in_h, working=working,
                            provider=provider, precision=precision, models=models, mask=masks[f'{in_w}x{in_h}'],
                            total=total, alpha_path=alphas / f'alpha-{label}.gray', alpha_frames=k,
                            timeout=min(budget.left() - 5, 150 + total / 10), logs=logs)
            run = element_run(env, label, **run_args)
            if (run['rc'] != 0 or not run['rows']) and provider != 'cpu' and not nvidia_on_ld:
                # an element without its own loading of the NVIDIA libraries: try them on LD_LIBRARY_PATH
                log('retrying with the NVIDIA libraries on LD_LIBRARY_PATH')
                nvidia_on_ld = True
                env = gst_env(prefix, work, nvidia_on_ld)
                notes.append('the NVIDIA libraries were found through LD_LIBRARY_PATH, not by the element itself')
                run_args['timeout'] = min(budget.left() - 5, run_args['timeout'])
                run = element_run(env, label + '-ld', **run_args)
            figures = element_figures(run, skip, provider, precision, total)
            if 'error' in run:
                figures['error'] = run['error']
            gpu_runs[(key, precision)] = figures
            if figures.get('fps'):
                log(f'{label}: {figures["fps"]:.1f} fps (element), {figures["fps_wall"] or 0:.1f} fps (wall), '
                    f'median total {figures["stages_ms"]["total"]["median"]:.2f} ms over {figures["frames_measured"]} frames')

    # 2. upstream PyTorch on the same device, same frames (at the working size)
    upstream: dict[str, dict] = {}
    for key, (in_w, in_h, working, total, k) in sizes.items():
        w, h = work_sizes[key]
        count = 6 if smoke else (150 if w <= 512 else 90)
        if not budget.allows(90 if w <= 512 else 150, f'upstream at {key}'):
            continue
        target = work / f'upstream-{key}.json'
        target.unlink(missing_ok=True)
        cmd = [args.python, str(ROOT / 'scripts' / 'gpu-proof' / 'upstream.py'), '--frames-dir', frames['folders'][key],
               '--width', str(w), '--height', str(h), '--count', str(count), '--skip', str(skip),
               '--mask', str(masks[key]), '--device', 'cpu' if smoke else 'cuda',
               '--modes', 'fp32' if smoke else 'fp32,amp', '--json', str(target)]
        log(f'upstream PyTorch at {key}: {count} frames')
        try:
            done = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, PYTHONPATH=args.pythonpath), capture_output=True,
                                  text=True, timeout=max(30, min(budget.left() - 5, 240)))
            print(done.stdout[-3000:], done.stderr[-3000:], flush=True)
        except subprocess.TimeoutExpired:
            log(f'upstream at {key}: timed out')
        if target.is_file():
            upstream[key] = json.loads(target.read_text())
        else:
            notes.append(f'upstream at {key}: no result')

    # 3. the same first K frames on the CPU: GPU-vs-CPU alpha deviation
    deviations: dict[tuple[str, str], dict] = {}
    for key, (in_w, in_h, working, total, k) in sizes.items():
        if not any((key, p) in gpu_runs for p in precisions):
            continue
        if 'fp16' in precisions:
            d = deviation(alphas / f'alpha-{provider}-fp16-{key}.gray', alphas / f'alpha-{provider}-fp32-{key}.gray', in_w, in_h, k)
            if d:
                deviations[(key, 'fp16-vs-fp32')] = d
                log(f'{provider} fp16 vs {provider} fp32 at {key}: mean |Δα| {d["mean_abs"]:.5f}, max {d["max_abs"]:.5f}')
        label = f'cpu-reference-{key}'
        need = 30 if working <= 288 else 120
        if not budget.allows(need, label):
            continue
        folder = Path(frames['folders'][f'{in_w}x{in_h}'])
        reference = alphas / f'alpha-{label}.gray'
        run = element_run(env, label, frames=folder, n_files=frames['frames'], in_w=in_w, in_h=in_h, working=working,
                          provider='cpu', precision='fp32', models=models, mask=masks[f'{in_w}x{in_h}'], total=k,
                          alpha_path=reference, alpha_frames=k, timeout=max(20, budget.left() - 10), logs=logs)
        if run['rc'] != 0:
            notes.append(f'{label} failed')
            continue
        for precision in precisions:
            d = deviation(alphas / f'alpha-{provider}-{precision}-{key}.gray', reference, in_w, in_h, k)
            if d:
                deviations[(key, precision)] = d
                log(f'{provider} {precision} vs cpu fp32 at {key}: mean |Δα| {d["mean_abs"]:.5f}, p99 {d["p99_abs"]:.5f}, '
                    f'max {d["max_abs"]:.5f}, IoU@0.5 {d["iou_at_0.5"]:.4f} ({d["frames"]} frames)')

    # 4. TensorRT, when its libraries are here (engines are built on first use: slow, so last)
    trt_runs: dict[tuple[str, str], dict] = {}
    if args.tensorrt and not smoke:
        for key, (in_w, in_h, working, total, k) in sizes.items():
            for precision in precisions:
                label = f'tensorrt-{precision}-{key}'
                if not budget.allows(150, label):
                    continue
                run = element_run(env, label, frames=Path(frames['folders'][f'{in_w}x{in_h}']), n_files=frames['frames'],
                                  in_w=in_w, in_h=in_h, working=working, provider='tensorrt', precision=precision,
                                  models=models, mask=masks[f'{in_w}x{in_h}'], total=total, alpha_path=None, alpha_frames=0,
                                  timeout=min(budget.left() - 5, 300), logs=logs)
                trt_runs[(key, precision)] = element_figures(run, skip, 'tensorrt', precision, total)
    elif not smoke:
        notes.append("tensorrt: TensorRT's libraries (libnvinfer.so.10) are not on this machine")

    # 4b. Robust Video Matting (engine=rvm, the default without MatAnyone2's weights), last: the frame at
    #     its own 1920x1088 (1920x1080 in the smoke test), fp32, on the GPU and on the CPU (deviation)
    rvm_results: dict[str, dict] = {}
    if (models / 'rvm' / 'manifest.json').is_file():
        in_w, in_h = (1920, 1080) if smoke else (1920, 1088)
        total, k = (10, 4) if smoke else (300, 6)
        folder = Path(frames['folders'][f'{in_w}x{in_h}'])
        label = f'rvm-{provider}-fp32-{in_w}x{in_h}'
        if budget.allows(60 + total / 20, label):
            run = element_run(env, label, frames=folder, n_files=frames['frames'], in_w=in_w, in_h=in_h, working=0,
                              provider=provider, precision='fp32', models=models, mask=masks[f'{in_w}x{in_h}'],
                              total=total, alpha_path=alphas / f'alpha-{label}.gray', alpha_frames=k,
                              timeout=min(budget.left() - 5, 120 + total / 10), logs=logs, engine='rvm')
            figures = element_figures(run, 2, provider, 'fp32', total)
            if 'error' in run:
                figures['error'] = run['error']
            if budget.allows(40, 'rvm cpu reference') and provider != 'cpu':
                reference = alphas / f'alpha-rvm-cpu-{in_w}x{in_h}.gray'
                ref = element_run(env, f'rvm-cpu-reference-{in_w}x{in_h}', frames=folder, n_files=frames['frames'],
                                  in_w=in_w, in_h=in_h, working=0, provider='cpu', precision='fp32', models=models,
                                  mask=masks[f'{in_w}x{in_h}'], total=k, alpha_path=reference, alpha_frames=k,
                                  timeout=max(20, budget.left() - 10), logs=logs, engine='rvm')
                if ref['rc'] == 0:
                    figures['deviation_vs_cpu_fp32'] = deviation(alphas / f'alpha-{label}.gray', reference, in_w, in_h, k)
            key = f'{in_w}x{in_h}'
            target = 60 if not smoke else None
            fps = figures.get('fps_wall') or figures.get('fps')
            rvm_results[key] = {'engine': 'rvm', 'provider': provider, 'input_size': [in_w, in_h], 'gpu': gpu,
                                'machine': machine(), 'figures': figures, 'date': time.strftime('%Y-%m-%d'),
                                'targets': {'fps': {'target': target, 'value': fps, 'met': bool(target and fps and fps >= target)}}}
            name = f'gpu-{provider}-rvm-{key}.json' if not smoke else f'smoke-{provider}-rvm-{key}.json'
            (out / 'bench' / name).write_text(json.dumps(rvm_results[key], indent=2))
            log(f'{label}: {fps or 0:.1f} fps' + (f", mean |Δα| vs cpu {figures['deviation_vs_cpu_fp32']['mean_abs']:.5f}"
                                                  if figures.get('deviation_vs_cpu_fp32') else ''))
    else:
        notes.append('rvm: no RVM set was carried (scripts/setup.sh installs it before pack.sh)')

    shutil.rmtree(alphas, ignore_errors=True)

    # 5. results
    plugin_sha = None
    packinfo = (prefix / 'PACKINFO').read_text().strip() if (prefix / 'PACKINFO').is_file() else ''
    for part in packinfo.split():
        if part.startswith('plugin_sha256='):
            plugin_sha = part.split('=', 1)[1]
    lines = [f'GPU proof ({time.strftime("%Y-%m-%d %H:%M")}): {gpu.get("name", "no GPU (CPU smoke test)")}, '
             f'driver {gpu.get("driver", "-")}, CUDA {gpu.get("cuda_driver_api", "-")}; CPU {machine()["cpu"]} '
             f'({os.cpu_count()} threads); frames: {frames["source"]}']
    if upstream:
        first = next(iter(upstream.values()))
        lines.append(f'upstream: torch {first.get("torch")}, CUDA {first.get("cuda")}, cuDNN {first.get("cudnn")}')
    for prov, runs in ((provider, gpu_runs), ('tensorrt', trt_runs)):
        for key in sizes:
            per = {p: runs[(key, p)] for p in precisions if (key, p) in runs}
            if not per:
                continue
            for p, fig in per.items():
                if (key, p) in deviations and prov == provider:
                    fig['deviation_vs_cpu_fp32'] = deviations[(key, p)]
                if p == 'fp16' and (key, 'fp16-vs-fp32') in deviations and prov == provider:
                    fig[f'deviation_vs_{provider}_fp32'] = deviations[(key, 'fp16-vs-fp32')]
            valid = {p: f for p, f in per.items() if f.get('valid') and f.get('fps')}
            best_p = max(valid, key=lambda p: valid[p]['fps_wall'] or valid[p]['fps']) if valid else None
            best = valid.get(best_p, {})
            up = upstream.get(key, {}).get('modes', {}) if prov == provider else {}
            up_ok = {m: v for m, v in up.items() if 'fps' in v}
            fastest_up = max(up_ok.values(), key=lambda v: v['fps']) if up_ok else None
            speedups = {}
            for p, f in valid.items():
                for m, v in up_ok.items():
                    speedups[f'{p}_vs_upstream_{m}'] = (f['fps_wall'] or f['fps']) / v['fps']
            best_speedup = (best.get('fps_wall') or best.get('fps')) / fastest_up['fps'] if best and fastest_up else None
            target_fps = TARGET_FPS.get(key)
            in_w, in_h = sizes[key][:2]
            result = {
                'provider': prov, 'working_size': list(work_sizes[key]), 'input_size': [in_w, in_h],
                'engine': 'matanyone2', 'weights': 'random-init seed 0 (same architecture and cost as the real weights)',
                'gpu': gpu, 'machine': machine(), 'onnxruntime': '1.31.1 (onnxruntime-gpu wheel)',
                'plugin_sha256': plugin_sha, 'pack': packinfo, 'frames': frames['source'],
                'element_libraries_from_machine': libs['from_machine'],
                'nvidia_libraries_via': 'LD_LIBRARY_PATH' if nvidia_on_ld else 'the element (MATANYONE_CUDA_LIBS folder)',
                'precisions': per,
                'best_precision': best_p,
                # bench-gpu.sh / bench.py compatible top level: the best precision's figures
                'fps': best.get('fps'), 'fps_wall': best.get('fps_wall'), 'stages_ms': best.get('stages_ms'),
                'upstream': upstream.get(key) if prov == provider else None,
                'speedup_vs_upstream': speedups, 'speedup_best_vs_fastest_upstream': best_speedup,
                'targets': {
                    'fps': {'target': target_fps, 'value': best.get('fps_wall') or best.get('fps'),
                            'met': bool(target_fps and best and (best.get('fps_wall') or best.get('fps')) >= target_fps)},
                    'speedup_vs_upstream': {'target': TARGET_SPEEDUP, 'value': best_speedup,
                                            'met': bool(best_speedup and best_speedup >= TARGET_SPEEDUP)},
                },
                'notes': notes, 'date': time.strftime('%Y-%m-%d'),
            }
            name = f'gpu-{prov}-{key}.json' if not smoke else f'smoke-{prov}-{key}.json'
            (out / 'bench' / name).write_text(json.dumps(result, indent=2))
            results[name] = result
            lines.append(f'{prov} {key} (input {in_w}x{in_h}):')
            for p, f in per.items():
                if f.get('fps'):
                    d = f.get('deviation_vs_cpu_fp32')
                    dev = (f'; vs CPU fp32: mean |Δα| {d["mean_abs"]:.4f}, p99 {d["p99_abs"]:.4f}, max {d["max_abs"]:.4f}, '
                           f'IoU {d["iou_at_0.5"]:.4f}') if d else ''
                    flag = '' if f.get('valid') else ' [NOT VALID: ran on ' + str(f.get('provider_reported')) + ']'
                    lines.append(f'  {p}: {f["fps_wall"] or 0:7.1f} fps wall, {f["fps"]:7.1f} fps element '
                                 f'(median {f["stages_ms"]["total"]["median"]:.2f} ms, p95 {f["stages_ms"]["total"]["p95"]:.2f}){dev}{flag}')
                else:
                    lines.append(f'  {p}: no figures ({f.get("error", "failed")[:200]!r})')
            for m, v in up.items():
                lines.append(f'  upstream PyTorch {m}: ' + (f'{v["median_ms"]:.2f} ms/frame median, {v["fps"]:.1f} fps'
                                                            if 'fps' in v else v.get('error', '?')))
            if target_fps:
                value = result['targets']['fps']['value']
                verdict = 'NOT MEASURED' if value is None else 'MET' if result['targets']['fps']['met'] else 'NOT MET'
                lines.append(f'  target >= {target_fps:.0f} fps: {verdict}' + (f' ({value:.1f} fps wall, {best_p})' if value else ''))
            if prov == provider:
                verdict = 'NOT MEASURED' if best_speedup is None else \
                    'MET' if result['targets']['speedup_vs_upstream']['met'] else 'NOT MET'
                lines.append(f'  target >= {TARGET_SPEEDUP:.0f}x upstream on the same GPU: {verdict}'
                             + (f' ({best_speedup:.2f}x: best precision, wall fps, vs the fastest upstream mode)'
                                if best_speedup else ''))
    for key, r in rvm_results.items():
        f = r['figures']
        fps = r['targets']['fps']['value']
        d = f.get('deviation_vs_cpu_fp32')
        lines.append(f'rvm {r["provider"]} fp32 {key}: ' + (f'{fps:.1f} fps' if fps else f'no figures ({str(f.get("error", "failed"))[:200]!r})')
                     + (f', mean |Δα| vs cpu fp32 {d["mean_abs"]:.5f}, IoU@0.5 {d["iou_at_0.5"]:.4f}' if d else '')
                     + (f'; target >= 60 fps: {"MET" if r["targets"]["fps"]["met"] else "NOT MET"}' if r['targets']['fps']['target'] else ''))
    lines += [f'note: {n}' for n in notes]
    text = '\n'.join(lines)
    (out / 'summary.txt').write_text(text + '\n')
    print('\n' + '=' * 100 + '\n' + text + '\n' + '=' * 100, flush=True)
    log(f'done; JSON: {", ".join(results)}')
    return 0 if results else 1


if __name__ == '__main__':
    sys.exit(main())
