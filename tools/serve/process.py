"""A Triton server of tools/serve run as a child process: a repository written for it, free ports,
started, killed (the whole process group: Triton and its Python backend stubs) and restarted. The
tests and the server benchmark use it; scripts/serve.sh runs tools.serve.server directly."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TRITON_PYTHON = REPO / '.venv-triton' / 'bin' / 'python'


def free_port(host: str = '127.0.0.1') -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class TritonServer:
    """tools.serve.server on a repository written for it, in a process group of its own (killed as a
    whole: Triton and its Python backend stubs). `netns`: run inside that network namespace."""

    def __init__(self, folder: Path, models: Path, *, address='127.0.0.1', delay_ms=0.0, idle_seconds=60.0,
                 netns: str | None = None):
        self.folder = folder
        self.address = address
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.netns = netns
        self.process = None
        repository = folder / 'repo'
        args = ['-m', 'tools.serve.repository', '--models', str(models), '--out', str(repository),
                '--link', '--idle-seconds', str(idle_seconds)]
        if delay_ms:
            args += ['--test-delay-ms', str(delay_ms)]
        subprocess.run([sys.executable, *args], cwd=REPO, check=True, capture_output=True, timeout=120)
        self.repository = repository

    @property
    def url(self) -> str:
        return f'http://{self.address}:{self.http_port}'

    def start(self, timeout: float = 120) -> 'TritonServer':
        command = [str(TRITON_PYTHON), '-m', 'tools.serve.server', '--repository', str(self.repository),
                   '--address', self.address, '--http-port', str(self.http_port), '--grpc-port', str(self.grpc_port)]
        if self.netns:
            command = ['ip', 'netns', 'exec', self.netns] + command
        self.log = open(self.folder / 'server.log', 'ab')
        self.process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=self.log, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            self.log.write(line)
            if line.startswith(b'ready http='):
                threading.Thread(target=self._drain, daemon=True).start()
                return self
        self.kill()
        raise RuntimeError(f'Triton did not start: see {self.folder / "server.log"}')

    def _drain(self):
        process = self.process
        for line in process.stdout:
            self.log.write(line)

    def kill(self, sig=signal.SIGKILL):
        if self.process and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                pass
            self.process.wait(timeout=60)
        self.process = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *_):
        self.kill(signal.SIGTERM)
