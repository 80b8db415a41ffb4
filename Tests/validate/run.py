#!/usr/bin/env python3
"""GstValidate over the installed element: GStreamer's own conformance checker watches every pad while
its stock scenarios (and two of ours) seek, scrub, play backwards, fast-forward, pause and change state.

Each scenario runs twice per configuration: with the element, and with `identity` in its place (both
named `under`). An issue counts when it is detected on `under`'s pads with the element and not with
identity, or appears anywhere only with the element (one retry first for those upstream: they are
timing-dependent). A run that hangs, crashes or errors out counts too. Prints PASS/FAIL lines.

  Tests/validate/run.py --validate PREFIX [--only CONFIG[:SCENARIO]] [--keep-logs]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("MATANYONE_SHARED", ROOT.parent / "shared"))
OUT = ROOT / "build" / "validate"
TEST_MODELS = Path(os.environ.get("MATANYONE_TEST_MODELS", ROOT / "build" / "test-models"))

STOCK = ["seek_forward", "seek_backward", "seek_forward_backward", "simple_seeks", "seek_with_stop",
         "fast_forward", "fast_backward", "reverse_playback", "pause_resume", "scrub_forward_seeking",
         "change_state_intensive", "play_15s"]
# Ours (Tests/validate/scenarios): the element's caps change mid-stream; a reseed right after each
# flushing seek. The identity run of the reseed one uses the same scenario without the signals
# (identity has none).
OURS = ["caps_change_midstream", "reseed_mid_seek"]

# The clip: the dancer (4 s) looped to 44 s (stock scenarios seek up to 40 s), small and at 10 fps so that a
# run is bound by the scenario, not by matting; a keyframe each second so that seeks are cheap.
CLIP_W, CLIP_H, CLIP_FPS, CLIP_LOOPS = 256, 144, 10, 11

CONFIGS = {
    # name: (the element's part of the pipeline, what follows it); those in HOLDING hold frames back
    "sync-alpha": ("matanyone name=under", "video/x-raw,format=GRAY8"),
    "sync-composite": ("matanyone name=under background=color", "video/x-raw,format=RGBA"),
    "async": ("matanyone name=under mode=async", "video/x-raw,format=GRAY8"),
    "async-delay": ("matanyone name=under mode=async async-delay=300", "video/x-raw,format=GRAY8"),
    "matanyone2-async": (f"matanyone name=under mode=async engine=matanyone2 model-dir={TEST_MODELS}",
                         "video/x-raw,format=GRAY8"),
}

# Configurations that hold frames (async-delay): their second reference is `queue`, a stock element that
# holds frames too. GstValidate's "serialized event pushed in the same 'time'" rule compares timestamps as
# if they only grew: in reverse playback an event that arrives while frames are held (and leaves after
# them, in order) is flagged for `queue name=under` exactly as for the element (checked, 2026-12-07).
HOLDING = {"async-delay"}

RUN_TIMEOUT_S = 180
# Runs side by side (each mostly waits for the clock; MatAnyone2's inference thread is the one busy).
WORKERS = 6


def raw_of(clip: Path) -> Path:
    return clip.with_suffix(".i420")


def make_clip(path: Path) -> None:
    if path.exists() and path.stat().st_size > 0 and raw_of(path).exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    src = SHARED / "media" / "test-sample2.mp4"
    raw, tmp = raw_of(path), path.with_suffix(".part")
    # The clip's frames once (small, 10 fps), then those bytes CLIP_LOOPS times, encoded.
    subprocess.run(["gst-launch-1.0", "-q", "filesrc", f"location={src}", "!", "decodebin", "!", "videoconvert", "!",
                    "videorate", "!", "videoscale", "!",
                    f"video/x-raw,format=I420,width={CLIP_W},height={CLIP_H},framerate={CLIP_FPS}/1", "!",
                    "filesink", f"location={raw}"], check=True, timeout=600)
    once = raw.read_bytes()
    raw.write_bytes(once * CLIP_LOOPS)
    subprocess.run(["gst-launch-1.0", "-q", "filesrc", f"location={raw}", "!", "rawvideoparse", "format=i420",
                    f"width={CLIP_W}", f"height={CLIP_H}", f"framerate={CLIP_FPS}/1", "!", "x264enc",
                    "speed-preset=ultrafast", f"key-int-max={CLIP_FPS}", "!", "h264parse", "!", "mp4mux", "!",
                    "filesink", f"location={tmp}"], check=True, timeout=600)
    tmp.rename(path)


def clip_duration(path: Path) -> float:
    out = subprocess.run(["gst-discoverer-1.0", str(path)], capture_output=True, text=True, timeout=60).stdout
    match = re.search(r"Duration: (\d+):(\d+):([\d.]+)", out)
    if not match:
        raise SystemExit(f"cannot read the clip's duration:\n{out}")
    h, m, s = match.groups()
    return int(h) * 3600 + int(m) * 60 + float(s)


class Issue:
    """One issue of gst-validate's report: its level, summary and the reporters it was detected on."""

    def __init__(self, level: str, summary: str):
        self.level, self.summary, self.reporters, self.details = level, summary, [], ""

    @property
    def on_under(self) -> bool:
        # (The first reporter is where it was detected; the others, where the same fault showed
        # downstream of it: an EOS seqnum fault of the demuxer is reported on every pad after it.)
        return bool(self.reporters) and (self.reporters[0].startswith("under:") or self.reporters[0] == "under")

    def key(self) -> str:
        return self.summary

    def __str__(self) -> str:
        return f"{self.level}: {self.summary} (on {', '.join(self.reporters)}){' — ' + self.details if self.details else ''}"


