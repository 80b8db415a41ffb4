"""Live-chain benchmark: the installed `matanyone` element between a live 30 fps source and a clock-synced
sink, the way a camera pipeline runs it, for each mode (sync, async) × engine (matanyone2, segmenter).

    scripts/bench.sh --live [--modes sync,async] [--engines matanyone2,segmenter] [--duration 60]
                            [--size 512x288] [--input 1280x720] [--fps 30] [--async-delay 0]
                            [--model-dir DIR] [--json FILE] [--commit [--out-dir bench/]]

Each configuration is one gst-launch-1.0 run of `--duration` seconds (fps × duration buffers):

    videotestsrc is-live=true pattern=ball ! video/x-raw,format=BGRA,1280×720,30/1
      ! matanyone [mode=… async-delay=…] engine=… working-size=288 stats-interval=1 [model-dir=…]
      ! video/x-raw,format=BGRA ! fpsdisplaysink (fakesink sync=true max-lateness=20 ms qos=true)

With `--source clip` the source is a real clip instead (the dancer in ../shared/media/test-sample2.mp4
unless `--clip` names another): its first frames are decoded once to raw BGRA files at the input size
(build/bench/clip-WxH/, up to 96 frames, about 800 MB at 1080p) and replayed in a loop by multifilesrc
and rawvideoparse at `--fps`, paced by the syncing sink. A frame then costs the source one file read from
the page cache (about 1 ms at 1080p): like a capture card, whose DMA costs the CPU nothing, and unlike
videotestsrc, whose own 1080p rendering takes 12 ms a frame on the streaming thread. It is clock-paced,
not a live source (no is-live), so the reported latency is not exercised; QoS from the sink is.
`--outputs` picks what the element makes (each a run of its own): default (BGRA with the element's
defaults), gray (GRAY8 alpha), color (BGRA over a colour with estimated edge colours) and none
(BGRA with background=none). `--element-p95-ms` adds a target on the element's own time per frame
(total-ms p95).

run with `-m -v` under GST_TRACERS=latency. No queue: the element works on the source's thread, as in
the README's simplest live pipeline. MatAnyone2 is seeded from a fixed mask (a white ball on black,
made once with videotestsrc): its person segmenter never finds anyone on a test pattern, so seed=auto
would leave it passing frames through unprocessed.

Every output line is stamped with the second it reached this script (gst-launch flushes each line), so
all figures share one clock; the first 5 s after the first frame reaches the sink (MatAnyone2's seeding
comes before it; then its slower first passes and the first latency reconfigurations) are left out of
every figure except the whole-run counts. Measured per configuration:
- fps out: frames the sink rendered ÷ time, between fpsdisplaysink's first and last report
  ("rendered: N, dropped: M, …", every 0.5 s) inside the window;
- sink drops: frames the sink discarded as more than 20 ms past their render time (max-lateness),
  whole run, from the sink's last QoS message (fpsdisplaysink's count when there is none); as a share
  of the frames the element processed;
- element drops and frames processed: the last matanyone-stats message's frames-dropped and frame;
- inference ms (median), alpha age ms (median, p95; field alpha-age-ms, async mode only) and inference
  fps (median; async only), from matanyone-stats over the window;
- latency (median, p95): the latency tracer's time from the source pushing a frame to that frame
  reaching the sink's pad, before the sink waits for its render time (which is the latency the
  pipeline configured, so not part of what the element costs). Not in it: how long a frame waited
  before the source could push it — in sync mode the element runs on the source's thread, so while it
  works on one frame the next ones wait — which is where sink drops come from; the JSON has how late
  the dropped frames were (sink_drop_lateness_ms), MatAnyone2's seed-ms and the latency the element
  reported last.
- seeds: how many frames seeded (stats with seed-ms) over the whole run: 1 unless the track started
  over (the gap rule; a live source into a slow engine once re-seeded after every seed);
- first frame: seconds from launch and from "Setting pipeline to PLAYING" to the first frame at the
  sink (models load before PLAYING in sync mode, on the inference thread in async mode);
- pts lag (median, p95): how far each processed frame's PTS trails the pipeline clock when its stats
  reach this script (PLAYING's stamp stands in for the base time, so within a few ms): unlike the
  latency tracer it counts the time frames waited before the source could push them, and it grows
  without bound when the element falls behind for good.
A configuration whose run fails (a property the installed element lacks, an error on the bus) is
reported as failed with its error line; the others still run.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tools.bench import cpu_description, machine, parse_stats, summary

ROOT = Path(__file__).resolve().parent.parent
WARMUP_S = 5.0
MODES = ("sync", "async")
ALIGNMENTS = ("motion", "none")
ENGINES = ("matanyone2", "segmenter", "rvm")
SOURCES = ("ball", "clip")
# What the element makes: extra element properties and the caps after it.
OUTPUTS = {
    "default": ("", "video/x-raw,format=BGRA"),
    "gray": ("", "video/x-raw,format=GRAY8"),
    "color": (" background=color edge-colors=estimated", "video/x-raw,format=BGRA"),
    "none": (" background=none edge-colors=estimated", "video/x-raw,format=BGRA"),
}
CLIP_FRAMES = 96
TARGETS = {
    "sync": "sink drops ≤ 5 % of the frames the element processed",
    "async": "≥ 29.5 fps out, no frame dropped by the element, alpha-age p95 ≤ 2.5 × the inference time "
             "(or one frame interval, if longer)",
}

ANSI = re.compile(r"\x1b\[[0-9;]*m")
STAMP = re.compile(r"^\[\s*(\d+(?:\.\d+)?)\] ")
# `-v` prints each fpsdisplaysink report as a property change; the `-m` copy of it is escaped
# ("rendered:\ 15\,…") and deliberately not matched, so each report counts once.
FPS_REPORT = re.compile(r"last-message = rendered: (\d+), dropped: (\d+)")
LATENCY_TRACE = re.compile(r"\blatency, src-element-id=.*\bsrc-element=\(string\)([^,]+),.*"
                           r"\bsink-element=\(string\)([^,]+),.*\btime=\(guint64\)(\d+), ts=\(guint64\)(\d+)")
QOS = re.compile(r'from element "([^"]+)" \(qos\): .*\bjitter=\(gint64\)(-?\d+),.*'
                 r'\bprocessed=\(guint64\)(\d+), dropped=\(guint64\)(\d+)')
# Named, so that traces of pipelines the element runs inside itself (it decodes seed-mask with one)
# and messages of other elements are told apart.
SOURCE, SINK_BIN, SINK = "livesrc", "fps", "livesink"
# gst-launch's own report of a failed run: a bus error, or a description it could not build.
ERROR = re.compile(r"^(ERROR: .*|WARNING: erroneous pipeline: .*)$")
PLAYING = "Setting pipeline to PLAYING"


def stamped_lines(text: str) -> list[tuple[float | None, str]]:
    """(arrival second or None, line without colour codes) for each line of a log."""
    out = []
    for raw in text.splitlines():
        line = ANSI.sub("", raw)
        match = STAMP.match(line)
        out.append((float(match.group(1)), line[match.end():]) if match else (None, line))
    return out


def parse_fps_report(line: str) -> tuple[int, int] | None:
    """(rendered, dropped) from a `-v` fpsdisplaysink last-message line; both of its formats
    ("current: x, average: y" and, once the sink drops, "fps: x, drop rate: y") start the same."""
    match = FPS_REPORT.search(line)
    return (int(match.group(1)), int(match.group(2))) if match else None


def parse_latency_trace(line: str) -> tuple[str, str, float, float] | None:
    """(source element, sink element, source-to-sink ms, tracer timestamp s) from a latency tracer
    line; the tracer's format-string line ("time=(guint64)%lu") does not match."""
    match = LATENCY_TRACE.search(line)
    if not match:
        return None
    return match.group(1), match.group(2), int(match.group(3)) / 1e6, int(match.group(4)) / 1e9


