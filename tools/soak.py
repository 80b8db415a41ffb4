#!/usr/bin/env python3
"""A soak run by hand (not in CI): a live async chain into the installed element, served by a real
Triton server, for `--minutes` (30 by default): reseeded every 20 s, renegotiated (resized) every 60 s,
flushed every 45 s, its server killed and restarted every 5 minutes. Every 10 s the process's RSS,
file descriptors and threads are sampled (the element runs in this process, through GStreamer's C
API); ERROR messages are counted. Writes the samples and a summary to bench/soak-*.json.

  .venv/bin/python tools/soak.py [--minutes 30] [--out bench/soak-2core-zen4.json]

Needs scripts/setup.sh --server and the test model set (scripts/test.sh makes build/test-models).
"""
import argparse
import ctypes
import json
import os
import platform
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = Path(os.environ.get("MATANYONE_TEST_MODELS", ROOT / "build" / "test-models"))
GST_MESSAGE_ERROR, GST_MESSAGE_WARNING, GST_MESSAGE_ELEMENT = 1 << 1, 1 << 2, 1 << 15
GST_STATE_NULL, GST_STATE_PLAYING = 1, 4


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


class Server:
    """Triton on loopback (tools/serve), started and killed at will."""

    def __init__(self, work: Path):
        self.work, self.proc = work, None
        self.http, self.grpc = free_ports(2)
        subprocess.run([str(ROOT / ".venv/bin/python"), "-m", "tools.serve.repository", "--models", str(MODELS / "matanyone2"),
                        "--out", str(work / "repo"), "--link"], cwd=ROOT, check=True, capture_output=True)

    def start(self):
        log = open(self.work / "server.log", "a")
        self.proc = subprocess.Popen([str(ROOT / ".venv-triton/bin/python"), "-m", "tools.serve.server", "--repository",
                                      str(self.work / "repo"), "--address", "127.0.0.1", "--http-port", str(self.http),
                                      "--grpc-port", str(self.grpc)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if "ready http=" in (self.work / "server.log").read_text(errors="replace").split("--- start ---")[-1]:
                return
            time.sleep(1)
        raise SystemExit("the Triton server did not start")

    def kill(self):
        if self.proc:
            self.proc.kill()
            self.proc.wait()
            with open(self.work / "server.log", "a") as log:
                log.write("--- start ---\n")


def process_figures():
    status = Path("/proc/self/status").read_text()
    field = lambda name: int(next(l for l in status.splitlines() if l.startswith(name)).split()[1])
    return {"rss_mib": round(field("VmRSS:") / 1024, 1), "fds": len(os.listdir("/proc/self/fd")), "threads": field("Threads:")}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "soak.json")
    args = parser.parse_args()
    work = ROOT / "build" / "soak"
    work.mkdir(parents=True, exist_ok=True)
    (work / "server.log").write_text("")
    server = Server(work)
    server.start()

    gst = ctypes.CDLL("libgstreamer-1.0.so.0")
    gobject = ctypes.CDLL("libgobject-2.0.so.0")
    vp = ctypes.c_void_p
    for name, res, argtypes in [("gst_parse_launch", vp, [ctypes.c_char_p, vp]), ("gst_bin_get_by_name", vp, [vp, ctypes.c_char_p]),
                                ("gst_element_get_bus", vp, [vp]), ("gst_bus_timed_pop_filtered", vp, [vp, ctypes.c_uint64, ctypes.c_int]),
                                ("gst_element_set_state", ctypes.c_int, [vp, ctypes.c_int]), ("gst_util_set_object_arg", None, [vp, ctypes.c_char_p, ctypes.c_char_p]),
                                ("gst_object_unref", None, [vp]), ("gst_mini_object_unref", None, [vp]),
                                ("gst_event_new_flush_start", vp, []), ("gst_event_new_flush_stop", vp, [ctypes.c_int]),
                                ("gst_element_send_event", ctypes.c_int, [vp, vp]),
                                ("gst_message_get_structure", vp, [vp]), ("gst_structure_to_string", vp, [vp]),
                                ("gst_message_parse_warning", None, [vp, ctypes.POINTER(vp), vp]),
                                ("gst_message_parse_error", None, [vp, ctypes.POINTER(vp), vp])]:
        fn = getattr(gst, name)
        fn.restype, fn.argtypes = res, argtypes
    gobject.g_signal_emit_by_name.argtypes = [vp, ctypes.c_char_p]
    gst.gst_init(None, None)
    description = ("videotestsrc is-live=true pattern=ball ! video/x-raw,format=BGRA,width=256,height=144,framerate=15/1 "
                   "! videoscale ! capsfilter name=size caps=video/x-raw,width=256,height=144 "
                   f"! matanyone name=under mode=async stats-interval=15 inference-server=http://127.0.0.1:{server.http} server-timeout=2000 "
                   "! video/x-raw,format=GRAY8 ! fakesink sync=true")
    pipeline = gst.gst_parse_launch(description.encode(), None)
    under = gst.gst_bin_get_by_name(pipeline, b"under")
    size = gst.gst_bin_get_by_name(pipeline, b"size")
    bus = gst.gst_element_get_bus(pipeline)
    gst.gst_element_set_state(pipeline, GST_STATE_PLAYING)
    counts = {"errors": 0, "warnings": 0, "reseeds": 0, "resizes": 0, "flushes": 0, "server_restarts": 0}
    samples, notes, last_stats = [], [], {}
    start = time.monotonic()
    end = start + args.minutes * 60
    next_at = {"reseed": 20, "resize": 60, "flush": 45, "server": 300, "sample": 0}
    big = False

    def restart_server():
        server.kill()
        time.sleep(5)
        server.start()

    restarter = None
    while (now := time.monotonic()) < end:
        t = now - start
        message = gst.gst_bus_timed_pop_filtered(bus, 200_000_000, GST_MESSAGE_ERROR | GST_MESSAGE_WARNING | GST_MESSAGE_ELEMENT)
        if message:
            kind = ctypes.cast(message, ctypes.POINTER(ctypes.c_int * 17))[0][16]
            if kind == GST_MESSAGE_ELEMENT:
                structure = gst.gst_message_get_structure(message)
                text = ctypes.string_at(gst.gst_structure_to_string(structure)).decode(errors="replace") if structure else ""
                if text.startswith("matanyone-stats"):
                    last_stats = {f.split("=", 1)[0].strip(): f.split(")", 1)[-1] for f in text.rstrip(";").split(", ")[1:]
                                  if f.split("=", 1)[0].strip() in ("inference-fps", "output-fps", "frames-processed", "engine")}
            else:
                error = vp()
                (gst.gst_message_parse_error if kind == GST_MESSAGE_ERROR else gst.gst_message_parse_warning)(message, ctypes.byref(error), None)
                text = ctypes.string_at(ctypes.cast(error, ctypes.POINTER(vp))[1]).decode(errors="replace") if error else "?"
                counts["errors" if kind == GST_MESSAGE_ERROR else "warnings"] += 1
                notes.append({"t_s": round(t, 1), "kind": "error" if kind == GST_MESSAGE_ERROR else "warning", "text": text[:300]})
                print(json.dumps(notes[-1]), flush=True)
            gst.gst_mini_object_unref(message)
        if t >= next_at["reseed"]:
            gobject.g_signal_emit_by_name(under, b"reseed"); counts["reseeds"] += 1; next_at["reseed"] += 20
        if t >= next_at["resize"]:
            big = not big
            caps = b"video/x-raw,width=320,height=176" if big else b"video/x-raw,width=256,height=144"
            gst.gst_util_set_object_arg(size, b"caps", caps); counts["resizes"] += 1; next_at["resize"] += 60
        if t >= next_at["flush"]:
            # (To the pipeline: a bin sends flush events to its sinks, and they travel upstream through
            # the element to the source, which restarts its task on FLUSH_STOP. Sent into the element's
            # sink pad instead, the first run stalled: the live source met FLUSHING and paused for good.)
            gst.gst_element_send_event(pipeline, gst.gst_event_new_flush_start())
            gst.gst_element_send_event(pipeline, gst.gst_event_new_flush_stop(0))
            counts["flushes"] += 1; next_at["flush"] += 45
        if t >= next_at["server"] and (restarter is None or not restarter.is_alive()):
            restarter = threading.Thread(target=restart_server); restarter.start()
            counts["server_restarts"] += 1; next_at["server"] += 300
        if t >= next_at["sample"]:
            samples.append({"t_s": round(t, 1), **process_figures(), **{k: counts[k] for k in ("errors", "warnings")}, **last_stats})
            print(json.dumps(samples[-1]), flush=True)
            next_at["sample"] += 10
    gst.gst_element_set_state(pipeline, GST_STATE_NULL)
    for obj in (under, size, bus, pipeline):
        gst.gst_object_unref(obj)
    if restarter:
        restarter.join()
    server.kill()

    settle = [s for s in samples if s["t_s"] >= 300] or samples  # (after the first server restart: warmed up)
    def spread(key):
        values = [s[key] for s in settle]
        return {"first": values[0], "last": values[-1], "min": min(values), "max": max(values)}
    cpu = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("model name")), "?")
    flags = Path("/proc/cpuinfo").read_text()
    isa = "AVX-512" + (" + AVX512_BF16" if "avx512_bf16" in flags else "") if "avx512f" in flags else "AVX2"
    result = {"what": "tools/soak.py: live async chain (videotestsrc 256x144@15 → matanyone mode=async, Triton server)",
              "machine": {"cpu": cpu, "isa": isa, "cores": os.cpu_count(), "kernel": platform.release()},
              "minutes": args.minutes, "counts": counts, "from_5_min": {k: spread(k) for k in ("rss_mib", "fds", "threads")},
              "messages": notes, "samples": samples}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("counts", "from_5_min")}))
    return 0 if counts["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