LEVEL = re.compile(r"^\s*(critical|warning|issue) : (.+)$")
DETECTED = re.compile(r"^\s*Detected on <(.+)>\s*$")
DETAILS = re.compile(r"^\s*Details : (.*)$")


def parse_issues(text: str) -> list:
    issues, current = [], None
    for line in text.splitlines():
        if m := LEVEL.match(line):
            current = Issue(m.group(1), m.group(2).strip())
            issues.append(current)
        elif current and (m := DETECTED.match(line)):
            current.reporters = [r.strip() for r in m.group(1).split(",")]
        elif current and (m := DETAILS.match(line)) and not current.details:
            current.details = m.group(1).strip()
    return issues


class Run:
    def __init__(self, rc: int, issues: list, log: Path, hung: bool, seconds: float):
        self.rc, self.issues, self.log, self.hung, self.seconds = rc, issues, log, hung, seconds


def run_validate(prefix: Path, scenario: str, pipeline: str, log: Path, env: dict) -> Run:
    gv = prefix / "bin" / "gst-validate-1.0"
    args = [str(gv), "--set-scenario", scenario, *pipeline.split()]
    t0 = time.monotonic()
    with open(log, "w") as f:
        f.write(" ".join(args) + "\n")
        f.flush()
        try:
            proc = subprocess.run(args, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=RUN_TIMEOUT_S)
            rc, hung = proc.returncode, False
        except subprocess.TimeoutExpired:
            rc, hung = -1, True
    text = log.read_text(errors="replace")
    return Run(rc, parse_issues(text), log, hung, time.monotonic() - t0)