def parse_qos(line: str) -> tuple[str, float, int, int] | None:
    """(element, jitter ms, processed, dropped) from a `-m` QoS message line (a sink posts one per
    frame it drops; jitter is how late that frame was)."""
    match = QOS.search(line)
    if not match:
        return None
    return match.group(1), int(match.group(2)) / 1e6, int(match.group(3)), int(match.group(4))


def first_error(text: str) -> str | None:
    for _, line in stamped_lines(text):
        if ERROR.match(line):
            return line.strip()
    return None


def measure(text: str, warmup_s: float = WARMUP_S) -> dict:
    """The figures of one run from its stamped log (see the module docstring)."""
    fps_reports, latencies, stats, sink_qos = [], [], [], []
    playing = None
    for t, line in stamped_lines(text):
        if playing is None and line.startswith(PLAYING):
            playing = t
        elif (report := parse_fps_report(line)) is not None:
            fps_reports.append((t, *report))
        elif (trace := parse_latency_trace(line)) is not None:
            if trace[:2] == (SOURCE, SINK_BIN):
                latencies.append((t, trace[2]))
        elif "matanyone-stats" in line:
            stats += [(t, row) for row in parse_stats(line)]
        elif (qos := parse_qos(line)) is not None and qos[0] == SINK:
            sink_qos.append((t, *qos[1:]))
    # The window opens warmup_s after the first frame reached the sink (its first latency trace).
    first = next((t for t, _ in latencies if t is not None), None)
    if first is None:
        first = next((t for t, *_ in fps_reports if t is not None), None)
    start = None if first is None else first + warmup_s
    in_window = (lambda t: start is not None and t is not None and t >= start)

    window_reports = [r for r in fps_reports if in_window(r[0])]
    fps_out = window_s = None
    if len(window_reports) >= 2:
        (t0, r0, _), (t1, r1, _) = window_reports[0], window_reports[-1]
        if t1 > t0:
            fps_out, window_s = (r1 - r0) / (t1 - t0), t1 - t0
    rows = [row for t, row in stats if in_window(t)]
    last = stats[-1][1] if stats else {}
    processed = last.get("frame")
    sink_dropped = sink_qos[-1][3] if sink_qos else (fps_reports[-1][2] if fps_reports else None)

    def field(name: str) -> list[float]:
        return [row[name] for row in rows if name in row]

    def per_frame(name: str) -> float | None:
        """A cumulative stats field's growth per frame processed over the window (None without it)."""
        have = [row for row in rows if name in row and "frame" in row]
        if len(have) < 2 or have[-1]["frame"] <= have[0]["frame"]:
            return None
        return (have[-1][name] - have[0][name]) / (have[-1]["frame"] - have[0]["frame"])

    lags = [1000 * (t - playing) - row["pts"] / 1e6 for t, row in stats
            if in_window(t) and playing is not None and "pts" in row]

    return {
        "fps_out": fps_out,
        "window_s": window_s,
        # Frames that reached the sink less those it dropped (fpsdisplaysink's last report can be up to
        # 0.5 s older than the end of the run).
        "sink_frames_rendered": (len(latencies) - sink_dropped if latencies and sink_dropped is not None
                                 else fps_reports[-1][1] if fps_reports else None),
        "sink_frames_dropped": sink_dropped,
        "sink_dropped_percent_of_processed": (100.0 * sink_dropped / processed
                                              if sink_dropped is not None and processed else None),
        "element_frames_dropped": last.get("frames-dropped"),
        "element_frames_processed": processed,
        "element_frames_dropped_in_window": (rows[-1]["frames-dropped"] - rows[0]["frames-dropped"]
                                             if len(rows) >= 2 and "frames-dropped" in rows[0] else None),
        "stats_in_window": len(rows),
        "inference_ms_median": summary(field("inference-ms"))["median"],
        "total_ms_median": summary(field("total-ms"))["median"],
        # The element's own time per frame, and its stages (median / p95).
        "total_ms": summary(field("total-ms")),
        "preprocess_ms": summary(field("preprocess-ms")),
        "postprocess_ms": summary(field("postprocess-ms")),
        "seed_ms": next((row["seed-ms"] for _, row in stats if "seed-ms" in row), None),
        # Distinct seeded frames: in async mode every frame that wears the seeded alpha carries its
        # seed-ms, and the alpha's own PTS is the frame's less its age.
        "seeds": len({round(row.get("pts", 0) / 1e6 - row.get("alpha-age-ms", 0)) for _, row in stats if "seed-ms" in row}),
        "first_frame_after_launch_s": first,
        "first_frame_after_playing_s": None if first is None or playing is None else first - playing,
        "pts_lag_ms": summary(lags),
        "reported_latency_ms": last.get("latency-ms"),
        "alpha_age_ms": summary(field("alpha-age-ms")),  # async mode only: None/None otherwise
        # async with alignment=motion: the motion's cost per frame, and how far frames carried their alpha.
        "motion_ms": summary(field("motion-ms")),
        "carry_frames": summary(field("carry-frames")),
        "carry_pixels": summary(field("carry-pixels")),
        "inference_fps_median": summary(field("inference-fps"))["median"],
        # The streaming thread's own time in the element per frame, and how long the streaming and
        # release threads were held up by each other per frame (mean over the window, ms).
        "streaming_ms_per_frame": per_frame("streaming-ms"),
        "streaming_wait_ms_per_frame": per_frame("streaming-wait-ms"),
        "release_wait_ms_per_frame": per_frame("release-wait-ms"),
        "latency_ms": summary([ms for t, ms in latencies if in_window(t)]),
        # How late past their render time the frames the sink dropped were (QoS jitter).
        "sink_drop_lateness_ms": summary([jitter for t, jitter, *_ in sink_qos if in_window(t)]),
        "frames_at_sink_traced": len(latencies),
    }


