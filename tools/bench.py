"""Benchmark: the installed `matanyone` element in a real pipeline against upstream PyTorch MatAnyone2,
on the same decoded frames at the same working size, in one run.

    scripts/bench.sh [--size 512x288] [--input-size 1920x1080] [--frames 60] [--engine matanyone2]
                     [--provider cpu] [--threads 0] [--precision fp32|int8|fp16|bf16] [--model-dir DIR]
                     [--placement MODEL=PLACEMENT,…]
                     [--rounds 3] [--no-upstream] [--json FILE]
    scripts/bench.sh --soak 5000 [--size 256x144] [--json FILE]

Prints per stage (pre-processing, each model, memory match + readout, post-processing) the median and
p95 in ms, frames per second, the element's peak RSS, upstream's time per frame (fp32, autocast off)
and the ratio, and the floor: the model's multiply-adds ÷ the peak this CPU reaches on a large MatMul
through ONNX Runtime (its own GEMM, with the element's thread count and session settings).
Beside it: the CPU's ISA and its theoretical fp32 peak (cores × FMA lanes × 2 × FMA units × the clock
/proc/cpuinfo reports — the current/nominal one, not boost, so the measured peak can exceed it), and
numpy's SGEMM for information only (it is not the floor: OpenBLAS may run older kernels than the
CPU has, e.g. under OPENBLAS_CORETYPE, while ONNX Runtime picks its own).
The first frames (seeding and its warm-up passes) are excluded from the figures.
Ours and upstream run in alternating rounds and each side's best round is reported (every round is
in the JSON): on a shared host a neighbour can slow one run by half, and the best of several is the
machine, as for the MatMul peak.
Frames reach the element at --input-size (the clip's 1080p by default, so the element's own cost —
scaling down to the working size and the alpha back up — is the 1080p one); upstream gets the same
frames already at the working size.
--soak N instead loops the clip's frames through the element N times and samples the process's RSS
while it runs: the memory bank fills early, so RSS must then stay flat.
With --precision int8, fp16 or bf16 the element runs that set, then once more with fp32 on the same
frames (same provider), and the alpha's deviation from fp32 is reported (mean, p99, max |Δα| and IoU
at 0.5; in the JSON as int8_deviation_from_fp32, fp16_... or bf16_deviation_from_fp32), with fp32's
time per frame in that run and the ratio; the JSON names the CPU's bf16 arithmetic (cpu_bf16).
--placement passes the element's model-placement (e.g. encoder=bf16) and compares with plain fp32 the
same way, whatever the precision; the JSON records where each model ran (model_placement).
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

from tools.matanyone2.bf16 import bf16_flags
from tools.matanyone2.media import alpha_deviation, decode_video_bgra

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("MATANYONE_SHARED", ROOT.parent / "shared"))
GMAC_512x288 = 35.1  # MatAnyone2 per frame at 512×288 (encoder 10.1, readout 4.2, decoder 13.1, mask encoder 7.7, rest)
STAT_LINE = re.compile(r"matanyone-stats, (.*);")
# A value runs to the next comma, or is a quoted string (GStreamer quotes and backslash-escapes any
# with characters such as "=" and ",": model-placement's).
FIELD = re.compile(r'([\w-]+)=\((\w+)\)("(?:[^"\\]|\\.)*"|[^,]+)')
REDUCED_PRECISIONS = ("int8", "fp16", "bf16")  # sets whose alpha the benchmark compares with fp32's


def unquote(text: str) -> str:
    """A string GStreamer quoted: a backslash escapes the next character, or gives a byte in octal
    (\\ooo, for bytes outside printable ASCII: UTF-8 then)."""
    out = bytearray()
    index = 0
    while index < len(text):
        if text[index] == "\\" and re.fullmatch(r"[0-7]{3}", text[index + 1:index + 4]):
            out.append(int(text[index + 1:index + 4], 8))
            index += 4
        elif text[index] == "\\" and index + 1 < len(text):
            out += text[index + 1].encode()
            index += 2
        else:
            out += text[index].encode()
            index += 1
    return out.decode("utf-8", errors="replace")


def parse_stats(text: str) -> list[dict]:
    rows = []
    for line in text.splitlines():
        match = STAT_LINE.search(line)
        if not match:
            continue
        row = {}
        for name, kind, value in FIELD.findall(match.group(1)):
            value = value.strip()
            value = unquote(value[1:-1]) if value.startswith('"') else value
            if kind in ("double", "float"):
                row[name] = float(value)
            elif kind in ("guint64", "uint", "int", "gint64"):
                row[name] = int(value)
            elif kind == "boolean":
                row[name] = value == "true"
            else:
                row[name] = value
        rows.append(row)
    return rows


def summary(values: list[float]) -> dict:
    if not values:
        return {"median": None, "p95": None}
    ordered = sorted(values)
    return {"median": statistics.median(ordered), "p95": ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]}


def numpy_sgemm_gflops(n: int = 2048, runs: int = 10) -> float:
    """Best of a few large float32 matrix products through numpy's BLAS, in GFLOP/s (information
    only: OpenBLAS's kernels and threads are not the ones the element's models run on)."""
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
    a @ b
    best = float("inf")
    for _ in range(runs):  # shared hosts: the best of several is the machine, not its neighbours
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / best / 1e9


def matmul_model(n: int) -> bytes:
    """A one-node ONNX graph c = a @ b, all float32 [n, n], serialised."""
    try:
        from onnx import TensorProto, helper
    except ImportError:
        return _matmul_model_bytes(n)
    tensors = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [n, n]) for name in "abc"]
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "matmul", tensors[:2], tensors[2:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8  # what any ONNX Runtime of recent years loads (onnx's default may be newer)
    return model.SerializeToString()


def _matmul_model_bytes(n: int) -> bytes:
    """matmul_model without the onnx package: the ModelProto written in protobuf's wire format."""
    def varint(v: int) -> bytes:
        out = bytearray()
        while True:
            out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
            v >>= 7
            if not v:
                return bytes(out)

    def field(number: int, value) -> bytes:  # int → varint field, bytes/str → length-delimited
        if isinstance(value, int):
            return varint(number << 3) + varint(value)
        value = value.encode() if isinstance(value, str) else value
        return varint(number << 3 | 2) + varint(len(value)) + value

    dim = field(1, field(1, n))  # TensorShapeProto.dim { dim_value: n }
    tensor_type = field(1, field(1, 1) + field(2, dim + dim))  # TypeProto.tensor_type { FLOAT, [n, n] }
    value_info = {name: field(1, name) + field(2, tensor_type) for name in "abc"}
    node = field(1, "a") + field(1, "b") + field(2, "c") + field(4, "MatMul")
    graph = field(1, node) + field(2, "matmul") + field(11, value_info["a"]) + field(11, value_info["b"]) \
        + field(12, value_info["c"])
    return field(1, 8) + field(7, graph) + field(8, field(1, "") + field(2, 13))


