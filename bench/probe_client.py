"""The probes' client side alone: CPU per httpGet and tcpSocket probe in the agent's process,
over the socket (``nodeagent.prober.sockio``, what the agent uses) against asyncio's streams
(``asyncio.open_connection``, what it used before), and the cyclic garbage each leaves for the
collector.

    .venv/bin/python bench/probe_client.py [--probes 3000] [--rounds 3] [--markdown]

A blocking loopback HTTP server on a thread answers ``200 OK`` with a 2-byte body (the server
thread's own CPU time is taken off the process's). Each round runs ``--probes`` sequential
probes per client with the collector on, as in the agent, and one full collection at the end,
all counted; the objects the collector freed meanwhile are the cyclic garbage. The median round
is printed; ``--markdown`` prints a table row per client.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import socket
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from nodeagent.prober.http import http_probe, open_stream, request_headers
from nodeagent.prober.kinds import tcp_probe
from nodeagent.prober.sockio import open_socket_stream

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"


class Server:
    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.cpu = 0.0
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            started = time.thread_time()
            with conn:
                data = conn.recv(65536)
                if data:
                    conn.sendall(ANSWER)
            self.cpu += time.thread_time() - started


async def _streams(host: str, port: int, tls: Any, name: Any) -> tuple[Any, Any]:
    return await asyncio.open_connection(host, port)


async def _stream_connect(host: str, port: int) -> tuple[Any, Any]:
    return await asyncio.open_connection(host, port)


Probe = Callable[[], Awaitable[Any]]


def clients(port: int) -> dict[str, Probe]:
    url = f"http://127.0.0.1:{port}/healthz"
    headers = request_headers([], "kube-probe/1.36")
    return {
        "httpGet over the socket": lambda: http_probe(open_stream, url, headers, 1),
        "httpGet over asyncio streams": lambda: http_probe(_streams, url, headers, 1),
        "tcpSocket over the socket": lambda: tcp_probe(open_socket_stream, "127.0.0.1", port, 1),
        "tcpSocket over asyncio streams": lambda: tcp_probe(_stream_connect, "127.0.0.1", port, 1),
    }


def _collected() -> int:
    return sum(generation["collected"] for generation in gc.get_stats())


async def one_round(server: Server, probe: Probe, count: int) -> tuple[float, float]:
    """(client CPU µs per probe, cyclic garbage objects per probe)."""
    for _ in range(50):
        await probe()
    gc.collect()
    server.cpu = 0.0
    freed = _collected()
    started = time.process_time()
    for _ in range(count):
        await probe()
    gc.collect()
    cpu = time.process_time() - started - server.cpu
    return cpu / count * 1e6, (_collected() - freed) / count


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/probe_client.py")
    parser.add_argument("--probes", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    server = Server()
    if args.markdown:
        print("| client | CPU per probe (µs) | cyclic garbage per probe (objects) |")
        print("|---|---:|---:|")
    for name, probe in clients(server.port).items():
        rounds = [asyncio.run(one_round(server, probe, args.probes)) for _ in range(args.rounds)]
        cpu = statistics.median(r[0] for r in rounds)
        garbage = statistics.median(r[1] for r in rounds)
        if args.markdown:
            print(f"| {name} | {cpu:.0f} | {garbage:.1f} |")
        else:
            print(f"{name}: {cpu:.0f} µs CPU per probe, {garbage:.1f} cyclic garbage objects")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