def targets(mode: str, figures: dict, element_p95_ms: float | None = None, frame_ms: float | None = None) -> dict:
    """The project's targets for `mode`: each check with what was measured and its verdict (None where
    a figure is missing, e.g. alpha-age-ms from a plugin without async mode); with `element_p95_ms`,
    also the element's own time per frame (total-ms p95). `frame_ms`: the source's frame interval, the
    least the alpha-age bound can be (a frame that did not wait for its own alpha wears the one before:
    a fast engine's 5 ms inference cannot mean a 12.5 ms bound on an age counted in frames)."""
    def check(measured, limit, ok):
        return {"measured": measured, "limit": limit, "met": None if measured is None else bool(ok(measured))}

    if mode == "sync":
        checks = {"sink drops, % of processed": check(figures["sink_dropped_percent_of_processed"], 5.0,
                                                      lambda p: p <= 5.0)}
    else:
        inference = figures["inference_ms_median"]
        limit = None if inference is None else max(2.5 * inference, frame_ms or 0)
        checks = {
            "fps out": check(figures["fps_out"], 29.5, lambda f: f >= 29.5),
            "element drops": check(figures["element_frames_dropped"], 0, lambda d: d == 0),
            "alpha-age p95, ms": check(figures["alpha_age_ms"]["p95"] if limit else None, limit,
                                       lambda a: a <= limit + 1e-6),
        }
    description = TARGETS[mode]
    if element_p95_ms is not None:
        checks["element total p95, ms"] = check(figures.get("total_ms", {}).get("p95"), element_p95_ms,
                                                lambda ms: ms <= element_p95_ms)
        description += f"; the element's own time per frame p95 ≤ {element_p95_ms:g} ms"
    verdicts = [c["met"] for c in checks.values()]
    return {"description": description, "checks": checks,
            "met": None if None in verdicts else all(verdicts)}


