"""Benchmark of MatAnyone2 on an inference server (not a test): the installed element against the
real Triton server of tools/serve on this machine's loopback, and the same element in-process, on
the same frames, in one run.

    scripts/bench.sh --server [--size 512x288] [--frames 40] [--streams 1,2,4] [--json FILE]

Prints, per configuration (in-process; server over HTTP; over shared memory; over HTTP with 8-bit
frames), the element's inference time per frame, the round trip, the server's own compute, the
overhead (round trip minus the server's compute: the wire, the protocol and Triton's handling) and
the bytes a frame each way; then the throughput of 1, 2 and 4 streams on one server (here the server
and every element share the machine's cores: the streams compete for them, as they would not with a
GPU server); then the bytes a frame of the design not chosen (the element holding MatAnyone2's state
and sending it with every frame), from the model's tensor shapes, and how many 30 fps streams a
10 GbE link carries either way. The first frames (the seed and its warm-up passes) are left out.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools.bench import cpu_description, machine, parse_stats, summary
from tools.serve.process import TritonServer

ROOT = Path(__file__).resolve().parent.parent
LINK_BYTES_PER_S = 10e9 / 8 * 0.9  # 10 GbE, 90 % of it for payload


def element(args, width: int, height: int, mask: Path, server: str | None, extra: str = '') -> str:
    # fp32 here as on the server (whose repository holds the fp32 set): precision=auto may pick bf16.
    text = (f'matanyone engine=matanyone2 precision=fp32 working-size={min(width, height)} seed=mask seed-mask={mask} '
            f'watch-interval=0 stats-interval=1 threads={args.threads}')
    if args.model_dir:
        text += f' model-dir={args.model_dir}'
    if server:
        text += f' inference-server={server} {extra}'
    return text


def pipeline(args, frames: Path, width: int, height: int, mask: Path, server: str | None, extra: str = '') -> list[str]:
    description = (f'filesrc location={frames} ! rawvideoparse format=bgra width={width} height={height} framerate=30/1 '
                   f'! {element(args, width, height, mask, server, extra)} ! video/x-raw,format=GRAY8 ! fakesink')
    return ['gst-launch-1.0', '-m', *description.split()]


def steady(rows: list[dict], skip: int) -> list[dict]:
    return [r for r in rows[skip:] if not r.get('seed-ms')]


def figures(rows: list[dict]) -> dict:
    out = {'frames': len(rows), 'inference_ms': summary([r['inference-ms'] for r in rows]),
           'total_ms': summary([r['total-ms'] for r in rows])}
    if rows and 'server-ms' in rows[0]:
        out['round_trip_ms'] = summary([r['server-ms'] for r in rows])
        out['server_compute_ms'] = summary([r['server-compute-ms'] for r in rows])
        out['overhead_ms'] = summary([r['server-ms'] - r['server-compute-ms'] for r in rows])
        out['bytes_sent'] = statistics.median(r['server-bytes-sent'] for r in rows)
        out['bytes_received'] = statistics.median(r['server-bytes-received'] for r in rows)
        out['transport'] = rows[-1]['server-transport']
        queue = [r['server-queue-ms'] for r in rows if 'server-queue-ms' in r]
        out['server_queue_ms'] = summary(queue) if queue else None
    return out


def element_held_state_bytes(manifest: dict, width: int, height: int, max_mem_frames: int, mem_every: int) -> dict:
    """Bytes a frame each way if the element held MatAnyone2's state and sent it with every frame (the
    design not chosen), from the model set's tensor shapes at this size (fp32)."""
    padded_w, padded_h = max(32, -(-width // 16) * 16), max(32, -(-height // 16) * 16)
    tokens = (padded_w // 16) * (padded_h // 16)

    def channels(model, port, output=False):
        ports = manifest['models'][model]['outputs' if output else 'inputs']
        return next(p for p in ports if p['name'] == port)['shape'][1]
    key, value = channels('encoder', 'key', True), channels('maskencoder', 'mask_value', True)
    sensory, pix = channels('decoder', 'sensory'), channels('encoder', 'pix_feat', True)
    queries, summary_width = manifest['models']['readout']['inputs'][-1]['shape'][1:]
    f32 = 4
    frame = 3 * width * height * f32
    bank = max_mem_frames * tokens * (key + 1 + value) * f32             # keys, shrinkage, values
    state = (sensory + value + pix) * tokens * f32 + padded_w * padded_h * f32 + queries * summary_width * f32
    up = frame + bank + state
    # Back: the alpha (8 bits), the new state, and on memory frames the entry the bank gains.
    new_state = (sensory + value + pix) * tokens * f32 + padded_w * padded_h * f32 + queries * summary_width * f32
    entry = tokens * (key + 1) * f32 + queries * summary_width * f32
    down = width * height + new_state + entry / mem_every
    return {'up': int(up), 'down': int(down), 'bank_up': int(bank), 'state_up': int(state), 'frame_up': int(frame)}


def streams_at(bytes_per_frame: float, fps: float = 30) -> float:
    return LINK_BYTES_PER_S / (bytes_per_frame * fps)


def concurrent(args, frames: Path, width: int, height: int, mask: Path, server: str, count: int) -> dict:
    """`count` elements at once on one server: frames a second of all of them together, steady state."""
    started = time.monotonic()
    processes = [subprocess.Popen(pipeline(args, frames, width, height, mask, server), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True) for _ in range(count)]
    outputs = [p.communicate(timeout=3600)[0] for p in processes]
    wall = time.monotonic() - started
    if any(p.returncode for p in processes):
        raise SystemExit('a stream failed:\n' + outputs[[p.returncode != 0 for p in processes].index(True)][-3000:])
    rows = [steady(parse_stats(text), args.skip) for text in outputs]
    unmatted = [sum(1 for r in stream if not r.get('seeded')) for stream in rows]
    if any(unmatted):
        raise SystemExit(f'{count} streams: frames left without a matte ({unmatted} a stream): the server did not keep up '
                         f'within server-timeout; see the element warnings')
    per_frame = [statistics.median(r['total-ms'] for r in stream) for stream in rows]
    frames_each = len(rows[0])
    return {'streams': count, 'wall_s': wall, 'frames_per_stream': frames_each,
            'stream_ms_per_frame_median': per_frame,
            'frames_per_second_all_streams': sum(1000 / ms for ms in per_frame)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--size', default='512x288', help='working size WxH (the frames are decoded at it)')
    parser.add_argument('--frames', type=int, default=40)
    parser.add_argument('--skip', type=int, default=3, help='frames after the seed left out (the runtime settling)')
    parser.add_argument('--streams', default='1,2,4')
    parser.add_argument('--threads', type=int, default=0)
    parser.add_argument('--model-dir', default=None)
    parser.add_argument('--json', default=None)
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.split('x'))
    models = Path(args.model_dir) if args.model_dir else Path.home() / '.local/share/gst-matanyone/models'
    manifest = json.loads((models / 'matanyone2' / 'manifest.json').read_text())
    work = Path(tempfile.mkdtemp(prefix='bench-server-', dir=ROOT / 'build'))
    shared = Path(os.environ.get('MATANYONE_SHARED', ROOT.parent / 'shared'))
    frames = work / 'frames.bgra'
    subprocess.run(['gst-launch-1.0', '-q', 'filesrc', f'location={shared}/media/test-sample2.mp4', '!', 'decodebin', '!',
                    'videoconvert', '!', 'videoscale', '!', f'video/x-raw,format=BGRA,width={width},height={height}', '!',
                    'identity', f'eos-after={args.frames + 1}', '!', 'filesink', f'location={frames}'], check=True)
    from PIL import Image
    mask = work / 'mask.png'
    Image.open(shared / 'media' / 'test-sample2.png').convert('L').resize((width, height), Image.BILINEAR).save(mask)

    report = {'machine': machine(), 'cpu': cpu_description(args.threads), 'size': [width, height], 'frames': args.frames,
              'model_weights': manifest.get('weights'), 'runs': {}}
    with TritonServer(work, models / 'matanyone2') as server:
        configurations = {
            'in-process': (None, ''),
            'server-http': (server.url, 'server-shared-memory=off'),
            'server-shared-memory': (server.url, 'server-shared-memory=on'),
            'server-http-uint8': (server.url, 'server-shared-memory=off server-frame-format=uint8'),
        }
        for name, (url, extra) in configurations.items():
            print(f'[bench] {name} …', flush=True)
            result = subprocess.run(pipeline(args, frames, width, height, mask, url, extra), capture_output=True, text=True, timeout=3600)
            if result.returncode:
                raise SystemExit(f'{name} failed:\n{result.stdout[-3000:]}{result.stderr[-2000:]}')
            report['runs'][name] = figures(steady(parse_stats(result.stdout), args.skip))
        report['streams'] = []
        for count in [int(c) for c in args.streams.split(',')]:
            print(f'[bench] {count} stream(s) at once …', flush=True)
            report['streams'].append(concurrent(args, frames, width, height, mask, server.url, count))
    chosen_http = report['runs']['server-http']
    chosen_uint8 = report['runs']['server-http-uint8']
    other = element_held_state_bytes(manifest, width, height, 5, 5)
    ms_per_byte = chosen_http['overhead_ms']['median'] / (chosen_http['bytes_sent'] + chosen_http['bytes_received'])
    report['design'] = {
        'chosen': 'the server holds each stream\'s state (a Triton sequence); the element sends the frame, gets the alpha',
        'chosen_bytes_per_frame': {'float32_frame': {'up': chosen_http['bytes_sent'], 'down': chosen_http['bytes_received']},
                                   'uint8_frame': {'up': chosen_uint8['bytes_sent'], 'down': chosen_uint8['bytes_received']}},
        'not_chosen': 'the element holds the state and sends it with every frame (any instance serves any frame)',
        'not_chosen_bytes_per_frame': other,
        'not_chosen_overhead_ms_estimate': ms_per_byte * (other['up'] + other['down']),
        'streams_at_30fps_on_10gbe': {
            'chosen_float32': streams_at(chosen_http['bytes_sent'] + chosen_http['bytes_received']),
            'chosen_uint8': streams_at(chosen_uint8['bytes_sent'] + chosen_uint8['bytes_received']),
            'not_chosen': streams_at(other['up'] + other['down'])},
    }
    print_report(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + '\n')
        print(f'[bench] wrote {args.json}')
    return 0


def print_report(report: dict) -> None:
    cpu = report['cpu']
    print(f"\nMatAnyone2 at {report['size'][0]}x{report['size'][1]}, {cpu['model']} ({cpu['isa']}, {cpu['cores_used']} cores); "
          f"weights: {report['model_weights']}")
    print(f"{'configuration':24} {'inference ms':>13} {'round trip':>11} {'server':>8} {'overhead':>15} {'bytes up':>10} {'down':>9}")
    for name, run in report['runs'].items():
        line = f"{name:24} {run['inference_ms']['median']:13.1f}"
        if 'round_trip_ms' in run:
            line += (f" {run['round_trip_ms']['median']:11.1f} {run['server_compute_ms']['median']:8.1f} "
                     f"{run['overhead_ms']['median']:7.2f} / {run['overhead_ms']['p95']:5.2f} {int(run['bytes_sent']):10d} "
                     f"{int(run['bytes_received']):9d}")
        print(line)
    print('\nstreams on one server (server and elements share the cores):')
    for row in report['streams']:
        print(f"  {row['streams']}: {row['frames_per_second_all_streams']:.2f} frames/s in all, "
              f"{', '.join(f'{ms:.0f}' for ms in row['stream_ms_per_frame_median'])} ms a frame each")
    design = report['design']
    other = design['not_chosen_bytes_per_frame']
    print(f"\nthe design not chosen (element-held state): {other['up']:,} bytes up, {other['down']:,} down a frame "
          f"(bank {other['bank_up']:,}); ~{design['not_chosen_overhead_ms_estimate']:.1f} ms on this loopback at the measured rate")
    for name, value in design['streams_at_30fps_on_10gbe'].items():
        print(f"  30 fps streams a 10 GbE link carries, {name}: {value:.0f}")


if __name__ == '__main__':
    sys.exit(main())
