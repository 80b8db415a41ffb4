"""Frame and mask I/O shared by the reference runner, the numpy glue and the tests.

Only numpy and Pillow: nothing here imports torch, so glue.py stays a numpy + onnxruntime program.

Frames come as the raw file that

    gst-launch-1.0 filesrc location=IN ! decodebin ! videoconvert ! videoscale \
        ! video/x-raw,format=BGRA,width=W,height=H ! filesink location=OUT

writes: frames concatenated, each H rows of W pixels of 4 bytes B, G, R, A, no row padding
(a width of 4 bytes per pixel keeps every row 4-byte aligned, so GStreamer adds no stride padding).
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import numpy as np


def read_bgra_frames(path: str | Path, width: int, height: int, count: int | None = None,
                     start: int = 0) -> np.ndarray:
    """Read `count` frames (all if None) from a raw BGRA file -> uint8 RGB [T, H, W, 3]."""
    frame_bytes = width * height * 4
    size = Path(path).stat().st_size
    if size % frame_bytes:
        raise ValueError(f'{path}: {size} bytes is not a whole number of {width}x{height} BGRA frames')
    available = size // frame_bytes - start
    if count is None:
        count = available
    if count > available or count < 1:
        raise ValueError(f'{path}: asked for {count} frames from frame {start}, '
                         f'the file holds {size // frame_bytes}')
    data = np.fromfile(path, dtype=np.uint8, count=count * frame_bytes, offset=start * frame_bytes)
    bgra = data.reshape(count, height, width, 4)
    return np.ascontiguousarray(bgra[..., [2, 1, 0]])  # BGRA -> RGB, alpha dropped


def read_mask(path: str | Path, width: int | None = None, height: int | None = None) -> np.ndarray:
    """Read a first-frame mask as upstream does (`PIL.Image.open(p).convert('L')`) -> uint8 [H, W]."""
    from PIL import Image
    mask = np.array(Image.open(path).convert('L'))
    if width is not None and mask.shape != (height, width):
        raise ValueError(f'{path}: mask is {mask.shape[1]}x{mask.shape[0]}, frames are {width}x{height}; '
                         'resize it first (e.g. resize_mask_nearest)')
    return mask


def resize_mask_nearest(mask: np.ndarray, width: int, height: int) -> np.ndarray:
    """Nearest-neighbour resize of a uint8 mask (keeps a binary mask binary)."""
    from PIL import Image
    return np.array(Image.fromarray(mask).resize((width, height), Image.Resampling.NEAREST))


def decode_video_bgra(video: str | Path, out: str | Path, width: int, height: int,
                      count: int | None = None, timeout: float = 300) -> Path:
    """Decode a video (its first `count` frames, else all) to a raw BGRA file at width x height with
    gst-launch-1.0 (see module doc)."""
    out = Path(out)
    # `identity eos-after=N` lets N-1 buffers through
    limit = ['identity', f'eos-after={count + 1}', '!'] if count is not None else []
    cmd = ['gst-launch-1.0', '-q', 'filesrc', f'location={video}', '!', 'decodebin', '!',
           'videoconvert', '!', 'videoscale', '!',
           f'video/x-raw,format=BGRA,width={width},height={height}', '!',
           *limit, 'filesink', f'location={out}']
    subprocess.run(cmd, check=True, timeout=timeout, stdout=subprocess.DEVNULL)
    return out


def alpha_deviation(test: np.ndarray, reference: np.ndarray) -> dict:
    """How far one run's alphas (in [0, 1], any shape) are from another's: mean, p99 and max |Δα|,
    and the IoU of the two mattes thresholded at 0.5."""
    d = np.abs(test.astype(np.float32) - reference.astype(np.float32))
    union = np.logical_or(test > 0.5, reference > 0.5).sum()
    inter = np.logical_and(test > 0.5, reference > 0.5).sum()
    return {'mean_abs': float(d.mean()), 'p99_abs': float(np.quantile(d, 0.99)), 'max_abs': float(d.max()),
            'iou_at_0.5': float(inter / union) if union else 1.0}


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            h.update(block)
    return h.hexdigest()
