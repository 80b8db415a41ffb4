"""Side-by-side preview (input | alpha | composite) of one frame of a clip, made by the installed
`matanyone` element: the clip runs through gst-launch-1.0 up to that frame with the straight-alpha
BGRA output, which carries both the frame and its matte.

    python -m tools.preview CLIP OUT.png [--frame N] [--color 0xAARRGGBB] [--gst-args "engine=..."]
"""
import argparse
import re
import subprocess
import sys
from fractions import Fraction

import numpy as np
from PIL import Image


def clip_info(path):
    """Width, height and frame count from gst-discoverer-1.0."""
    text = subprocess.run(["gst-discoverer-1.0", "-v", path], capture_output=True, text=True, check=True).stdout
    width = int(re.search(r"Width: (\d+)", text).group(1))
    height = int(re.search(r"Height: (\d+)", text).group(1))
    rate = Fraction(re.search(r"Frame rate: (\d+/\d+)", text).group(1))
    h, m, s = re.search(r"Duration: (\d+):(\d+):([\d.]+)", text).groups()
    seconds = int(h) * 3600 + int(m) * 60 + float(s)
    return width, height, max(1, int(seconds * rate))


def matted_frame(path, index, width, height, element_args):
    """Frame `index` (0-based) of the clip as BGRA with alpha = matte."""
    pipeline = (f'filesrc location="{path}" ! decodebin ! videoconvert ! video/x-raw,format=BGRA '
                f'! identity eos-after={index + 2} ! matanyone background=none {element_args} '
                f'! video/x-raw,format=BGRA ! fdsink fd=1')
    out = subprocess.run(["gst-launch-1.0", "-q"] + pipeline.split(" "), capture_output=True, check=False)
    size = width * height * 4
    frames = len(out.stdout) // size
    if frames <= index:
        sys.exit(f"preview: the pipeline gave {frames} frames, needed {index + 1}:\n{out.stderr.decode()}")
    return np.frombuffer(out.stdout[index * size:(index + 1) * size], dtype=np.uint8).reshape(height, width, 4)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("clip")
    parser.add_argument("output")
    parser.add_argument("--frame", type=int, help="frame index (default: mid-clip)")
    parser.add_argument("--color", default="0xff00b140", help="composite background, ARGB")
    parser.add_argument("--gst-args", default="", help="extra matanyone properties")
    args = parser.parse_args()

    width, height, count = clip_info(args.clip)
    index = args.frame if args.frame is not None else count // 2
    bgra = matted_frame(args.clip, index, width, height, args.gst_args).astype(np.float32)
    rgb = bgra[..., [2, 1, 0]]
    alpha = bgra[..., 3:4] / 255.0
    color = int(args.color, 16)
    background = np.array([(color >> 16) & 255, (color >> 8) & 255, color & 255], dtype=np.float32)
    composite = rgb * alpha + background * (1.0 - alpha)
    matte = np.repeat(bgra[..., 3:4], 3, axis=2)
    gap = np.full((height, 8, 3), 255, dtype=np.float32)
    side_by_side = np.concatenate([rgb, gap, matte, gap, composite], axis=1)
    Image.fromarray(np.clip(side_by_side + 0.5, 0, 255).astype(np.uint8)).save(args.output)
    print(f"preview of frame {index} of {count}: {args.output}")


if __name__ == "__main__":
    main()