def make_seed_mask(path: Path) -> Path:
    """A white ball on black (videotestsrc's ball pattern at a small 16:9 size, so the ball covers about
    a fifth of it; the element resizes the mask to the frame). Made once."""
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        pipeline = ("videotestsrc num-buffers=1 pattern=ball foreground-color=0xffffffff background-color=0xff000000 "
                    "! video/x-raw,width=96,height=54 ! videoconvert ! video/x-raw,format=GRAY8 ! pngenc "
                    f"! filesink location={shlex.quote(str(path))}")
        done = subprocess.run(["gst-launch-1.0", "-q"] + shlex.split(pipeline), capture_output=True, text=True)
        if done.returncode != 0 or not path.is_file():
            sys.exit(f"bench_live: could not make the seed mask {path}:\n{done.stdout}{done.stderr}")
    from PIL import Image
    import numpy as np
    foreground = float((np.asarray(Image.open(path).convert("L")) > 127).mean())
    if not 0.05 <= foreground <= 0.95:  # a mask of nothing or everything would not exercise the tracker
        sys.exit(f"bench_live: the seed mask {path} is {100 * foreground:.0f} % foreground; delete it to remake it")
    return path


def clip_frames(clip: Path, size: tuple[int, int], work: Path) -> tuple[Path, int]:
    """The first frames of `clip` as raw BGRA files at `size` (work/clip-WxH/fNNN), decoded once;
    (the folder, how many frames)."""
    width, height = size
    folder = work / f"clip-{width}x{height}"
    frame_bytes = width * height * 4
    done = folder / "frames.txt"
    if done.is_file() and done.read_text().strip() == f"{clip.resolve()} {CLIP_FRAMES}":
        return folder, len(list(folder.glob("f[0-9][0-9][0-9]")))
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("f[0-9][0-9][0-9]"):
        old.unlink()
    whole = folder / "all.bgra"
    pipeline = (f"filesrc location={shlex.quote(str(clip))} ! decodebin ! videoconvert ! videoscale "
                f"! video/x-raw,format=BGRA,width={width},height={height} ! identity eos-after={CLIP_FRAMES + 1} "
                f"! filesink location={shlex.quote(str(whole))}")
    decoded = subprocess.run(["gst-launch-1.0", "-q"] + shlex.split(pipeline), capture_output=True, text=True)
    count = whole.stat().st_size // frame_bytes if whole.is_file() else 0
    if count == 0:
        sys.exit(f"bench_live: could not decode {clip}:\n{decoded.stdout}{decoded.stderr}")
    count = min(count, CLIP_FRAMES)
    with open(whole, "rb") as source:
        for index in range(count):
            (folder / f"f{index:03d}").write_bytes(source.read(frame_bytes))
    whole.unlink()
    done.write_text(f"{clip.resolve()} {CLIP_FRAMES}\n")
    return folder, count


