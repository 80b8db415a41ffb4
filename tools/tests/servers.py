"""Helpers for the inference-server tests: a real Triton server of our own (tools/serve) on free
ports, started, killed and restarted; the installed element run by gst-launch-1.0 with its bus
messages read as they come; fake servers and proxies for what a real server never sends."""

from __future__ import annotations

import os
import re
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


def models_dir() -> Path:
    base = os.environ.get('MATANYONE_TEST_MODELS') or str(REPO / 'build' / 'test-models')
    return Path(base)


def data_dir() -> Path:
    return Path(os.environ.get('MATANYONE_TEST_DATA') or REPO / 'build' / 'test-data')


class TritonServer:
    """tools.serve.server on a repository written for it, in a process group of its own (killed as a
    whole: Triton and its Python backend stubs). `netns`: run inside that network namespace."""

    def __init__(self, folder: Path, *, address='127.0.0.1', delay_ms=0.0, idle_seconds=60.0, netns: str | None = None):
        self.folder = folder
        self.address = address
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.netns = netns
        self.process = None
        repository = folder / 'repo'
        args = ['-m', 'tools.serve.repository', '--models', str(models_dir() / 'matanyone2'), '--out', str(repository),
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


STATS = re.compile(r'matanyone-stats, (.*);')
FIELD = re.compile(r'([\w-]+)=\((\w+)\)([^,]+)')


def parse_fields(text: str) -> dict:
    row = {}
    for name, kind, value in FIELD.findall(text):
        value = value.strip().strip('"')
        if kind in ('double', 'float'):
            row[name] = float(value)
        elif kind in ('guint64', 'uint', 'int', 'gint64'):
            row[name] = int(value)
        elif kind == 'boolean':
            row[name] = value == 'true'
        else:
            row[name] = value
    return row


class Pipeline:
    """gst-launch-1.0 -m on a pipeline description: its stats, warnings, infos and errors as they come."""

    def __init__(self, description: str, env: dict | None = None):
        self.stats: list[dict] = []
        self.warnings: list[str] = []
        self.infos: list[str] = []
        self.errors: list[str] = []
        self.lines: list[str] = []
        self.events: list[tuple[str, object]] = []
        self.process = subprocess.Popen(['gst-launch-1.0', '-m', *description.split()], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, env={**os.environ, **(env or {})})
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.append(line)
            match = STATS.search(line)
            if match:
                self.stats.append(parse_fields(match.group(1)))
                self.events.append(('stats', self.stats[-1]))
            # gst-launch prints "WARNING: from element ...: <text>"; -m prints each message as it comes.
            if line.startswith('WARNING: from element'):
                self.warnings.append(line.strip())
                self.events.append(('warning', line.strip()))
            elif line.startswith('ERROR: from element'):
                self.errors.append(line.strip())
                self.events.append(('error', line.strip()))
            elif '(info): GstMessageInfo' in line:
                self.infos.append(line.strip().replace('\\ ', ' ').replace('\\,', ','))
                self.events.append(('info', self.infos[-1]))

    def stats_between(self, first: tuple[str, str], last: tuple[str, str]) -> list[dict]:
        """The stats after the first event of kind first[0] whose text holds first[1], before the
        first such `last` event after it."""
        inside, rows = False, []
        for kind, payload in self.events:
            if not inside and kind == first[0] and first[1] in payload:
                inside = True
            elif inside and kind == last[0] and last[1] in payload:
                break
            elif inside and kind == 'stats':
                rows.append(payload)
        return rows

    def stats_after(self, event: tuple[str, str]) -> list[dict]:
        return self.stats_between(event, ('never', 'never'))

    def wait_for(self, predicate, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self):
                return True
            if self.process.poll() is not None:
                self.reader.join(timeout=5)
                return predicate(self)
            time.sleep(0.05)
        return False

    def finish(self, timeout: float = 300) -> int:
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError('the pipeline hung:\n' + ''.join(self.lines[-40:]))
        self.reader.join(timeout=10)
        return code

    @property
    def output(self) -> str:
        return ''.join(self.lines)


def run(description: str, timeout: float = 300, env: dict | None = None) -> Pipeline:
    pipeline = Pipeline(description, env)
    pipeline.returncode = pipeline.finish(timeout)
    return pipeline
