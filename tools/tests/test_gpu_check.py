"""tools/gpu_check.py on the GPU build scripts/test.sh installs with only cudart and curand."""
from pathlib import Path

import pytest

from tools import gpu_check

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "build" / "test-gpu-runtime" / "libonnxruntime.so.1"


@pytest.fixture(scope="module")
def runtime():
    if not RUNTIME.exists():
        pytest.fail(f"{RUNTIME} missing: scripts/test.sh installs it (scripts/install-gpu-runtime.sh)")
    return RUNTIME


def test_reads_the_providers_needs_from_its_elf_header(runtime):
    soname, needed = gpu_check.dynamic_dependencies(runtime.parent / "libonnxruntime_providers_cuda.so")
    assert {"libcublas.so.13", "libcublasLt.so.13", "libcudart.so.13", "libcurand.so.10"} <= set(needed)
    assert gpu_check.dynamic_dependencies(runtime.parent / "nvidia" / "libcurand.so.10")[0] == "libcurand.so.10"


def test_reports_each_library_and_what_is_missing(runtime, capsys):
    status = gpu_check.main(["--runtime", str(runtime)])
    out = capsys.readouterr().out
    assert status == 1
    assert "libcudart.so.13" in out and str(runtime.parent / "nvidia" / "libcudart.so.13") in out
    assert "libcublas.so.13                          MISSING (PyPI wheel nvidia-cublas)" in out
    assert "libcudnn.so.9                            MISSING (PyPI wheel nvidia-cudnn-cu13)" in out
    assert "run scripts/setup.sh --gpu" in out
    if not Path("/usr/lib/x86_64-linux-gnu/libcuda.so.1").exists():
        assert "no NVIDIA driver" in out


def test_a_cpu_build_is_not_taken_for_a_gpu_one(tmp_path, capsys):
    (tmp_path / "libonnxruntime.so.1").write_bytes(b"")
    assert gpu_check.main(["--runtime", str(tmp_path / "libonnxruntime.so.1")]) == 1
    assert "libonnxruntime_providers_cuda.so is missing" in capsys.readouterr().out