def source_description(args) -> str:
    """The source of a run and its caps: videotestsrc live, or the clip's frames replayed (see above)."""
    width, height = args.input_size
    buffers = args.fps * args.duration
    if getattr(args, "source", "ball") == "clip":
        location = shlex.quote(str(args.clip_folder / "f%03d"))
        return (f"multifilesrc name={SOURCE} location={location} index=0 stop-index={args.clip_count - 1} loop=true "
                f"num-buffers={buffers} ! rawvideoparse width={width} height={height} format=bgra "
                f"framerate={args.fps}/1")
    return (f"videotestsrc name={SOURCE} is-live=true pattern=ball num-buffers={buffers} "
            f"! video/x-raw,format=BGRA,width={width},height={height},framerate={args.fps}/1")


def pipeline_description(args, engine: str, mode: str, mask: Path | None, alignment: str | None = None,
                         output: str = "default") -> str:
    """The gst-launch-1.0 description of one run, shell-quoted (split with shlex before launching)."""
    extra, caps = OUTPUTS[output]
    element = f"matanyone engine={engine} working-size={min(args.working_size)} stats-interval=1{extra}"
    # Only when asked for: a sync run with no delay must also work on a plugin without these properties.
    if mode != "sync" or args.async_delay:
        element += f" mode={mode} async-delay={args.async_delay}"
    if alignment:
        element += f" alignment={alignment}"
    if args.model_dir:
        element += f" model-dir={shlex.quote(str(Path(args.model_dir).resolve()))}"
    if getattr(args, "threads", None) is not None:
        element += f" threads={args.threads}"
    if getattr(args, "precision", None):
        element += f" precision={args.precision}"
    if engine == "matanyone2":
        element += f" seed=mask seed-mask={shlex.quote(str(mask))}"
        if getattr(args, "placement", ""):
            element += f" model-placement={shlex.quote(args.placement)}"
    return (f"{source_description(args)} ! {element} "
            f"! {caps} ! fpsdisplaysink name={SINK_BIN} "
            f'video-sink="fakesink name={SINK} sync=true max-lateness=20000000 qos=true" '
            "text-overlay=false signal-fps-measurements=false")


