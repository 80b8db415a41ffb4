"""Starts the real Triton Inference Server (2.51, the build inside the `nvidia-pytriton` wheel, CPU
only) on a model repository, in the foreground: Ctrl-C (or SIGTERM) stops it. Run with the Python of
the venv that holds that wheel (`.venv-triton`, made from Debian's python3 by scripts/setup.sh
--server): Triton's Python backend runs the MatAnyone2 step model with that interpreter.

    .venv-triton/bin/python -m tools.serve.server --repository build/triton-repo --http-port 8000

Prints one line `ready http=PORT grpc=PORT` once the server answers, then Triton's log.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def triton_dist() -> Path:
    spec = importlib.util.find_spec('pytriton')
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit('the nvidia-pytriton wheel is not installed in this Python (scripts/setup.sh --server '
                         'makes .venv-triton; run this with .venv-triton/bin/python)')
    return Path(list(spec.submodule_search_locations)[0])


def backend_dir(work: Path) -> Path:
    """Triton's backend folder: the wheel's Python backend with the stub of this interpreter's version."""
    dist = triton_dist()
    stub = dist / 'tritonserver' / 'python_backend_stubs' / f'{sys.version_info[0]}.{sys.version_info[1]}' / 'triton_python_backend_stub'
    if not stub.is_file():
        raise SystemExit(f'no Triton Python backend stub for Python {sys.version_info[0]}.{sys.version_info[1]} in {stub.parent.parent}')
    python = work / 'backends' / 'python'
    python.mkdir(parents=True, exist_ok=True)
    for name in ('libtriton_python.so', 'triton_python_backend_utils.py'):
        target = python / name
        if target.is_symlink() or target.exists():
            target.unlink()
        target.symlink_to(dist / 'tritonserver' / 'backends' / 'python' / name)
    # (Copied beside and renamed over: a stub still running from an earlier server keeps its own file.)
    staged = python / f'.stub-{os.getpid()}'
    shutil.copyfile(stub, staged)
    os.chmod(staged, 0o755)
    os.replace(staged, python / 'triton_python_backend_stub')
    return work / 'backends'


def command(args, backends: Path) -> list[str]:
    binary = triton_dist() / 'tritonserver' / 'bin' / 'tritonserver'
    return [str(binary), f'--model-repository={args.repository}', f'--backend-directory={backends}',
            f'--http-port={args.http_port}', f'--grpc-port={args.grpc_port}', f'--http-address={args.address}',
            f'--grpc-address={args.address}', '--allow-metrics=false', '--exit-timeout-secs=5', '--exit-on-error=true',
            '--strict-readiness=true', f'--log-verbose={args.log_verbose}']


def environment() -> dict:
    env = dict(os.environ)
    libs = triton_dist().parent / 'nvidia_pytriton.libs'
    env['LD_LIBRARY_PATH'] = f'{libs}:' + env.get('LD_LIBRARY_PATH', '')
    # The Python backend's stub finds its interpreter (and this venv's numpy and onnxruntime) on PATH.
    env['PATH'] = f'{Path(sys.executable).parent}:' + env.get('PATH', '')
    env['ORT_DISABLE_TELEMETRY'] = '1'
    return env


def wait_ready(args, process, timeout: float) -> bool:
    url = f'http://{"127.0.0.1" if args.address in ("0.0.0.0", "") else args.address}:{args.http_port}/v2/health/ready'
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url, timeout=1) as reply:
                if reply.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--repository', required=True, help='a model repository (tools.serve.repository writes one)')
    parser.add_argument('--http-port', type=int, default=8000)
    parser.add_argument('--grpc-port', type=int, default=8001)
    parser.add_argument('--address', default='0.0.0.0', help='the address to listen on (127.0.0.1: this machine only)')
    parser.add_argument('--work', default=None, help='a folder for the backend files (default: beside the repository)')
    parser.add_argument('--ready-timeout', type=float, default=120)
    parser.add_argument('--log-verbose', type=int, default=0)
    args = parser.parse_args(argv)
    repository = Path(args.repository).resolve()
    if not repository.is_dir():
        raise SystemExit(f'{repository}: no such model repository')
    args.repository = repository
    work = Path(args.work) if args.work else repository.parent / (repository.name + '-backends')
    process = subprocess.Popen(command(args, backend_dir(work)), env=environment(), stdout=sys.stdout, stderr=sys.stderr)

    def stop(*_):
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if wait_ready(args, process, args.ready_timeout):
        print(f'ready http={args.http_port} grpc={args.grpc_port}', flush=True)
    else:
        stop()
        process.wait(timeout=30)
        raise SystemExit(f'Triton did not become ready within {args.ready_timeout:.0f} s (its log is above)')
    return process.wait()


if __name__ == '__main__':
    sys.exit(main())
