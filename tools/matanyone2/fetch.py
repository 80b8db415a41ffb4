"""Download the official MatAnyone2 checkpoint (matanyone2.pth), after the licence is accepted.

    python -m tools.matanyone2.fetch --out models/ --accept-license
    python -m tools.matanyone2.export --out models/ --checkpoint models/matanyone2.pth

The weights are under the NTU S-Lab License 1.0: non-commercial use only. Without
--accept-license this prints the terms and stops before touching the network. The download is the
only network access of this toolchain (nothing at run time needs one); offline it fails within
--timeout seconds with a clear message.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

# Official release asset of https://github.com/pq-yang/MatAnyone2 (the URL upstream's
# inference_matanyone2.py downloads from).
CHECKPOINT_URL = 'https://github.com/pq-yang/MatAnyone2/releases/download/v1.0.0/matanyone2.pth'
CHECKPOINT_NAME = 'matanyone2.pth'
# TODO-verify: this digest is the one two independent third-party projects pin for this URL; it
# could not be checked here (no access to GitHub). A mismatch is reported as an error; after a
# genuine upstream update pass --sha256 NEW (or --sha256 any to rely on size + key validation).
CHECKPOINT_SHA256 = '5e9821e4087231427376b437c85bb6e072b41e582314f06fd524f75bc4af5914'
# 35.25 M fp32 parameters + buffers + pickle overhead: ~141 MB. Anything far off is not it.
CHECKPOINT_MIN_BYTES = 120_000_000
CHECKPOINT_MAX_BYTES = 170_000_000

LICENSE_SUMMARY = """\
MatAnyone2 weights and code: NTU S-Lab License 1.0 (Copyright 2023 S-Lab).
  * Redistribution and use, with or without modification, are permitted for NON-COMMERCIAL
    purposes only, provided the copyright notice, conditions and disclaimer are retained
    (in documentation/other materials for binary redistributions, e.g. converted ONNX files).
  * The copyright holder's name may not be used to endorse derived products without permission.
  * Provided "as is", without warranty of any kind.
  * Commercial use requires permission from the authors (see LICENSE.txt).
ONNX files converted from these weights stay under the same licence; export.py writes
LICENSE.txt next to them. Full text: tools/matanyone2/LICENSE-S-Lab-1.0.txt"""


class FetchError(RuntimeError):
    pass


def _resolve(url: str, timeout: float) -> None:
    """Name lookup with a deadline (urlopen's timeout does not cover DNS)."""
    import threading
    import urllib.parse
    host = urllib.parse.urlsplit(url).hostname
    if not host:
        raise FetchError(f'{url}: no host in URL')
    result = {}

    def lookup():
        try:
            socket.getaddrinfo(host, None)
            result['ok'] = True
        except OSError as e:
            result['error'] = e

    th = threading.Thread(target=lookup, daemon=True)
    th.start()
    th.join(timeout)
    if 'ok' not in result:
        reason = result.get('error', f'name lookup of {host} timed out after {timeout:g} s')
        raise FetchError(f'cannot download {url}: {reason}. Is this machine offline? Download the '
                         'file elsewhere, copy it here and pass it to export.py with --checkpoint.')


def download(url: str, dest: Path, *, timeout: float, expected_sha256: str | None,
             log=print) -> str:
    """Stream `url` to `dest` (via dest.part); return its sha256. Raises FetchError."""
    _resolve(url, timeout)
    part = dest.with_name(dest.name + '.part')
    h = hashlib.sha256()
    size = 0
    t0 = time.monotonic()
    try:
        req = urllib.request.Request(url, headers={'User-Agent': 'gst-matanyone-fetch/1'})
        with urllib.request.urlopen(req, timeout=timeout) as resp, open(part, 'wb') as f:
            total = int(resp.headers.get('Content-Length') or 0)
            last = t0
            while True:
                block = resp.read(1 << 20)
                if not block:
                    break
                f.write(block)
                h.update(block)
                size += len(block)
                if size > CHECKPOINT_MAX_BYTES:
                    raise FetchError(f'{url}: more than {CHECKPOINT_MAX_BYTES} bytes, not the checkpoint')
                now = time.monotonic()
                if now - last > 5:
                    log(f'  {size / 1e6:.0f} / {total / 1e6:.0f} MB')
                    last = now
    except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError, OSError) as e:
        part.unlink(missing_ok=True)
        reason = getattr(e, 'reason', e)
        raise FetchError(
            f'cannot download {url}: {reason}. Is this machine offline? Download the file '
            f'elsewhere, copy it here and pass it to export.py with --checkpoint.') from e
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    digest = h.hexdigest()
    if not CHECKPOINT_MIN_BYTES <= size <= CHECKPOINT_MAX_BYTES:
        part.unlink(missing_ok=True)
        raise FetchError(f'{url}: got {size} bytes, expected ~141 MB: not the MatAnyone2 checkpoint')
    if expected_sha256 and digest != expected_sha256:
        part.unlink(missing_ok=True)
        raise FetchError(f'{url}: sha256 {digest} != expected {expected_sha256}')
    os.replace(part, dest)
    log(f'downloaded {size / 1e6:.1f} MB in {time.monotonic() - t0:.0f} s, sha256 {digest}')
    return digest


def validate(path: Path) -> None:
    """Check that the file loads and is a MatAnyone2 state dict (needs torch + matanyone2)."""
    from . import network as N
    state = N.load_state_dict(path)
    N.import_upstream()
    from matanyone2.model.matanyone2 import MatAnyone2
    net = MatAnyone2(N.load_config(), single_object=True)
    N.validate_state_dict(state, net, source=str(path))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog='python -m tools.matanyone2.fetch', description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--out', type=Path, default=Path('.'), help='directory for matanyone2.pth')
    ap.add_argument('--accept-license', action='store_true',
                    help='accept the NTU S-Lab License 1.0 (non-commercial use only)')
    ap.add_argument('--url', default=CHECKPOINT_URL)
    ap.add_argument('--sha256', default=CHECKPOINT_SHA256,
                    help="expected sha256 ('any' to skip the digest check)")
    ap.add_argument('--timeout', type=float, default=10.0,
                    help='seconds to wait for the connection / each read (default 10)')
    ap.add_argument('--no-validate', action='store_true',
                    help='do not load the file to check its keys (no torch needed)')
    args = ap.parse_args(argv)

    print(LICENSE_SUMMARY)
    if not args.accept_license:
        print('\nNot downloading: re-run with --accept-license to accept these terms.',
              file=sys.stderr)
        return 3
    expected = None if args.sha256.lower() == 'any' else args.sha256.lower()
    args.out.mkdir(parents=True, exist_ok=True)
    dest = args.out / CHECKPOINT_NAME
    try:
        if dest.is_file() and expected:
            from .media import sha256_file
            if sha256_file(dest) == expected:
                print(f'{dest}: already present, sha256 matches')
                return 0
        print(f'\ndownloading {args.url}')
        download(args.url, dest, timeout=args.timeout, expected_sha256=expected)
        if not args.no_validate:
            validate(dest)
            print(f'{dest}: a valid MatAnyone2 state dict')
    except FetchError as e:
        print(f'error: {e}', file=sys.stderr)
        return 4
    except ValueError as e:  # CheckpointError
        print(f'error: {e}', file=sys.stderr)
        return 5
    return 0


if __name__ == '__main__':
    sys.exit(main())