def launch(description: str, log_path: Path, limit_s: float) -> tuple[int, str, bool]:
    """Runs `gst-launch-1.0 -m -v -e DESCRIPTION` with the latency tracer, writing every output line to
    `log_path` stamped with its arrival second. A run still going after `limit_s` is interrupted
    (-e turns that into an EOS, so its figures so far survive), then killed 30 s later.
    Returns the exit status, the stamped log and whether it had to be stopped."""
    env = {**os.environ, "GST_TRACERS": "latency", "GST_DEBUG": "GST_TRACER:7", "GST_DEBUG_NO_COLOR": "1"}
    process = subprocess.Popen(["gst-launch-1.0", "-m", "-v", "-e"] + shlex.split(description), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, bufsize=1, env=env, errors="replace")
    stopped = threading.Event()

    def stop():
        stopped.set()
        process.send_signal(signal.SIGINT)
        kill.start()

    kill = threading.Timer(30, process.kill)
    watchdog = threading.Timer(limit_s, stop)
    watchdog.start()
    start = time.monotonic()
    lines = []
    try:
        with open(log_path, "w") as log:
            for line in process.stdout:
                stamped = f"[{time.monotonic() - start:9.3f}] {line}"
                log.write(stamped)
                lines.append(stamped)
        returncode = process.wait()
    finally:
        watchdog.cancel()
        kill.cancel()
    return returncode, "".join(lines), stopped.is_set()


def run_configuration(args, engine: str, mode: str, mask: Path | None, work: Path, alignment: str | None = None,
                      output: str = "default") -> dict:
    description = pipeline_description(args, engine, mode, mask, alignment, output)
    name = f"{engine}-{mode}" + (f"-{alignment}" if alignment else "") + (f"-{output}" if output != "default" else "")
    log_path = work / f"live-{name}.log"
    print(f"{name}: {args.duration} s live run (log: {log_path.relative_to(ROOT)}) …", flush=True)
    # Generous: loading the models and MatAnyone2's seeding come before the first frame.
    returncode, text, stopped = launch(description, log_path, limit_s=2 * args.duration + 60)
    run = {"engine": engine, "mode": mode, "alignment": alignment, "output": output, "name": name, "pipeline": description, "log": str(log_path.relative_to(ROOT)),
           "returncode": returncode, "stopped_after_limit": stopped}
    error = first_error(text)
    if (returncode != 0 and not stopped) or error:
        run.update(ok=False, error=error or f"gst-launch-1.0 exited with status {returncode}")
        print(f"  failed: {run['error']}", flush=True)
        return run
    figures = measure(text)
    run.update(ok=True, error=None, figures=figures, targets=targets(mode, figures, args.element_p95_ms, frame_ms=1000 / args.fps))
    return run


def fmt(value, spec: str = ".1f") -> str:
    return "—" if value is None else format(value, spec)


