"""tools/matanyone2/fetch.py: licence gate, offline failure, download + verification (local
HTTP server; no internet needed)."""

from __future__ import annotations

import functools
import http.server
import threading
import time

import pytest

from conftest import run_module  # noqa: E402
from tools.matanyone2 import fetch  # noqa: E402


@pytest.fixture
def http_dir(tmp_path):
    """Serve tmp_path/'www' on 127.0.0.1; yields (folder, base URL)."""
    www = tmp_path / 'www'
    www.mkdir()
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(www))
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    th = threading.Thread(target=server.serve_forever, daemon=True)
    th.start()
    yield www, f'http://127.0.0.1:{server.server_address[1]}'
    server.shutdown()


def test_constants():
    assert fetch.CHECKPOINT_URL == \
        'https://github.com/pq-yang/MatAnyone2/releases/download/v1.0.0/matanyone2.pth'
    assert len(fetch.CHECKPOINT_SHA256) == 64


def test_refuses_without_license(tmp_path):
    r = run_module('tools.matanyone2.fetch', '--out', str(tmp_path), '--url', 'http://127.0.0.1:9/x.pth')
    assert r.returncode == 3
    assert 'S-Lab License 1.0' in r.stdout and 'NON-COMMERCIAL' in r.stdout
    assert '--accept-license' in r.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize('url', ['http://127.0.0.1:9/matanyone2.pth',            # refused
                                 'https://matanyone2-fetch-test.invalid/matanyone2.pth'])  # no DNS
def test_offline_fails_fast(tmp_path, url):
    t0 = time.monotonic()
    r = run_module('tools.matanyone2.fetch', '--out', str(tmp_path), '--accept-license',
                   '--url', url, '--timeout', '5', timeout=60)
    elapsed = time.monotonic() - t0
    assert r.returncode == 4, r.stderr
    assert f'cannot download {url}' in r.stderr and 'offline' in r.stderr and '--checkpoint' in r.stderr
    assert elapsed < 20
    assert not (tmp_path / 'matanyone2.pth').exists()
    assert not (tmp_path / 'matanyone2.pth.part').exists()


def test_wrong_file_is_refused(tmp_path, http_dir):
    www, base = http_dir
    (www / 'matanyone2.pth').write_bytes(b'x' * 1000)
    out = tmp_path / 'out'
    r = run_module('tools.matanyone2.fetch', '--out', str(out), '--accept-license',
                   '--url', f'{base}/matanyone2.pth', '--sha256', 'any')
    assert r.returncode == 4
    assert 'not the MatAnyone2 checkpoint' in r.stderr
    assert not (out / 'matanyone2.pth').exists()


def test_download_verify_and_validate(tmp_path, http_dir, m2_built):
    """A full-size MatAnyone2 state dict over HTTP: sha256 checked, keys validated; a wrong
    digest is refused."""
    import torch
    from tools.matanyone2.media import sha256_file
    www, base = http_dir
    torch.save(m2_built.net.state_dict(), www / 'matanyone2.pth')
    digest = sha256_file(www / 'matanyone2.pth')
    out = tmp_path / 'out'
    r = run_module('tools.matanyone2.fetch', '--out', str(out), '--accept-license',
                   '--url', f'{base}/matanyone2.pth', '--sha256', '0' * 64)
    assert r.returncode == 4 and 'sha256' in r.stderr
    r = run_module('tools.matanyone2.fetch', '--out', str(out), '--accept-license',
                   '--url', f'{base}/matanyone2.pth', '--sha256', digest)
    assert r.returncode == 0, r.stderr
    assert 'a valid MatAnyone2 state dict' in r.stdout
    assert sha256_file(out / 'matanyone2.pth') == digest
    r = run_module('tools.matanyone2.fetch', '--out', str(out), '--accept-license',
                   '--url', 'http://127.0.0.1:9/unused', '--sha256', digest)
    assert r.returncode == 0 and 'already present' in r.stdout