def ort_matmul_peak_gflops(threads: int = 0, n: int = 2048, runs: int = 10) -> float:
    """Best of `runs` float32 n×n×n MatMuls through ONNX Runtime's CPU provider, in GFLOP/s: the
    GEMM the element's models run on, in a session set up as the element's (OnnxRuntime.swift)."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.intra_op_num_threads = threads  # 0 = ONNX Runtime's default, one per physical core
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    session = ort.InferenceSession(matmul_model(n), options, providers=["CPUExecutionProvider"])
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), dtype=np.float32)
    # Bound once, the output preallocated: a run is the GEMM, not the allocation of its result.
    binding = session.io_binding()
    binding.bind_cpu_input("a", a)
    binding.bind_cpu_input("b", b)
    binding.bind_output("c", "cpu", 0, np.float32, [n, n], c.ctypes.data)
    session.run_with_iobinding(binding)  # warm-up: thread pool, packing buffers
    best = float("inf")
    for _ in range(runs):  # shared hosts: the best of several is the machine, not its neighbours
        start = time.perf_counter()
        session.run_with_iobinding(binding)
        best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / best / 1e9


def parse_cpuinfo(text: str) -> dict:
    """The first CPU's model, fp32 ISA and clock from /proc/cpuinfo text.

    lanes: fp32 lanes of one FMA; fma_units: FMAs per core and cycle at that width (2 on AVX2 and
    AVX-512 parts, but 1 on AMD Zen 4, family 25, which runs a 512-bit FMA as two halves on its two
    256-bit pipes; some Intel AVX-512 parts also have one 512-bit unit, which /proc/cpuinfo does not
    tell); without FMA, a multiply and an add pipe give the same 2 flops per lane and cycle, hence 1.
    ghz: "cpu MHz", the current or nominal clock, not boost (None where absent, e.g. on ARM)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:  # end of the first processor's block
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    if not flags:
        isa, lanes, fma_units = "unknown", None, None
    elif "avx512f" in flags:
        zen4 = fields.get("vendor_id") == "AuthenticAMD" and fields.get("cpu family") == "25"
        isa, lanes, fma_units = "avx512f", 16, 1 if zen4 else 2
    elif {"avx2", "fma"} <= flags:
        isa, lanes, fma_units = "avx2+fma", 8, 2
    else:
        isa, lanes, fma_units = "sse", 4, 1
    try:
        ghz = float(fields["cpu MHz"]) / 1000
    except (KeyError, ValueError):
        ghz = None
    try:
        threads_per_core = max(1, int(fields["siblings"]) // int(fields["cpu cores"]))
    except (KeyError, ValueError, ZeroDivisionError):
        threads_per_core = 1
    return {"model": fields.get("model name", "unknown"), "isa": isa, "lanes": lanes, "fma_units": fma_units,
            "ghz": ghz, "threads_per_core": threads_per_core,
            "bf16": bf16_flags(flags)}


def theoretical_gflops(cores: int, lanes: int | None, fma_units: int | None, ghz: float | None) -> float | None:
    """cores × lanes × 2 (an FMA is two flops) × FMA units × GHz; None where a part is unknown."""
    if not (lanes and fma_units and ghz):
        return None
    return cores * lanes * 2 * fma_units * ghz


def cpu_description(threads: int = 0, cpuinfo: str | None = None) -> dict:
    """ISA, cores used and theoretical fp32 peak of this CPU for a run with `threads` intra-op threads
    (0 = one per core this process may use), and OPENBLAS_CORETYPE if set."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    info = parse_cpuinfo(cpuinfo)
    try:
        logical = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        logical = os.cpu_count() or 1
    cores = max(1, logical // info["threads_per_core"])  # SMT siblings share their core's FMA units
    if threads > 0:
        cores = min(threads, cores)
    return {"model": info["model"], "isa": info["isa"], "cores_used": cores, "ghz": info["ghz"],
            "theoretical_gflops": theoretical_gflops(cores, info["lanes"], info["fma_units"], info["ghz"]),
            "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"), "bf16": info["bf16"]}


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return {"cpu": cpu, "cores": os.cpu_count(), "avx2": " avx2" in flags, "avx512f": " avx512f" in flags,
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30, 1),
            "platform": platform.platform()}


def element_description(args, width: int, height: int, mask: Path, precision: str, stats_interval: int,
                        placement: str | None = None) -> str:
    """`placement`: the element's model-placement (None: --placement's)."""
    element = (f"matanyone engine={args.engine} working-size={min(width, height)} threads={args.threads} "
               f"execution-provider={args.provider} precision={precision} stats-interval={stats_interval}")
    placement = args.placement if placement is None else placement
    if placement:
        element += f" model-placement={placement}"
    if args.model_dir:
        element += f" model-dir={args.model_dir}"
    if args.engine == "matanyone2":
        element += f" seed=mask seed-mask={mask} max-people={args.people} watch-interval=0"
    return element


def labelled_mask(person: np.ndarray, people: int) -> np.ndarray:
    """The clip's person (grey 100) plus people−1 square stand-ins (grey 200, 150, …) where the mask is
    empty: --people N tracks N separate people on the same frames (each stand-in is tracked as an
    object of its own, which costs what a person costs)."""
    height, width = person.shape
    labelled = np.where(person >= 128, 100, 0).astype(np.uint8)
    side = max(16, min(width, height) // 4)
    taken = person >= 128
    for index in range(1, people):
        for top in range(8, height - side - 8, 8):
            spot = next((left for left in range(8, width - side - 8, 8)
                         if not taken[max(top - 8, 0):top + side + 8, max(left - 8, 0):left + side + 8].any()), None)
            if spot is not None:
                labelled[top:top + side, spot:spot + side] = 250 - 50 * index
                taken[top:top + side, spot:spot + side] = True
                break
        else:
            sys.exit(f"bench: no room for {people} people at this working size")
    return labelled


def run_element(args, width: int, height: int, count: int, mask: Path, precision: str,
                alpha_out: Path, composite: str = "", placement: str | None = None) -> tuple[list[dict], float, int]:
    """`composite`: extra element properties for a BGRA composite output (else GRAY8 alpha)."""
    element = element_description(args, width, height, mask, precision, 1, placement) + (f" {composite}" if composite else "")
    output = "video/x-raw,format=BGRA ! fakesink" if composite else f"video/x-raw,format=GRAY8 ! filesink location={alpha_out}"
    in_width, in_height = args.input_width, args.input_height
    pipeline = (f"filesrc location={args.clip} ! decodebin ! videoconvert ! videoscale "
                f"! video/x-raw,format=BGRA,width={in_width},height={in_height} ! identity eos-after={count + 1} "
                f"! {element} ! {output}")
    # Peak RSS from the process's own high-water mark, read while it runs: getrusage(RUSAGE_CHILDREN)
    # would also count the moment between fork and exec, when the child is a copy of this Python
    # process with PyTorch loaded.
    output, returncode, samples, wall = launch(pipeline, interval=0.2)
    if returncode != 0:
        sys.exit(f"bench: the pipeline failed:\n{output[-6000:]}")
    return parse_stats(output), wall, max((hwm for _, _, hwm in samples), default=0)


def launch(pipeline: str, interval: float) -> tuple[str, int, list[tuple[float, int, int]], float]:
    """Runs `gst-launch-1.0 -m PIPELINE`, sampling the process's VmRSS and VmHWM (kB) every
    `interval` seconds. Returns its output, exit status, the samples (seconds since start, RSS, HWM)
    and the wall time."""
    start = time.perf_counter()
    samples = []
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(["gst-launch-1.0", "-m"] + pipeline.split(), stdout=log, stderr=subprocess.STDOUT,
                                   text=True)
        while process.poll() is None:
            rss, hwm = proc_status_kib(process.pid, "VmRSS"), proc_status_kib(process.pid, "VmHWM")
            if rss:
                samples.append((time.perf_counter() - start, rss, hwm))
            time.sleep(interval)
        wall = time.perf_counter() - start
        log.seek(0)
        return log.read(), process.returncode, samples, wall


def proc_status_kib(pid: int, field: str) -> int:
    """A kB field of /proc/PID/status (0 once the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def run_upstream(frames_file: Path, width: int, height: int, count: int, mask: Path, threads: int) -> list[float]:
    """Seconds per frame of upstream InferenceCore on the same frames (frame 0 includes seeding)."""
    import torch
    from tools.matanyone2 import media, network
    from tools.matanyone2.reference import run_reference
    if threads:
        torch.set_num_threads(threads)
    frames = media.read_bgra_frames(frames_file, width, height, count)
    seed = media.read_mask(mask, width, height)
    net = network.build_network(random_init_seed=0).net
    stamps = [time.perf_counter()]
    run_reference(net, frames, seed, log=lambda _: stamps.append(time.perf_counter()))
    return [b - a for a, b in zip(stamps, stamps[1:])]


def soak(args, width: int, height: int, mask: Path, work: Path) -> int:
    """Loops the clip's frames (decoded once at the working size) through the element `args.soak`
    times, sampling the gst-launch-1.0 process's RSS every second."""
    frames_file = work / f"frames-{width}x{height}-all.bgra"
    decode_video_bgra(args.clip, frames_file, width, height)
    clip_frames = frames_file.stat().st_size // (width * height * 4)
    element = element_description(args, width, height, mask, args.precision, args.soak)
    # multifilesrc re-reads the file forever; rawvideoparse cuts it into frames; identity ends the run
    # (behind a queue: rawvideoparse pushes the rest of a file's frames past an EOS return).
    pipeline = (f"multifilesrc location={frames_file} loop=true ! rawvideoparse format=bgra width={width} "
                f"height={height} framerate=25/1 ! queue max-size-buffers=4 ! identity eos-after={args.soak + 1} ! {element} "
                f"! video/x-raw,format=GRAY8 ! fakesink sync=false")
    print(f"soak: {args.soak} frames ({clip_frames}-frame clip looped) at {width}×{height} …", flush=True)
    output, returncode, rss_samples, wall = launch(pipeline, interval=1.0)
    samples = [(t, rss / 1024) for t, rss, _ in rss_samples]  # (seconds, MiB)
    if returncode != 0 or len(samples) < 20:
        sys.exit(f"bench: the soak pipeline failed or ended too soon:\n{output[-3000:]}")
    stats = parse_stats(output)
    last = stats[-1] if stats else {}
    if last.get("frame") != args.soak:
        sys.exit(f"bench: the soak processed {last.get('frame')} frames, not {args.soak}")
    # Early = once a tenth of the run is behind us (seeding done, the memory bank long full).
    early = next(mib for t, mib in samples if t >= 0.1 * wall)
    late = samples[-1][1]
    peak = max(mib for _, mib in samples)
    print(f"\nframes               {args.soak} in {wall:.0f} s ({args.soak / wall:.2f} fps), {len(samples)} RSS samples")
    print(f"RSS at 10 % of run   {early:.0f} MiB")
    print(f"RSS at the end       {late:.0f} MiB (growth {late - early:+.1f} MiB)")
    print(f"peak RSS             {peak:.0f} MiB")
    print(f"memory frames        {last.get('memory-frames')} at the end (the bank is bounded)")
    result = {
        "machine": machine(), "engine": args.engine, "precision": args.precision, "mode": "soak",
        "working_size": [width, height], "frames": args.soak, "clip_frames": clip_frames, "wall_s": wall,
        "rss_mib": {"at_10_percent": early, "end": late, "growth": late - early, "peak": peak},
        "memory_frames_at_end": last.get("memory-frames"),
        "rss_trace_mib": [[round(t, 1), round(mib, 1)] for t, mib in samples[::max(1, len(samples) // 200)]],
        "date": time.strftime("%Y-%m-%d"),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    print(f"\nJSON: {args.json}")
    return 0


def deviation(test: Path, reference: Path, width: int, height: int, skip: int, count: int) -> dict:
    """|Δα| of one run's GRAY8 alphas against another's, over the measured frames (in [0, 1]): the
    first `count` frames only, since `identity eos-after` behind decodebin lets a varying number of
    further frames through when the element is slow, not the same ones from run to run."""
    size = width * height
    a = np.fromfile(test, dtype=np.uint8)
    b = np.fromfile(reference, dtype=np.uint8)
    frames = min(a.size // size, b.size // size, count)
    if frames <= skip:
        sys.exit("bench: the alpha outputs are too short to compare")
    a = a[skip * size:frames * size].astype(np.float32) / 255
    b = b[skip * size:frames * size].astype(np.float32) / 255
    return {"frames": frames - skip, **alpha_deviation(a, b)}


def precision_deviation(args, width: int, height: int, count: int, mask: Path, alpha: Path, work: Path) -> dict | None:
    """For --precision int8, fp16 or bf16, or a --placement (MatAnyone2): the element once more with fp32
    (no placement) on the same frames, and the deviation of the alpha (already in `alpha`) from fp32's,
    with fp32's time per frame in that run. None for plain fp32 or the segmenter."""
    if (args.precision not in REDUCED_PRECISIONS and not args.placement) or args.engine != "matanyone2":
        return None
    what = " ".join(filter(None, [args.precision, args.placement]))
    print(f"running the element again with fp32 for the deviation of {what} …", flush=True)
    reference = work / f"alpha-fp32-{width}x{height}.gray"
    fp32_rows, _, _ = run_element(args, width, height, count, mask, "fp32", reference, placement="")
    result = deviation(alpha, reference, args.input_width, args.input_height, args.skip, count + 1)
    fp32_total = [r["total-ms"] for r in fp32_rows if r.get("frame", 0) > args.skip]
    result["fp32_total_ms_same_run"] = summary(fp32_total)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clip", type=Path, default=SHARED / "media" / "test-sample2.mp4")
    parser.add_argument("--mask", type=Path, default=SHARED / "media" / "test-sample2.png",
                        help="first-frame mask of the clip (resized to the working size)")
    parser.add_argument("--size", default="512x288", help="working size WxH (the element scales frames to it)")
    parser.add_argument("--input-size", default="1920x1080",
                        help="frame size WxH the element receives (the clip is 1920x1080)")
    parser.add_argument("--soak", type=int, metavar="N",
                        help="instead: N frames of the looped clip, RSS sampled (flat after the bank fills?)")
    parser.add_argument("--frames", type=int, default=60, help="measured frames (after the excluded warm-up)")
    parser.add_argument("--skip", type=int, default=3, help="first frames excluded (seeding, warm-up)")
    parser.add_argument("--engine", default="matanyone2", choices=["matanyone2", "segmenter"])
    parser.add_argument("--provider", default="cpu", choices=["cpu", "cuda", "tensorrt", "openvino", "auto"])
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--precision", default="fp32", choices=["fp32"] + list(REDUCED_PRECISIONS),
                        help="MatAnyone2 model set; int8 and fp16 also report their deviation from fp32")
    parser.add_argument("--model-dir", help="model folder (default: the installed one)")
    parser.add_argument("--placement", default="",
                        help="the element's model-placement, e.g. encoder=bf16 (compared with plain fp32 on the same frames)")
    parser.add_argument("--composite", action="store_true",
                        help="also time background=color composites with edge-colors=estimated and original "
                             "(the cost of the halo-free edge colours per frame) and background=blur")
    parser.add_argument("--people", type=int, default=1,
                        help="MatAnyone2: track this many people (the clip's dancer plus stand-ins); "
                             "prints each person's own time, i.e. the cost of an extra person")
    parser.add_argument("--no-upstream", action="store_true", help="skip the PyTorch comparison")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternating rounds of ours and upstream; each side's best round is reported")
    parser.add_argument("--json", type=Path, default=ROOT / "build" / "bench" / "result.json")
    args = parser.parse_args(argv)
    args.placement = "".join(args.placement.split())  # one gst-launch argument: no spaces

    if args.rounds < 1:
        sys.exit("bench: --rounds must be at least 1")
    width, height = (int(v) for v in args.size.lower().split("x"))
    args.input_width, args.input_height = (int(v) for v in args.input_size.lower().split("x"))
    if args.input_width * height != args.input_height * width:  # else the element's working size differs
        sys.exit(f"bench: --input-size {args.input_size} must have the aspect of the working size {args.size}")
    count = args.frames + args.skip
    work = ROOT / "build" / "bench"
    work.mkdir(parents=True, exist_ok=True)
    from PIL import Image
    mask = work / f"mask-{width}x{height}.png"
    Image.open(args.mask).convert("L").resize((width, height), Image.NEAREST).save(mask)
    if args.people > 1:
        mask = work / f"mask-{width}x{height}-{args.people}-people.png"
        person = np.asarray(Image.open(args.mask).convert("L").resize((width, height), Image.NEAREST))
        Image.fromarray(labelled_mask(person, args.people)).save(mask)
    if args.soak:
        return soak(args, width, height, mask, work)

    # Rounds alternate ours and upstream; each side's figure is its best round (as for the MatMul
    # peak: on a shared host the best of several runs is the machine, not its neighbours).
    run_upstream_too = not args.no_upstream and args.engine == "matanyone2"
    frames_file = work / f"frames-{width}x{height}.bgra"
    if run_upstream_too:
        decode_video_bgra(args.clip, frames_file, width, height, count=count)
    alpha = work / f"alpha-{args.precision}-{width}x{height}.gray"
    rounds = []
    for index in range(args.rounds):
        label = f"round {index + 1}/{args.rounds}: "
        print(f"{label}measuring this CPU's MatMul peak (ONNX Runtime; numpy SGEMM beside it) …", flush=True)
        # numpy first: OpenBLAS's threads spin for a moment after a call; ORT's warm-up run absorbs it.
        sgemm = numpy_sgemm_gflops()
        peak = ort_matmul_peak_gflops(args.threads)
        print(f"{label}the element: {args.engine} ({args.precision}), {args.input_width}×{args.input_height} "
              f"frames at working size {width}×{height}, {count} frames …", flush=True)
        rows, wall, peak_kib = run_element(args, width, height, count, mask, args.precision, alpha)
        measured = [r for r in rows if r.get("frame", 0) > args.skip]
        if len(measured) < args.frames * 0.9:
            sys.exit(f"bench: only {len(measured)} measured frames came back (dropped: "
                     f"{rows[-1].get('frames-dropped') if rows else '?'})")
        upstream_round = None
        if run_upstream_too:
            print(f"{label}upstream PyTorch InferenceCore on the same {count} frames …", flush=True)
            per_frame = run_upstream(frames_file, width, height, count, mask, args.threads)
            upstream_round = summary([s * 1000 for s in per_frame[args.skip:]])
        rounds.append({"peak": peak, "sgemm": sgemm, "rows": rows, "measured": measured, "peak_kib": peak_kib,
                       "total": summary([r["total-ms"] for r in measured]), "upstream": upstream_round})
    best = min(rounds, key=lambda r: r["total"]["median"])
    rows, measured = best["rows"], best["measured"]
    peak = max(r["peak"] for r in rounds)
    sgemm = max(r["sgemm"] for r in rounds)
    cpu = cpu_description(args.threads)
    peak_kib = max(r["peak_kib"] for r in rounds)
    upstream = min((r["upstream"] for r in rounds if r["upstream"]), key=lambda u: u["median"], default=None)
    model_fields = [k for k in measured[0] if k.endswith("-ms") and not k.startswith("person-") and k not in
                    ("preprocess-ms", "inference-ms", "postprocess-ms", "total-ms", "memory-ms", "latency-ms", "seed-ms")]
    people_ms = {k[:-3]: summary([r[k] for r in measured if k in r]) for k in measured[0] if k.startswith("person-")}
    stages = {"preprocess": summary([r["preprocess-ms"] for r in measured])}
    for field in model_fields:
        values = [r[field] for r in measured if r[field] > 0]
        if values:
            stages[field[:-3]] = summary(values)
    stages["memory match + readout"] = summary([r["memory-ms"] for r in measured])
    stages["postprocess"] = summary([r["postprocess-ms"] for r in measured])
    overhead = [r["total-ms"] - sum(r[f] for f in model_fields) - r["memory-ms"] for r in measured]
    stages[f"element overhead at {args.input_width}×{args.input_height}"] = summary(overhead)
    stages["total"] = summary([r["total-ms"] for r in measured])
    total_median = stages["total"]["median"]
    fps = 1000.0 / statistics.mean(r["total-ms"] for r in measured)
    seed_ms = next((r["seed-ms"] for r in rows if "seed-ms" in r), None)

    pixels_ratio = width * height / (512 * 288)
    gmac = GMAC_512x288 * pixels_ratio if args.engine == "matanyone2" else None
    floor_ms = gmac * 2 / peak * 1000 if gmac else None

    precision_dev = precision_deviation(args, width, height, count, mask, alpha, work)
    composite_ms = {}
    if args.composite:
        for name, properties in (("original", "background=color edge-colors=original"),
                                 ("estimated", "background=color edge-colors=estimated"),
                                 ("blur", "background=blur edge-colors=original")):
            print(f"the element again, composite: {properties} …", flush=True)
            composite_rows, _, _ = run_element(args, width, height, count, mask, args.precision, alpha, composite=properties)
            kept = [r for r in composite_rows if r.get("frame", 0) > args.skip]
            composite_ms[name] = summary([r["postprocess-ms"] for r in kept])

    print()
    print(f"{'stage':38s} {'median ms':>10s} {'p95 ms':>10s}")
    for name, s in stages.items():
        print(f"{name:38s} {s['median']:10.2f} {s['p95']:10.2f}")
    print(f"\nframes measured      {len(measured)} (first {args.skip} excluded), best of {args.rounds} rounds")
    for index, r in enumerate(rounds):
        theirs = f", upstream {r['upstream']['median']:.0f} ms" if r["upstream"] else ""
        print(f"  round {index + 1}          ours {r['total']['median']:.0f} ms{theirs}, MatMul peak {r['peak']:.0f} GFLOP/s "
              f"(numpy SGEMM {r['sgemm']:.0f})")
    print(f"frames per second    {fps:.2f}")
    print(f"peak RSS             {peak_kib / 1024:.0f} MiB (the gst-launch-1.0 process)")
    if seed_ms is not None:
        print(f"seeding (warm-up)    {seed_ms:.0f} ms")
    clock = f"{cpu['ghz']:.2f} GHz per /proc/cpuinfo, not boost" if cpu["ghz"] else "clock unknown"
    theoretical = cpu["theoretical_gflops"]
    print(f"CPU                  {cpu['model']} ({cpu['isa']}, {cpu['cores_used']} cores used, {clock}): "
          f"theoretical fp32 peak {f'{theoretical:.0f} GFLOP/s' if theoretical else 'unknown'}")
    share = f" ({100 * peak / theoretical:.0f} % of theoretical)" if theoretical else ""
    # OPENBLAS_CORETYPE pins OpenBLAS (numpy, and the element's memory match) to a kernel set; ORT ignores it.
    coretype = cpu["openblas_coretype"]
    coretype = f"OPENBLAS_CORETYPE={coretype}" if coretype else "OPENBLAS_CORETYPE not set"
    print(f"MatMul peak (ORT)    {peak:.0f} GFLOP/s{share}; numpy SGEMM {sgemm:.0f} GFLOP/s ({coretype})")
    if floor_ms:
        note = " (an fp32 floor: int8 arithmetic is not bound by it)" if args.precision == "int8" else ""
        print(f"floor                {floor_ms:.0f} ms/frame ({gmac:.1f} GMAC at the ORT MatMul peak); "
              f"ours = {total_median / floor_ms:.2f}× the floor{note}")
    fp32_median = precision_dev["fp32_total_ms_same_run"]["median"] if precision_dev else None
    speedup = fp32_median / total_median if fp32_median else None  # over fp32 on the same frames, this run
    if precision_dev:
        d = precision_dev
        label = f"{args.precision}{' ' + args.placement if args.placement else ''} vs fp32 alpha"
        print(f"{label:21s}mean |Δα| {d['mean_abs']:.4f}, p99 {d['p99_abs']:.4f}, max {d['max_abs']:.4f}, "
              f"IoU@0.5 {d['iou_at_0.5']:.4f} ({d['frames']} frames)")
        if speedup:
            speed = f"{speedup:.2f}× faster" if speedup >= 1 else f"{1 / speedup:.2f}× slower"
            what = f"{args.precision} {args.placement}" if args.placement else args.precision
            print(f"fp32, same frames    {fp32_median:.0f} ms/frame median; {what} is {speed}")
    placed = next((r["model-placement"] for r in measured if "model-placement" in r), None)
    if placed:
        print(f"model placement      {placed}")
    if composite_ms:
        plain, estimated = composite_ms["original"]["median"], composite_ms["estimated"]["median"]
        print(f"composite at {args.input_width}×{args.input_height}  postprocess {plain:.1f} ms plain blending, "
              f"{estimated:.1f} ms with estimated edge colours: +{estimated - plain:.1f} ms/frame "
              f"({100 * (estimated - plain) / total_median:.0f} % of this engine's {total_median:.1f} ms frame)")
        blurred = composite_ms["blur"]["median"]
        print(f"background=blur      postprocess {blurred:.1f} ms: the blur costs +{blurred - plain:.1f} ms/frame over a colour")
    if len(people_ms) > 1:
        extra = statistics.mean(s["median"] for name, s in people_ms.items() if name != "person-1")
        shared = stages.get("encoder", {}).get("median", 0)
        print(f"people               {len(people_ms)}: " + ", ".join(f"{k} {s['median']:.0f} ms" for k, s in people_ms.items())
              + f"; each extra person costs ~{extra:.0f} ms/frame (the encoder, {shared:.0f} ms, runs once for all)")
    if upstream:
        print(f"upstream PyTorch     {upstream['median']:.0f} ms/frame median (p95 {upstream['p95']:.0f}); "
              f"ours is {upstream['median'] / total_median:.2f}× faster")

    result = {
        "machine": machine(), "engine": args.engine, "provider": args.provider, "threads": args.threads,
        "precision": args.precision,
        "int8_deviation_from_fp32": precision_dev if args.precision == "int8" and not args.placement else None,
        "fp16_deviation_from_fp32": precision_dev if args.precision == "fp16" and not args.placement else None,
        "bf16_deviation_from_fp32": precision_dev if args.precision == "bf16" and not args.placement else None,
        "placement": args.placement or None, "model_placement": placed, "deviation_from_fp32": precision_dev,
        "speedup_vs_fp32_same_run": speedup,
        "cpu_bf16": cpu["bf16"],
        "working_size": [width, height], "input_size": [args.input_width, args.input_height], "frames_measured": len(measured), "skipped": args.skip,
        "stages_ms": stages, "fps": fps, "people": args.people, "person_ms": people_ms,
        "composite_postprocess_ms": composite_ms or None, "peak_rss_mib": peak_kib / 1024, "seed_ms": seed_ms,
        "cpu_peak_gflops": peak,  # the peak the floor uses: the ORT MatMul's (numpy's SGEMM before)
        "ort_matmul_peak_gflops": peak, "numpy_sgemm_gflops": sgemm, "openblas_coretype": cpu["openblas_coretype"],
        "cpu_model": cpu["model"], "cpu_isa": cpu["isa"], "cpu_cores_used": cpu["cores_used"],
        "cpu_clock_ghz": cpu["ghz"], "cpu_theoretical_gflops": theoretical,
        "floor_ms": floor_ms,
        "ratio_to_floor": total_median / floor_ms if floor_ms else None,
        "upstream_ms": upstream, "speedup_vs_upstream": upstream["median"] / total_median if upstream else None,
        "frames_dropped": rows[-1].get("frames-dropped") if rows else None,
        "rounds": [{"total_median_ms": r["total"]["median"], "cpu_peak_gflops": r["peak"], "numpy_sgemm_gflops": r["sgemm"],
                    "upstream_median_ms": r["upstream"]["median"] if r["upstream"] else None} for r in rounds],
        "date": time.strftime("%Y-%m-%d"),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    print(f"\nJSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