def print_table(runs: list[dict]) -> None:
    header = (f"{'engine':11s} {'mode':5s} {'fps out':>7s} {'sink drops':>14s} {'elem drops':>10s} {'processed':>9s} "
              f"{'infer ms':>8s} {'alpha age ms':>13s} {'infer fps':>9s} {'latency ms':>13s}  target")
    print(header)
    print("-" * len(header))
    for run in runs:
        kind = run["mode"] + ("/" + run["alignment"] if run.get("alignment") else "")
        kind += "/" + run["output"] if run.get("output", "default") != "default" else ""
        label = f"{run['engine']:11s} {kind:5s}"
        if not run["ok"]:
            print(f"{label} FAILED: {run['error']}")
            continue
        f = run["figures"]
        sink = f["sink_frames_dropped"]
        share = f["sink_dropped_percent_of_processed"]
        sink_text = "—" if sink is None else f"{sink} ({fmt(share)} %)" if share is not None else str(sink)
        age = f["alpha_age_ms"]
        latency = f["latency_ms"]
        met = run["targets"]["met"]
        verdict = {True: "met", False: "NOT met", None: "n/a"}[met]
        print(f"{label} {fmt(f['fps_out']):>7s} {sink_text:>14s} {fmt(f['element_frames_dropped'], 'd'):>10s} "
              f"{fmt(f['element_frames_processed'], 'd'):>9s} {fmt(f['inference_ms_median']):>8s} "
              f"{fmt(age['median']) + ' / ' + fmt(age['p95']):>13s} {fmt(f['inference_fps_median']):>9s} "
              f"{fmt(latency['median']) + ' / ' + fmt(latency['p95']):>13s}  {verdict}")
    print()
    for run in runs:
        if run["ok"]:
            checks = "; ".join(f"{name} {fmt(c['measured'], '.1f' if isinstance(c['measured'], float) else '')} "
                               f"(limit {fmt(c['limit'], '.1f' if isinstance(c['limit'], float) else '')})"
                               for name, c in run["targets"]["checks"].items())
            print(f"{run['name']} — target: {run['targets']['description']}\n    {checks}")
            f = run["figures"]
            if f.get("total_ms", {}).get("median") is not None:
                print(f"    element per frame {fmt(f['total_ms']['median'])} / {fmt(f['total_ms']['p95'])} ms (median / p95): "
                      f"pre {fmt(f['preprocess_ms']['median'])}, inference {fmt(f['inference_ms_median'])}, "
                      f"post {fmt(f['postprocess_ms']['median'])} ms (medians)")
            if f.get("streaming_ms_per_frame") is not None:
                print(f"    streaming thread {fmt(f['streaming_ms_per_frame'], '.2f')} ms a frame in the element; waits for each "
                      f"other: streaming {fmt(f['streaming_wait_ms_per_frame'], '.3f')}, release "
                      f"{fmt(f['release_wait_ms_per_frame'], '.3f')} ms a frame (means)")
            print(f"    seeds {f['seeds']}; first frame {fmt(f['first_frame_after_playing_s'], '.2f')} s after PLAYING "
                  f"({fmt(f['first_frame_after_launch_s'], '.2f')} s after launch); pts lag "
                  f"{fmt(f['pts_lag_ms']['median'], '.0f')} / {fmt(f['pts_lag_ms']['p95'], '.0f')} ms (median / p95)")
            if f.get("motion_ms", {}).get("median") is not None:
                print(f"    alignment {run['alignment']}: motion {fmt(f['motion_ms']['median'], '.2f')} / "
                      f"{fmt(f['motion_ms']['p95'], '.2f')} ms a frame (median / p95); alpha carried "
                      f"{fmt(f['carry_frames']['median'], '.0f')} frames, {fmt(f['carry_pixels']['median'], '.1f')} px (median)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default="sync,async", help="comma-separated: sync, async")
    parser.add_argument("--engines", default="matanyone2,segmenter", help="comma-separated: matanyone2, segmenter, rvm")
    parser.add_argument("--duration", type=int, default=60, help="seconds per run (fps × duration buffers)")
    parser.add_argument("--size", default="512x288", help="MatAnyone2 working size WxH (its short side is used)")
    parser.add_argument("--input", default="1280x720", help="frame size WxH from the live source")
    parser.add_argument("--fps", type=int, default=30, help="source frame rate")
    parser.add_argument("--async-delay", type=int, default=0, help="the element's async-delay, ms")
    parser.add_argument("--alignments", default="motion", help="async runs, comma-separated: motion, none")
    parser.add_argument("--source", default="ball", help="ball (videotestsrc, live) or clip (a real clip replayed)")
    parser.add_argument("--clip", type=Path, help="--source clip: the clip (default: ../shared/media/test-sample2.mp4)")
    parser.add_argument("--outputs", default="default", help=f"comma-separated: {', '.join(OUTPUTS)}")
    parser.add_argument("--element-p95-ms", type=float, help="also a target: the element's total-ms p95 at most this")
    parser.add_argument("--model-dir", help="model folder (default: the installed one)")
    parser.add_argument("--threads", type=int, help="the element's threads (default: its own default)")
    parser.add_argument("--precision", help="the element's precision (default: its own default), e.g. bf16")
    parser.add_argument("--placement", default="", help="MatAnyone2 runs: the element's model-placement, e.g. encoder=bf16")
    parser.add_argument("--json", type=Path, default=ROOT / "build" / "bench" / "live.json")
    parser.add_argument("--commit", action="store_true", help="also write OUT_DIR/live-<engine>-<mode>.json")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "bench")
    args = parser.parse_args(argv)

    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if not modes or any(m not in MODES for m in modes):
        sys.exit(f"bench_live: --modes takes {', '.join(MODES)}")
    if not engines or any(e not in ENGINES for e in engines):
        sys.exit(f"bench_live: --engines takes {', '.join(ENGINES)}")
    if args.duration <= WARMUP_S:
        sys.exit(f"bench_live: --duration must be longer than the {WARMUP_S:.0f} s warm-up")
    try:
        args.working_size = tuple(int(v) for v in args.size.lower().split("x"))
        args.input_size = tuple(int(v) for v in args.input.lower().split("x"))
    except ValueError:
        sys.exit("bench_live: --size and --input take WxH")

    outputs = [o.strip() for o in args.outputs.split(",") if o.strip()]
    if not outputs or any(o not in OUTPUTS for o in outputs):
        sys.exit(f"bench_live: --outputs takes {', '.join(OUTPUTS)}")
    if args.source not in SOURCES:
        sys.exit(f"bench_live: --source takes {', '.join(SOURCES)}")
    work = ROOT / "build" / "bench"
    work.mkdir(parents=True, exist_ok=True)
    if args.source == "clip":
        shared = Path(os.environ.get("MATANYONE_SHARED", ROOT.parent / "shared"))
        clip = args.clip or shared / "media" / "test-sample2.mp4"
        if not clip.is_file():
            sys.exit(f"bench_live: no clip at {clip} (--clip PATH, or MATANYONE_SHARED)")
        args.clip_folder, args.clip_count = clip_frames(clip, args.input_size, work)
        args.clip_name = str(clip)
    mask = make_seed_mask(work / "live-seed-mask.png") if "matanyone2" in engines else None
    info, cpu = machine(), cpu_description()
    clock = f", {cpu['ghz']:.2f} GHz" if cpu["ghz"] else ""
    print(f"machine: {cpu['model']} ({cpu['isa']}, {cpu['cores_used']} cores{clock}), {info['memory_gib']} GiB")
    source = "live" if args.source == "ball" else f"{args.clip_count} frames of {args.clip_name} replayed"
    print(f"input {args.input} at {args.fps} fps, {source}; {args.duration} s per run; MatAnyone2 at working size "
          f"{min(args.working_size)} (short side); figures after the first {WARMUP_S:.0f} s at the sink\n", flush=True)

    alignments = [a.strip() for a in args.alignments.split(",") if a.strip()]
    if not alignments or any(a not in ALIGNMENTS for a in alignments):
        sys.exit(f"bench_live: --alignments takes {', '.join(ALIGNMENTS)}")
    runs = [run_configuration(args, engine, mode, mask, work, alignment if mode == "async" else None, output)
            for mode in modes for engine in engines for alignment in (alignments if mode == "async" else [None])
            for output in outputs]
    print()
    print_table(runs)

    settings = {"duration_s": args.duration, "fps": args.fps, "input_size": list(args.input_size),
                "working_size": list(args.working_size), "async_delay_ms": args.async_delay,
                "model_dir": args.model_dir, "warmup_s": WARMUP_S, "source": args.source,
                "clip": getattr(args, "clip_name", None), "element_p95_ms": args.element_p95_ms,
                "placement": args.placement or None}
    common = {"machine": info, "cpu": cpu, "settings": settings, "date": time.strftime("%Y-%m-%d")}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({**common, "runs": runs}, indent=2))
    print(f"\nJSON: {args.json}")
    if args.commit:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        for run in (run for run in runs if run["ok"]):  # a failed run is not a figure to keep
            path = args.out_dir / f"live-{run['name']}.json"
            path.write_text(json.dumps({**common, **run}, indent=2))
            print(f"JSON: {path}")
    return 0 if all(run["ok"] for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