def counted(element: Run, reference: Run, holding: Run = None) -> tuple:
    """(issues on the element's pads not seen on identity's (nor, for a configuration that holds frames,
    on queue's), issues elsewhere only with the element)."""
    references = [reference] + ([holding] if holding else [])
    ref_under = {i.key() for r in references for i in r.issues if i.on_under}
    ref_all = {i.key() for r in references for i in r.issues}
    own = [i for i in element.issues if i.on_under and i.key() not in ref_under]
    elsewhere = [i for i in element.issues if not i.on_under and i.key() not in ref_all]
    return own, elsewhere


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--validate", required=True, type=Path, help="GstValidate's install prefix")
    parser.add_argument("--only", action="append", default=[], help="CONFIG or CONFIG:SCENARIO (repeatable)")
    parser.add_argument("--keep-logs", action="store_true")
    args = parser.parse_args()

    prefix = args.validate.resolve()
    if not (prefix / "bin" / "gst-validate-1.0").exists():
        print(f"FAIL GstValidate is not installed in {prefix} (scripts/setup.sh --validate builds it)")
        return 1
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    data = Path(os.environ.get("MATANYONE_TEST_DATA", ROOT / "build" / "test-data"))
    clip = data / f"validate-clip-{CLIP_W}x{CLIP_H}-{CLIP_FPS}fps-{CLIP_LOOPS}x.mp4"
    make_clip(clip)
    duration = clip_duration(clip)
    if duration < 40:
        print(f"FAIL the validate clip lasts {duration:.1f} s; the stock scenarios need 40 s or more")
        return 1

    selected = [s.split(":", 1) for s in args.only]
    scenarios = OUT / "scenarios"
    scenarios.mkdir()
    for path in (prefix / "share" / "gstreamer-1.0" / "validate" / "scenarios").iterdir():
        if path.is_dir():
            shutil.copytree(path, scenarios / path.name)
        else:
            shutil.copy(path, scenarios / path.name)
    for path in (HERE / "scenarios").glob("*.scenario"):
        shutil.copy(path, scenarios / path.name)
        # identity's copy: the element-only actions (emit-signal reseed) taken out.
        lines = [l for l in path.read_text().splitlines() if not l.startswith("emit-signal")]
        (scenarios / f"{path.stem}_reference.scenario").write_text("\n".join(lines) + "\n")

    env = dict(os.environ)
    env.update({
        "LD_LIBRARY_PATH": ":".join(filter(None, [str(prefix / "lib" / "x86_64-linux-gnu"), env.get("LD_LIBRARY_PATH")])),
        "GST_VALIDATE_SCENARIOS_PATH": str(scenarios),
        "GST_REGISTRY": str(OUT / "registry.bin"),
        # (validate's own plugins: the scenarios' actions that need them, and its pad monitors)
        "GST_PLUGIN_PATH": ":".join(filter(None, [str(prefix / "lib" / "x86_64-linux-gnu" / "gstreamer-1.0"),
                                                   env.get("GST_PLUGIN_PATH")])),
        "GST_DEBUG": env.get("GST_DEBUG", "*:0"),
    })

    # (The private registry made once, before runs side by side would each make it.)
    subprocess.run(["gst-inspect-1.0", "matanyone"], env=env, capture_output=True, timeout=120)

    # The H.264 clip as a user's file plays (demuxer, parser, decoder upstream); the raw frames for
    # change_state_intensive, whose NULL/PLAYING cycles a parsed pipeline's dynamic demuxer pads
    # do not survive (qtdemux and decodebin end "not-linked" with identity too).
    decoded = (f"filesrc location={clip} ! qtdemux ! h264parse ! avdec_h264 ! videoconvert ! video/x-raw,format=BGRA")
    raw = (f"filesrc location={raw_of(clip)} ! rawvideoparse format=i420 width={CLIP_W} height={CLIP_H} "
           f"framerate={CLIP_FPS}/1 ! videoconvert ! video/x-raw,format=BGRA")

    def source(scenario: str) -> str:
        src = raw if scenario == "change_state_intensive" else decoded
        # Our caps-change scenario resizes here, upstream of `under` (the element renegotiates).
        if scenario in OURS:
            src += f" ! videoscale ! capsfilter name=size caps=video/x-raw,width={CLIP_W},height={CLIP_H}"
        return src

    # The sinks sync (the stock scenarios need the clock: their actions wait for playback positions),
    # so a run lasts about its scenario's playing time, mostly idle: runs go side by side.
    def pipelines(config: str, scenario: str) -> tuple:
        element, after = CONFIGS[config]
        mine = f"{source(scenario)} ! {element} ! {after} ! fakesink name=sink sync=true"
        theirs = f"{source(scenario)} ! identity name=under ! fakesink name=sink sync=true"
        return mine, theirs

    jobs = [(c, sc) for c in CONFIGS for sc in STOCK + OURS
            if not selected or any(c == sel and (not rest or rest[0] == sc) for sel, *rest in selected)]
    started = time.monotonic()

    def element_run(job, attempt):
        config, scenario = job
        return run_validate(prefix, scenario, pipelines(config, scenario)[0],
                            OUT / f"{config}-{scenario}-{attempt}.log", env)

    def identity_run(scenario, attempt):
        reference = f"{scenario}_reference" if scenario in OURS else scenario
        return run_validate(prefix, reference, pipelines(next(iter(CONFIGS)), scenario)[1],
                            OUT / f"identity-{scenario}-{attempt}.log", env)

    def queue_run(scenario, attempt):
        reference = f"{scenario}_reference" if scenario in OURS else scenario
        pipeline = pipelines(next(iter(CONFIGS)), scenario)[1].replace("identity name=under", "queue name=under")
        return run_validate(prefix, reference, pipeline, OUT / f"queue-{scenario}-{attempt}.log", env)

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        theirs = {sc: pool.submit(identity_run, sc, 0) for sc in {sc for _, sc in jobs}}
        queued = {sc: pool.submit(queue_run, sc, 0) for sc in {sc for c, sc in jobs if c in HOLDING}}
        mine = {job: pool.submit(element_run, job, 0) for job in jobs}
        theirs = {sc: f.result() for sc, f in theirs.items()}
        queued = {sc: f.result() for sc, f in queued.items()}
        mine = {job: f.result() for job, f in mine.items()}

        def holding(job):
            return queued[job[1]] if job[0] in HOLDING else None

        # (Issues upstream of the element, only in its run: timing-dependent; both runs once more.)
        retry = [job for job in jobs if counted(mine[job], theirs[job[1]], holding(job))[1]
                 and not counted(mine[job], theirs[job[1]], holding(job))[0]]
        again = {job: (pool.submit(element_run, job, 1), pool.submit(identity_run, job[1], 1)) for job in retry}
        retried = {job: (a.result(), b.result()) for job, (a, b) in again.items()}

    failures = passes = 0
    for job in jobs:
        config, scenario = job
        element_result, reference = retried.get(job, (mine[job], theirs[scenario]))
        own, elsewhere = counted(element_result, reference, holding(job))
        problems = [str(i) for i in own + elsewhere]
        if element_result.hung:
            problems.append(f"gst-validate did not finish within {RUN_TIMEOUT_S} s")
        elif element_result.rc < 0:
            problems.append(f"gst-validate died of signal {-element_result.rc}")
        elif element_result.rc != 0 and reference.rc == 0:
            problems.append(f"gst-validate exited {element_result.rc} (identity's run: 0)")
        name = f"{config}:{scenario}"
        if problems:
            failures += 1
            print(f"FAIL {name} (log {element_result.log}; identity's {reference.log})")
            for problem in problems:
                print(f"     {problem}")
        else:
            passes += 1
            note = f", retried once" if job in retried else ""
            also = "identity or queue" if config in HOLDING else "identity"
            print(f"PASS {name} ({element_result.seconds:.1f} s, {len(element_result.issues)} issues, "
                  f"each also with {also}{note})")
    print(f"GstValidate: {passes} passed, {failures} failed in {time.monotonic() - started:.0f} s")
    if not args.keep_logs and failures == 0:
        for log in OUT.glob("*.log"):
            log.unlink()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
