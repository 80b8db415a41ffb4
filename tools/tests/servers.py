"""Helpers for the inference-server tests: a real Triton server of our own (tools/serve) on free
ports, started, killed and restarted; the installed element run by gst-launch-1.0 with its bus
messages read as they come; fake servers and proxies for what a real server never sends."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

from tools.bench import parse_stats
from tools.serve.process import REPO, TritonServer, free_port  # noqa: F401 (the tests import them from here)


def models_dir() -> Path:
    base = os.environ.get('MATANYONE_TEST_MODELS') or str(REPO / 'build' / 'test-models')
    return Path(base)


def data_dir() -> Path:
    return Path(os.environ.get('MATANYONE_TEST_DATA') or REPO / 'build' / 'test-data')


def own_server(folder: Path, **options) -> TritonServer:
    """A Triton server of its own serving the random-init test set."""
    return TritonServer(folder, models_dir() / 'matanyone2', **options)


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
            for row in parse_stats(line):
                self.stats.append(row)
                self.events.append(('stats', row))
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
