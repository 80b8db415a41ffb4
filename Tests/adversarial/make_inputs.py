#!/usr/bin/env python3
"""Builds the hostile inputs of Tests/adversarial/run.sh (standard library only).

    make_inputs.py masks DIR                          seed-mask PNGs (valid, edge-case and broken)
    make_inputs.py random PATH NBYTES                 NBYTES of fixed-seed random bytes
    make_inputs.py manifest PATH file MODEL VALUE     models[MODEL].file = VALUE
    make_inputs.py manifest PATH sha256 MODEL         models[MODEL].sha256 = a wrong digest
    make_inputs.py manifest PATH dim MODEL PORT INDEX JSON
                                                      shape[INDEX] of input/output PORT = JSON value

`manifest` rewrites PATH in place, but always through a new file (write, then rename), so that a
manifest hard-linked to the installed one (run.sh clones model sets with `cp -l`) is never touched.
"""

import json
import os
import random
import struct
import sys
import zlib


def _replace(path, data):
    tmp = path + '.tmp'
    with open(tmp, 'wb') as f:
        f.write(data)
    os.replace(tmp, path)  # a new inode: a hard-linked original keeps its bytes


def png_gray(width, height, pixel):
    """An 8-bit greyscale PNG; pixel(x, y) -> 0..255."""
    def chunk(kind, body):
        return struct.pack('>I', len(body)) + kind + body + struct.pack('>I', zlib.crc32(kind + body) & 0xffffffff)
    raw = b''.join(b'\x00' + bytes(pixel(x, y) for x in range(width)) for y in range(height))
    return (b'\x89PNG\r\n\x1a\n'
            + chunk(b'IHDR', struct.pack('>IIBBBBB', width, height, 8, 0, 0, 0, 0))
            + chunk(b'IDAT', zlib.compress(raw, 9))
            + chunk(b'IEND', b''))


def masks(out):
    os.makedirs(out, exist_ok=True)
    # A person-like blob in the middle of a 64x48 frame: the valid mask the other cases start from.
    good = png_gray(64, 48, lambda x, y: 255 if 20 <= x < 44 and 8 <= y < 44 else 0)
    files = {
        'good.png': good,
        'one-pixel.png': png_gray(1, 1, lambda x, y: 255),
        'all-black.png': png_gray(64, 48, lambda x, y: 0),
        'all-white.png': png_gray(64, 48, lambda x, y: 255),
        'truncated.png': good[:len(good) // 2],
        'random.png': random.Random(1).randbytes(4096),
        'empty.png': b'',
    }
    for name, data in files.items():
        _replace(os.path.join(out, name), data)


def manifest(path, op, args):
    with open(path, 'rb') as f:
        m = json.load(f)
    model = m['models'][args[0]]
    if op == 'file':
        model['file'] = args[1]
    elif op == 'sha256':
        old = model.get('sha256') or '0' * 64
        model['sha256'] = ''.join('f' if c != 'f' else '0' for c in old)
    elif op == 'dim':
        port, index, value = args[1], int(args[2]), json.loads(args[3])
        ports = [p for p in model['inputs'] + model['outputs'] if p['name'] == port]
        if not ports:
            sys.exit(f'no port {port} in {args[0]}')
        ports[0]['shape'][index] = value
    else:
        sys.exit(f'unknown manifest operation {op}')
    _replace(path, (json.dumps(m, indent=2) + '\n').encode())


def main(argv):
    if len(argv) >= 2 and argv[0] == 'masks':
        masks(argv[1])
    elif len(argv) == 3 and argv[0] == 'random':
        _replace(argv[1], random.Random(argv[1]).randbytes(int(argv[2])))
    elif len(argv) >= 4 and argv[0] == 'manifest':
        manifest(argv[1], argv[2], argv[3:])
    else:
        sys.exit(__doc__)


if __name__ == '__main__':
    main(sys.argv[1:])
