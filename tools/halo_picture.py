"""Before/after picture of the compositor's foreground estimation (docs/halo-before-after.png).

A procedural scene, so that no third-party frame is involved: a head of light hair with fine strands
and a soft edge, filmed over a saturated green. The element's own compositor (driven through the Swift
test `compositesForThePicture`) puts it over a dark slate twice: blending the frame as it is (plain)
and with estimated foreground colours. Left: plain; right: estimated; a crop at 2× of where strands
cross the edge.

    python -m tools.halo_picture [OUT.png] [--keep FOLDER]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image, ImageDraw

WIDTH, HEIGHT = 480, 360
OLD_BACKGROUND = (30, 200, 60)          # RGB: a green screen
NEW_BACKGROUND = 0xFF2A3040              # ARGB: dark slate
CROP = (250, 40, 410, 200)               # x0, y0, x1, y1 in the scene
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def scene(seed=7):
    """Foreground colours (float RGB) and matte (float 0..1) of a head of hair with strands."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float32)
    cx, cy, rx, ry = 210.0, 250.0, 120.0, 150.0
    # The head: an ellipse with a soft (2 px) edge, shoulders below it.
    distance = np.sqrt(((x - cx) / rx) ** 2 + ((y - cy) / ry) ** 2)
    alpha = np.clip((1.0 - distance) * min(rx, ry) / 2.0 + 0.5, 0, 1)
    # Hair colour: golden with fine darker streaks (light hair shows a green spill the most).
    shade = 0.85 + 0.15 * np.sin(x / 2.5 + np.sin(y / 17.0) * 4.0) * np.sin(y / 31.0 + x / 53.0)
    colour = np.stack([205 * shade, 160 * shade, 95 * shade], axis=-1)
    # Strands: curved, thin, anti-aliased polylines from the edge outward, thinning towards the tip.
    strands = np.zeros((HEIGHT, WIDTH), np.float32)
    for _ in range(260):
        angle = rng.uniform(-2.6, -0.1)
        px, py = cx + rx * 0.97 * np.cos(angle), cy + ry * 0.97 * np.sin(angle)
        length, bend = rng.uniform(25, 80), rng.uniform(-0.025, 0.025)
        heading = angle + rng.uniform(-0.35, 0.35)
        strength = rng.uniform(0.5, 0.95)
        for step in range(int(length * 2)):
            t = step / (length * 2)
            heading += bend
            px += 0.5 * np.cos(heading)
            py += 0.5 * np.sin(heading)
            x0, y0 = int(np.floor(px)), int(np.floor(py))
            if not (0 <= x0 < WIDTH - 1 and 0 <= y0 < HEIGHT - 1):
                break
            fx, fy = px - x0, py - y0
            value = strength * (1 - t) ** 0.7
            for dx, dy, w in ((0, 0, (1 - fx) * (1 - fy)), (1, 0, fx * (1 - fy)), (0, 1, (1 - fx) * fy), (1, 1, fx * fy)):
                strands[y0 + dy, x0 + dx] = max(strands[y0 + dy, x0 + dx], value * min(1.0, 2.2 * w))
    alpha = np.maximum(alpha, np.clip(strands, 0, 1))
    return colour, alpha


def composite_with_swift(folder, frame_bgra, alpha_u8):
    frame_bgra.tofile(os.path.join(folder, "frame.bgra"))
    alpha_u8.tofile(os.path.join(folder, "alpha.gray"))
    env = dict(os.environ, HALO_PICTURE=f"{folder},{WIDTH},{HEIGHT}", HALO_PICTURE_COLOR=f"{NEW_BACKGROUND:08x}")
    subprocess.run(["swift", "build", "--build-tests"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["swift", "test", "--skip-build", "--filter", "ForegroundEstimatorTests/compositesForThePicture"],
                   cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    return [np.fromfile(os.path.join(folder, f"{name}.bgra"), np.uint8).reshape(HEIGHT, WIDTH, 4)[..., 2::-1]
            for name in ("plain", "estimated")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=os.path.join(ROOT, "docs", "halo-before-after.png"))
    parser.add_argument("--keep", help="folder for the raw frames (default: a temporary one)")
    args = parser.parse_args()
    colour, alpha = scene()
    alpha_u8 = np.round(alpha * 255).astype(np.uint8)
    a = alpha_u8.astype(np.float32)[..., None] / 255
    frame = np.round(a * colour + (1 - a) * np.array(OLD_BACKGROUND, np.float32)).astype(np.uint8)
    frame_bgra = np.dstack([frame[..., ::-1], np.full((HEIGHT, WIDTH), 255, np.uint8)])
    with tempfile.TemporaryDirectory() as temporary:
        folder = args.keep or temporary
        os.makedirs(folder, exist_ok=True)
        plain, estimated = composite_with_swift(folder, frame_bgra, alpha_u8)
    x0, y0, x1, y1 = CROP
    panels = [Image.fromarray(np.ascontiguousarray(p[y0:y1, x0:x1])).resize(((x1 - x0) * 2, (y1 - y0) * 2), Image.NEAREST)
              for p in (plain, estimated)]
    gap, label = 6, 22
    canvas = Image.new("RGB", (panels[0].width * 2 + gap, panels[0].height + label), (255, 255, 255))
    draw = ImageDraw.Draw(canvas)
    for index, (panel, text) in enumerate(zip(panels, ("plain blending (green halo)", "estimated foreground colours"))):
        left = index * (panel.width + gap)
        canvas.paste(panel, (left, label))
        draw.text((left + 4, 5), text, fill=(0, 0, 0))
    canvas.save(args.out, optimize=True)
    print(f"{args.out}: {os.path.getsize(args.out) // 1024} KB")


if __name__ == "__main__":
    sys.exit(main())
