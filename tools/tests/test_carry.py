"""tools/carry.py's own logic: the edge band and alphas from elsewhere (the carry itself is tested in Swift)."""
from pathlib import Path

import cv2
import numpy as np

from tools.carry import BAND_PX, edge_bands, outside_alphas


def disc(radius: float, size: int = 100) -> np.ndarray:
    y, x = np.mgrid[0:size, 0:size]
    return (np.hypot(x - 50, y - 50) <= radius).astype(np.float32)


def test_edge_band_is_within_band_px_of_the_contour():
    alpha = disc(30)[None]
    band = edge_bands(alpha)[0].astype(bool)
    y, x = np.mgrid[0:100, 0:100]
    distance = np.abs(np.hypot(x - 50, y - 50) - 30)
    assert band[distance <= BAND_PX - 1.5].all()
    assert not band[distance >= BAND_PX + 1.5].any()


def test_no_contour_no_band():
    assert not edge_bands(np.zeros((1, 20, 20), np.float32)).any()
    assert not edge_bands(np.ones((1, 20, 20), np.float32)).any()


def test_alphas_from_a_png_folder_are_resized_and_in_name_order(tmp_path: Path):
    for index, value in enumerate([10, 200]):
        cv2.imwrite(str(tmp_path / f"{index:03d}.png"), np.full((20, 40), value, np.uint8))
    alphas = outside_alphas(tmp_path, 5, 8, 4)
    assert alphas.shape == (2, 4, 8)
    assert np.allclose(alphas[0], 10 / 255) and np.allclose(alphas[1], 200 / 255)
