"""Can the GPU build of ONNX Runtime run here? Reports, for the CUDA (and TensorRT) provider, where
each NVIDIA library it needs resolves (the libraries folder `scripts/setup.sh --gpu` fills, or the
system), the NVIDIA driver's version and the CUDA version it supports against what the build needs,
and the GPUs it sees. The element makes the same checks before it creates a GPU session
(Sources/MatteEngine/Runtime/GpuReadiness.swift); this is the readable version for a person.

    .venv/bin/python tools/gpu_check.py [--runtime DATA/onnxruntime-gpu/libonnxruntime.so.1] [--tensorrt]

Exit status 0 when the CUDA provider (and TensorRT with --tensorrt) can run, 1 otherwise.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import struct
import subprocess
import sys
from pathlib import Path

BASE_SYSTEM = {"libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0", "libstdc++.so.6",
               "libgcc_s.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", "libcuda.so.1"}
WHEELS = [("libcublas", "nvidia-cublas"), ("libcudart", "nvidia-cuda-runtime"), ("libcurand", "nvidia-curand"),
          ("libcufft", "nvidia-cufft"), ("libnvrtc", "nvidia-cuda-nvrtc"), ("libcudnn", "nvidia-cudnn-cu13"),
          ("libnvinfer", "tensorrt-cu13-libs"), ("libnvonnxparser", "tensorrt-cu13-libs")]
MINIMUM_DRIVER = {11: "450", 12: "525", 13: "580"}
CUDNN = "libcudnn.so.9"  # loaded by the CUDA provider at run time, not a DT_NEEDED entry


def dynamic_dependencies(path: Path) -> tuple[str | None, list[str]]:
    """(DT_SONAME, [DT_NEEDED]) of a 64-bit little-endian ELF shared library, read from its file."""
    with open(path, "rb") as f:
        header = f.read(64)
        if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
            raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
        phoff, = struct.unpack_from("<Q", header, 32)
        phnum, = struct.unpack_from("<H", header, 56)
        f.seek(phoff)
        table = f.read(phnum * 56)
        loads, dynamic = [], None
        for i in range(phnum):
            kind, = struct.unpack_from("<I", table, i * 56)
            offset, vaddr = struct.unpack_from("<QQ", table, i * 56 + 8)
            filesz, = struct.unpack_from("<Q", table, i * 56 + 32)
            if kind == 1:
                loads.append((vaddr, offset, filesz))
            elif kind == 2:
                dynamic = (offset, filesz)
        if dynamic is None:
            return None, []
        f.seek(dynamic[0])
        entries = f.read(dynamic[1])
        needed, soname, strtab, strsz = [], None, None, 0
        for i in range(0, len(entries) - 15, 16):
            tag, value = struct.unpack_from("<qQ", entries, i)
            if tag == 0:
                break
            if tag == 1:
                needed.append(value)
            elif tag == 5:
                strtab = value
            elif tag == 10:
                strsz = value
            elif tag == 14:
                soname = value
        if strtab is None:
            return None, []
        base = next(offset + strtab - vaddr for vaddr, offset, size in loads if vaddr <= strtab < vaddr + size)
        f.seek(base)
        strings = f.read(strsz)

        def text(at: int) -> str:
            return strings[at:strings.index(b"\0", at)].decode()

        return (text(soname) if soname is not None else None), [text(n) for n in needed]


def system_library(soname: str) -> str | None:
    """Where the system loader would find `soname` (ldconfig's cache), or None."""
    try:
        out = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    for line in out.splitlines():
        parts = line.strip().split(" => ")
        if len(parts) == 2 and parts[0].split(" ")[0] == soname:
            return parts[1]
    return None


def wheel_for(soname: str) -> str | None:
    return next((wheel for prefix, wheel in WHEELS if soname.startswith(prefix)), None)


def driver() -> dict:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as error:
        return {"present": False, "reason": str(error)}
    version = ctypes.c_int(0)
    cuda.cuDriverGetVersion(ctypes.byref(version))
    result = {"present": True, "cuda_version": version.value, "init": cuda.cuInit(0), "devices": []}
    release = Path("/proc/driver/nvidia/version")
    if release.exists():
        result["release"] = release.read_text().splitlines()[0]
    if result["init"] == 0:
        count = ctypes.c_int(0)
        cuda.cuDeviceGetCount(ctypes.byref(count))
        for index in range(count.value):
            device, name = ctypes.c_int(0), ctypes.create_string_buffer(256)
            cuda.cuDeviceGet(ctypes.byref(device), index)
            cuda.cuDeviceGetName(name, 256, device)
            result["devices"].append(name.value.decode())
    return result


def check(runtime: Path, folders: list[Path], tensorrt: bool) -> list[str]:
    problems: list[str] = []
    offered: dict[str, tuple[Path, list[str]]] = {}
    for folder in folders:
        for path in sorted(folder.glob("*.so*")) if folder.is_dir() else []:
            try:
                soname, needed = dynamic_dependencies(path)
            except (OSError, ValueError, StopIteration):
                continue
            offered.setdefault(soname or path.name, (path, needed))
    roots: list[str] = []
    for provider in (["tensorrt"] if tensorrt else []) + ["cuda"]:
        library = runtime.parent / f"libonnxruntime_providers_{provider}.so"
        if not library.exists():
            problems.append(f"{library} is missing: not the GPU build (run scripts/setup.sh --gpu)")
            continue
        roots += dynamic_dependencies(library)[1]
    roots += [CUDNN] + sorted(s for s in offered if s.startswith(("libcudnn_", "libnvrtc")))
    print(f"ONNX Runtime: {runtime}")
    print(f"NVIDIA libraries folder: {':'.join(map(str, folders))}")
    seen: set[str] = set()
    missing: list[str] = []

    def visit(soname: str) -> None:
        if soname in BASE_SYSTEM or soname in seen:
            return
        seen.add(soname)
        if soname in offered:
            path, needed = offered[soname]
            for dependency in needed:
                visit(dependency)
            print(f"  {soname:40s} {path}")
        elif (found := system_library(soname)) is not None:
            print(f"  {soname:40s} {found} (system)")
        else:
            wheel = wheel_for(soname)
            print(f"  {soname:40s} MISSING" + (f" (PyPI wheel {wheel})" if wheel else ""))
            missing.append(soname)

    for root in roots:
        visit(root)
    if missing:
        problems.append("missing " + ", ".join(missing) + " — run scripts/setup.sh --gpu" + (" --tensorrt" if tensorrt else ""))
    cudart = next((r for r in roots if r.startswith("libcudart.so.")), "libcudart.so.13")
    major = int(cudart.split(".so.")[1].split(".")[0])
    state = driver()
    if not state["present"]:
        print(f"NVIDIA driver: none ({state['reason']})")
        problems.append(f"no NVIDIA driver: install it ({MINIMUM_DRIVER.get(major, '?')} or newer); CUDA itself need not be installed")
    else:
        v = state["cuda_version"]
        print(f"NVIDIA driver: {state.get('release', 'libcuda.so.1')}; supports CUDA {v // 1000}.{v % 1000 // 10}; "
              f"this build needs CUDA {major}.0")
        if v < major * 1000:
            problems.append(f"the driver is too old for CUDA {major}: update it to {MINIMUM_DRIVER.get(major, '?')} or newer")
        elif state["init"] != 0:
            problems.append(f"cuInit failed with CUDA error {state['init']} (100: no GPU visible); check nvidia-smi")
        elif not state["devices"]:
            problems.append("the driver sees no GPU; check nvidia-smi and CUDA_VISIBLE_DEVICES")
        for index, name in enumerate(state["devices"]):
            print(f"GPU {index}: {name}")
    return problems


def main(argv=None) -> int:
    data = Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share")) / "gst-matanyone"
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runtime", type=Path, default=data / "onnxruntime-gpu" / "libonnxruntime.so.1")
    parser.add_argument("--tensorrt", action="store_true", help="also check the TensorRT provider's libraries")
    args = parser.parse_args(argv)
    env_folders = os.environ.get("MATANYONE_CUDA_LIBS", "")
    folders = [Path(p) for p in env_folders.split(":") if p] or [args.runtime.parent / "nvidia"]
    if not args.runtime.exists():
        print(f"{args.runtime} does not exist: run scripts/setup.sh --gpu")
        return 1
    problems = check(args.runtime, folders, args.tensorrt)
    if problems:
        print("\nThe GPU cannot be used yet:")
        for problem in problems:
            print(f"  - {problem}")
        return 1
    print("\nReady: execution-provider=cuda" + (" and tensorrt" if args.tensorrt else "") + " can run.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
