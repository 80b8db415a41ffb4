"""tools/bench_pixels.py end to end on a small size: every build this CPU runs is timed in one run and
gives the baseline's bytes on the dancer's frames (the per-kernel bytes are tested in Swift)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("MATANYONE_SHARED", ROOT.parent / "shared"))


@pytest.mark.skipif(not (SHARED / "media" / "test-sample2.mp4").exists(), reason="the dancer clip is not here")
def test_every_build_is_timed_and_gives_the_same_bytes(tmp_path: Path):
    out = tmp_path / "pixels.json"
    run = subprocess.run([sys.executable, "-m", "tools.bench_pixels", "--sizes", "322x182", "--frames", "3",
                          "--reps", "2", "--mattes", "edge,soft", "--json", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(out.read_text())
    assert [r["matte"] for r in report["results"]] == ["edge", "soft"]
    result = report["results"][1]
    assert (result["width"], result["height"]) == (322, 182)
    assert result["same_bytes"] is True
    assert result["supported"][0] == "baseline" and result["active"] in result["supported"]
    flags = Path("/proc/cpuinfo").read_text()
    if all(f' {flag}' in flags for flag in ('avx2', 'fma', 'bmi1', 'bmi2', 'f16c', 'abm', 'movbe')):
        assert "avx2" in result["supported"]
    for build in result["supported"]:
        for step in ("downscale", "upscale", "composite-none-estimated", "composite-color-estimated", "motion"):
            assert result["builds"][build][step]["median_ms"] > 0
    assert report["cpu"]["isa"] and "322x182" in run.stdout
