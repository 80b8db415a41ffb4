"""A TCP relay that delays every byte by a fixed time in each direction, for the network-namespace
test where the kernel has no `netem` qdisc: a delay line (each chunk leaves `delay` after it came,
in order), not a per-chunk sleep, so throughput is unchanged and only latency grows.

    python delay_relay.py LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT DELAY_MS
"""

import asyncio
import sys
import time


async def pipe(reader, writer, delay):
    queue = asyncio.Queue()

    async def deliver():
        while True:
            due, chunk = await queue.get()
            if chunk is None:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(chunk)
            await writer.drain()
        writer.close()

    sender = asyncio.ensure_future(deliver())
    try:
        while True:
            chunk = await reader.read(1 << 16)
            if not chunk:
                break
            queue.put_nowait((time.monotonic() + delay, chunk))
    finally:
        queue.put_nowait((0, None))
        await sender


async def main(listen_host, listen_port, target_host, target_port, delay):
    async def connection(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection(target_host, target_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(pipe(client_reader, server_writer, delay), pipe(server_reader, client_writer, delay),
                             return_exceptions=True)

    server = await asyncio.start_server(connection, listen_host, listen_port)
    print('relaying', flush=True)
    async with server:
        await server.serve_forever()


if __name__ == '__main__':
    host, port, target, target_port, delay_ms = sys.argv[1:6]
    asyncio.run(main(host, int(port), target, int(target_port), float(delay_ms) / 1000))
