#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpus (Fuzz/corpus/TARGET/seed-*): small valid inputs of each
format, made here from our own tools' outputs and hand-written replies. Run again after a format
changes; crash inputs found later are kept beside them as regression-* files.

  .venv/bin/python Fuzz/make_seeds.py [--models DIR]
"""
import argparse
import json
import os
import struct
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def write(target: str, name: str, data: bytes) -> None:
    folder = HERE / "corpus" / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"seed-{name}").write_bytes(data)


def kserve(outputs, body_tail: bytes, announce=True, shared=False, chunk=4096, limit=None) -> bytes:
    """Fuzz/KServe's layout: flags (1 header length announced, 2 outputs in shared memory, 4 a limit
    follows), the announced length, the chunk size, [the limit], then the body."""
    header = json.dumps({"model_name": "matanyone2_step", "outputs": outputs}).encode()
    flags = (1 if announce else 0) | (2 if shared else 0) | (4 if limit is not None else 0)
    return (bytes([flags]) + struct.pack(">H", len(header)) + struct.pack(">H", chunk)
            + (struct.pack(">H", limit) if limit is not None else b"") + header + body_tail)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", type=Path, default=Path.home() / ".local/share/gst-matanyone/models")
    parser.add_argument("--test-models", type=Path, default=HERE.parent / "build/test-models")
    args = parser.parse_args()

    for name, path in [("segmenter", args.models / "segmenter/manifest.json"), ("rvm", args.models / "rvm/manifest.json"),
                       ("matanyone2", args.test_models / "matanyone2/manifest.json")]:
        if path.exists():
            write("Manifest", name, path.read_bytes())
    write("Manifest", "minimal", json.dumps({"format": 1, "engine": "segmenter", "models": {
        "segmenter": {"file": "m.onnx", "inputs": [{"name": "x", "shape": [1, 3, "H", "W/16"]}],
                      "outputs": [{"name": "y", "shape": [1, 1, "H", "W"]}]}}}).encode())

    # A tiny shared library of our own (no code: a SONAME and one DT_NEEDED), linked here.
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp, "empty.c"), Path(tmp, "seed.so")
        src.write_text("int fuzz_seed_symbol;\n")
        subprocess.run(["cc", "-shared", "-nostdlib", "-Wl,-soname,libfuzzseed.so.1", "-Wl,--no-as-needed", "-lm",
                        "-Wl,-z,noseparate-code", "-s", "-o", str(out), str(src)], check=True)
        write("ELF", "tiny-so", out.read_bytes())

    alpha = struct.pack("<4B", 0, 128, 255, 7)
    timing = struct.pack("<f", 12.5)
    write("KServe", "alpha-timing", kserve([
        {"name": "ALPHA", "datatype": "UINT8", "shape": [1, 2, 2], "parameters": {"binary_data_size": 4}},
        {"name": "TIMING", "datatype": "FP32", "shape": [1], "parameters": {"binary_data_size": 4}}], alpha + timing))
    write("KServe", "shared-memory", kserve([
        {"name": "ALPHA", "datatype": "UINT8", "shape": [1, 2, 2], "parameters": {"shared_memory_region": "a"}},
        {"name": "TIMING", "datatype": "FP32", "shape": [1], "parameters": {"binary_data_size": 4}}], timing, shared=True))
    write("KServe", "json-only", kserve([{"name": "TIMING", "datatype": "FP32", "shape": [1], "data": [1.0]}], b"",
                                        announce=False, chunk=3))
    write("KServe", "limited", kserve([{"name": "STATE", "datatype": "INT64", "shape": [2],
                                        "parameters": {"binary_data_size": 16}}], bytes(16), limit=120))

    headers = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nInference-Header-Content-Length: 12\r\n"
    metadata = {"name": "matanyone2_step", "inputs": [{"name": n} for n in ["OPS", "FRAME", "FRAME_U8", "SEEDS"]],
                "outputs": [{"name": n} for n in ["ALPHA", "UNCERTAINTY", "STATE", "TIMING"]]}
    write("Server", "metadata", headers + b"\x00" + json.dumps(metadata).encode())
    stats = {"model_stats": [{"name": "m", "inference_stats": {"queue": {"count": 12, "ns": 3400000}}}]}
    write("Server", "statistics", headers + b"\x00" + json.dumps(stats).encode())
    write("Server", "error", b"HTTP/1.1 500 Internal Server Error\r\n\x00" + json.dumps({"error": "matanyone2-state-lost"}).encode())

    for i, text in enumerate(["encoder=bf16,memframe=cpu", " Decoder = GPU , readout=cpu", "", "encoder=cpu,encoder=bf16"]):
        write("Placement", str(i), text.encode())
    for i, text in enumerate(["http://127.0.0.1:8000", "https://[::1]:8443/triton/", "http://server/v2", "HTTP://Host:1"]):
        write("URL", str(i), text.encode())

    def mask(width, height, stride_extra, offset, ww, wh, plane):
        return struct.pack(">HHBBBB", width, height, stride_extra + 16, offset + 8, ww - 1, wh - 1) + plane
    write("Mask", "4x3", mask(4, 3, 0, 0, 8, 6, bytes([0, 255, 255, 0] * 3)))
    write("Mask", "strided", mask(5, 4, 3, 2, 16, 9, bytes(2) + bytes(range(0, 256, 8))[:8 * 4]))
    write("Mask", "two-people", mask(8, 2, 0, 0, 4, 4, bytes([255, 255, 0, 0, 0, 0, 128, 128] * 2)))


if __name__ == "__main__":
    main()
