"""The kubelet API's HTTP library: aiohttp against a bare ``asyncio`` + h11 server.

Each server runs in its own process over TLS (the kubelet API is always HTTPS) and answers
``GET /healthz`` with ``ok``. One client on a keep-alive connection sends ``--requests``
sequential requests (latency p50/p99), then ``--parallel`` connections send requests at once
(throughput); the server's RSS is read after the load. The h11 server is what one would write
without a framework: no routing, no middleware, no upgrade handling, so it is the floor.

    .venv/bin/python bench/kubelet_api_server.py [--requests 3000] [--parallel 20]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

SERVER = r"""
import asyncio, ssl, sys
kind, port, cert, key = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
if kind == "aiohttp":
    from aiohttp import web
    async def healthz(request):
        return web.Response(text="ok")
    app = web.Application()
    app.router.add_get("/healthz", healthz)
    web.run_app(app, host="127.0.0.1", port=port, ssl_context=ctx, print=None, access_log=None)
else:
    import h11
    async def handle(reader, writer):
        conn = h11.Connection(h11.SERVER)
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(65536)
                conn.receive_data(data)
                if not data:
                    break
                continue
            if isinstance(event, h11.Request):
                body = b"ok"
                writer.write(conn.send(h11.Response(status_code=200, headers=[
                    ("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])))
                writer.write(conn.send(h11.Data(data=body)))
                writer.write(conn.send(h11.EndOfMessage()))
                await writer.drain()
            elif isinstance(event, h11.EndOfMessage):
                conn.start_next_cycle()
            elif isinstance(event, h11.ConnectionClosed):
                break
        writer.close()
    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", port, ssl=ctx)
        async with server:
            await server.serve_forever()
    asyncio.run(main())
"""

REQUEST = b"GET /healthz HTTP/1.1\r\nHost: node\r\n\r\n"


async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(REQUEST)
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    await reader.readexactly(length)


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return await asyncio.open_connection("127.0.0.1", port, ssl=ctx)


async def load(port: int, requests: int, parallel: int) -> dict[str, float]:
    reader, writer = await connect(port)
    for _ in range(100):  # warm up
        await one(reader, writer)
    times = []
    for _ in range(requests):
        start = time.perf_counter()
        await one(reader, writer)
        times.append(time.perf_counter() - start)
    writer.close()
    conns = [await connect(port) for _ in range(parallel)]

    async def worker(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        for _ in range(requests // parallel):
            await one(r, w)

    start = time.perf_counter()
    await asyncio.gather(*(worker(r, w) for r, w in conns))
    elapsed = time.perf_counter() - start
    for _, w in conns:
        w.close()
    times.sort()
    return {
        "p50_us": statistics.median(times) * 1e6,
        "p99_us": times[int(0.99 * (len(times) - 1))] * 1e6,
        "rps_parallel": (requests // parallel) * parallel / elapsed,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--parallel", type=int, default=20)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from nodeagent.server import tls

    with tempfile.TemporaryDirectory() as tmp:
        cert, key = tls.ensure_self_signed(
            Path(tmp) / "pki", "bench", [], now=dt.datetime.now(dt.UTC)
        )
        print(f"{'server':<10} {'p50 µs':>8} {'p99 µs':>8} {'req/s x' + str(args.parallel):>12} "
              f"{'RSS idle MiB':>13} {'RSS after MiB':>14}")  # fmt: skip
        for kind in ("aiohttp", "h11"):
            port = free_port()
            proc = subprocess.Popen(
                [sys.executable, "-c", SERVER, kind, str(port), str(cert), str(key)],
                env={**os.environ},
            )
            try:
                for _ in range(100):
                    try:
                        socket.create_connection(("127.0.0.1", port), timeout=1).close()
                        break
                    except OSError:
                        time.sleep(0.1)
                rss_idle = psutil.Process(proc.pid).memory_info().rss / 2**20
                result = asyncio.run(load(port, args.requests, args.parallel))
                rss = psutil.Process(proc.pid).memory_info().rss / 2**20
            finally:
                proc.terminate()
                proc.wait(timeout=10)
            print(
                f"{kind:<10} {result['p50_us']:>8.0f} {result['p99_us']:>8.0f}"
                f" {result['rps_parallel']:>12.0f} {rss_idle:>13.1f} {rss:>14.1f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
