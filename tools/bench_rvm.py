"""Benchmark: the installed element's Robust Video Matting against Python ONNX Runtime on the same
frames, at several sizes, in one run.

    scripts/bench.sh --engines rvm [--sizes 512x288,1280x720,1920x1080] [--frames 40] [--rounds 3]
                     [--threads 0] [--ratio 0] [--bf16] [--json FILE]

For each size the dancer clip (../shared/media/test-sample2.mp4) is decoded once to raw BGRA at that
size. The element runs it in a real pipeline (filesrc ! rawvideoparse ! matanyone engine=rvm
stats-interval=1 ! GRAY8 ! fakesink); its time per frame is the stats' total-ms (conversion of the
frame to the network's float planes, the network, the alpha back to 8 bits). Python ONNX Runtime (the
same ONNX Runtime release, the same thread count, the authors' recipe: frame / 255 as float32 NCHW,
recurrent states carried) is timed over the same frames, its conversion and quantisation included.
The two sides alternate for --rounds rounds and each side's best round (by median) is reported: on
a shared host a neighbour can slow one run. The first frame (the engine's probe of the states'
shapes; the runtime's first run) is left out of both. Also checked: the element's alphas against
Python's, byte for byte (worst |difference| in LSB). With --bf16 the element also runs precision=bf16
(OpenVINO's bfloat16, where the CPU computes it) in the same rounds, with its deviation from fp32
(mean |dalpha|, IoU of the masks at 0.5).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tools.rvm import reference

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("MATANYONE_SHARED", ROOT.parent / "shared"))
MODELS = Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local/share")) / "gst-matanyone" / "models"
STAT = re.compile(r"matanyone-stats, (.*);")
FIELD = re.compile(r'([\w-]+)=\((\w+)\)("(?:[^"\\]|\\.)*"|[^,]+)')


def cpu_description() -> dict:
    info = Path("/proc/cpuinfo").read_text()
    model = re.search(r"model name\s*:\s*(.*)", info)
    flags = set(re.search(r"flags\s*:\s*(.*)", info).group(1).split())
    isa = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "x86-64"
    extras = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
    return {"model": model.group(1).strip() if model else platform.processor(), "cores": os.cpu_count(),
            "isa": isa + ("+" + "+".join(extras) if extras else "")}


def decode(size: tuple[int, int], frames: int, work: Path) -> Path:
    width, height = size
    out = work / f"dancer-{width}x{height}.bgra"
    if not out.exists() or out.stat().st_size < width * height * 4 * frames:
        subprocess.run(["gst-launch-1.0", "-q", "filesrc", f"location={SHARED / 'media' / 'test-sample2.mp4'}", "!",
                        "decodebin", "!", "videoconvert", "!", "videoscale", "!",
                        f"video/x-raw,format=BGRA,width={width},height={height}", "!", "identity",
                        f"eos-after={frames + 1}", "!", "filesink", f"location={out}"], check=True)
    return out


def element_round(path: Path, size, frames: int, args, alphas: Path, precision: str = "fp32") -> dict:
    width, height = size
    element = (f"matanyone engine=rvm stats-interval=1 threads={args.threads} downsample-ratio={args.ratio} "
               f"precision={precision}")
    if args.model_dir:
        element += f" model-dir={args.model_dir}"
    description = (f"filesrc location={path} ! rawvideoparse format=bgra width={width} height={height} framerate=30/1 "
                   f"! identity eos-after={frames + 1} ! {element} ! video/x-raw,format=GRAY8 "
                   f"! filesink location={alphas}")
    started = time.monotonic()
    out = subprocess.run(["gst-launch-1.0", "-m", *description.split(" ")], capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if out.returncode != 0:
        sys.exit(f"bench_rvm: the element's pipeline failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    stats = [dict((k, v) for k, _, v in FIELD.findall(m.group(1))) for m in STAT.finditer(out.stdout)]
    total = [float(s["total-ms"]) for s in stats][1:]
    return {"median_ms": statistics.median(total), "p95_ms": float(np.percentile(total, 95)),
            "inference_ms": statistics.median(float(s["inference-ms"]) for s in stats[1:]),
            "preprocess_ms": statistics.median(float(s["preprocess-ms"]) for s in stats[1:]),
            "postprocess_ms": statistics.median(float(s["postprocess-ms"]) for s in stats[1:]),
            "ratio": float(stats[0].get("downsample-ratio", "nan")), "wall_s": elapsed,
            "engine": stats[0].get("engine"), "precision": stats[0].get("precision")}


def python_round(frames: np.ndarray, args) -> tuple[dict, np.ndarray]:
    matting = reference.Matting(Path(args.model_dir or MODELS) / "rvm", args.ratio, args.threads)
    times, out = [], []
    for frame in frames:
        start = time.perf_counter()
        out.append(reference.quantise(matting.alpha(frame)))
        times.append((time.perf_counter() - start) * 1000)
    times = times[1:]
    return {"median_ms": statistics.median(times), "p95_ms": float(np.percentile(times, 95))}, np.stack(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default="rvm", help="rvm (this benchmark)")
    parser.add_argument("--sizes", default="512x288,1280x720,1920x1080")
    parser.add_argument("--frames", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="0: one per core (the element's default)")
    parser.add_argument("--ratio", type=float, default=0.0, help="downsample-ratio (0: the element's rule)")
    parser.add_argument("--model-dir", default="", help="folder holding rvm/ (default: the installed sets)")
    parser.add_argument("--bf16", action="store_true", help="also precision=bf16 (OpenVINO), with its deviation from fp32")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.engines != "rvm":
        sys.exit("bench_rvm: --engines rvm (MatAnyone2: scripts/bench.sh without --engines; live chains: --live)")
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    cpu = cpu_description()
    print(f"CPU: {cpu['model']}, {cpu['cores']} cores, {cpu['isa']}; threads={args.threads or 'all'}")
    results = []
    with tempfile.TemporaryDirectory(dir=ROOT / "build") as scratch:
        work = ROOT / "build" / "bench"
        work.mkdir(parents=True, exist_ok=True)
        for text in args.sizes.split(","):
            size = tuple(int(v) for v in text.lower().split("x"))
            path = decode(size, args.frames, work)
            frames = np.fromfile(path, np.uint8)[: size[0] * size[1] * 4 * args.frames].reshape(-1, size[1], size[0], 4)
            ours, theirs, reduced, python_alphas = [], [], [], None
            alphas, bf16_alphas = Path(scratch) / "alphas.gray", Path(scratch) / "bf16.gray"
            for _ in range(args.rounds):
                ours.append(element_round(path, size, args.frames, args, alphas))
                if args.bf16:
                    reduced.append(element_round(path, size, args.frames, args, bf16_alphas, "bf16"))
                figures, python_alphas = python_round(frames, args)
                theirs.append(figures)
            element_alphas = np.fromfile(alphas, np.uint8).reshape(-1, size[1], size[0])
            worst = int(np.abs(element_alphas.astype(int) - python_alphas[: len(element_alphas)].astype(int)).max())
            best_ours = min(ours, key=lambda r: r["median_ms"])
            best_theirs = min(theirs, key=lambda r: r["median_ms"])
            speedup = best_theirs["median_ms"] / best_ours["median_ms"]
            result = {"size": f"{size[0]}x{size[1]}", "frames": args.frames, "element": best_ours, "python_onnxruntime": best_theirs,
                      "speedup": round(speedup, 3), "worst_lsb_vs_python": worst,
                      "rounds": {"element": ours, "python_onnxruntime": theirs},
                      "target_no_slower": speedup >= 1.0, "aim_1_3x": speedup >= 1.3}
            if args.bf16:
                best_bf16 = min(reduced, key=lambda r: r["median_ms"])
                a = np.fromfile(bf16_alphas, np.uint8).astype(np.float32)
                b = np.fromfile(alphas, np.uint8).astype(np.float32)[: a.size]
                both, either = np.logical_and(a >= 128, b >= 128).sum(), np.logical_or(a >= 128, b >= 128).sum()
                result["element_bf16"] = best_bf16
                result["bf16_speedup_over_fp32"] = round(best_ours["median_ms"] / best_bf16["median_ms"], 3)
                result["bf16_deviation_from_fp32"] = {"mean_abs": float(np.abs(a - b).mean() / 255),
                                                      "max_abs": float(np.abs(a - b).max() / 255),
                                                      "iou": float(both / max(either, 1))}
                result["rounds"]["element_bf16"] = reduced
            results.append(result)
            print(f"{result['size']:>10s} ratio {best_ours['ratio']:.4g}: element {best_ours['median_ms']:.1f} ms "
                  f"(p95 {best_ours['p95_ms']:.1f}; network {best_ours['inference_ms']:.1f}, in {best_ours['preprocess_ms']:.1f}, "
                  f"out {best_ours['postprocess_ms']:.1f}) vs Python ONNX Runtime {best_theirs['median_ms']:.1f} ms "
                  f"(p95 {best_theirs['p95_ms']:.1f}): {speedup:.2f}x; alphas within {worst} LSB")
            if args.bf16:
                d = result["bf16_deviation_from_fp32"]
                print(f"{'':>10s} element bf16 {result['element_bf16']['median_ms']:.1f} ms: "
                      f"{result['bf16_speedup_over_fp32']:.2f}x its fp32; mean |dα| {d['mean_abs']:.4f}, IoU {d['iou']:.4f}")
    report = {"benchmark": "rvm element vs Python ONNX Runtime", "cpu": cpu, "threads": args.threads,
              "date": time.strftime("%Y-%m-%d"), "results": results}
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
