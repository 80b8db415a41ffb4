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
            regions = self.backend_regions()
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                pass
            self.process.wait(timeout=60)
            # Killed, Triton cannot remove its Python backend's shared memory (1 MB a model instance,
            # kept in /dev/shm until the machine restarts): its regions go with it.
            for name in regions:
                try:
                    os.unlink(f'/dev/shm/{name}')
                except FileNotFoundError:
                    pass
        self.process = None

    def backend_regions(self) -> list[str]:
        """The shared memory regions of this server's Python backend stubs (each names its own on its
        command line), read from the processes of its group."""
        regions = []
        for entry in Path('/proc').iterdir():
            if not entry.name.isdigit():
                continue
            try:
                # (The process group is field 5 of stat, after the command in parentheses.)
                if int((entry / 'stat').read_text().rsplit(')', 1)[1].split()[2]) != self.process.pid:
                    continue
                arguments = (entry / 'cmdline').read_bytes().split(b'\0')
            except (OSError, IndexError, ValueError):
                continue
            regions += [a.decode() for a in arguments if a.startswith(b'triton_python_backend_shm_region_') and b'/' not in a]
        return regions

    def __enter__(self):
        return self.start()

    def __exit__(self, *_):
        self.kill(signal.SIGTERM)
