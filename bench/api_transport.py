"""API client transports on a quiet apiserver: how late does a watch event arrive?

Starts its own control plane and, for each transport, opens ``--watches`` watches through one
``nodeagent.apiserver.ApiClient`` and creates one ConfigMap every ``--gap`` seconds
(``harness.watchprobe``), recording when the watch delivered it. Then, with the same watches
open, it sends ``--burst`` GETs at once (as a 30-pod start sends its status patches) and times
them. Transports: ``http2`` (every watch multiplexed on one HTTP/2 connection, requests on a
second: the agent before it moved to HTTP/1.1) and ``http1`` (one HTTP/1.1 connection per
watch, requests on a keep-alive pool: the agent now).

    PYTHONPATH=tests .venv/bin/python bench/api_transport.py [--writes 10] [--watches 6]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from harness.build import binaries
from harness.controlplane import ControlPlane, new_run_dir, start_control_plane
from harness.watchprobe import probe_watch_latency

from nodeagent.apiserver import NODES, ApiClient, load_kubeconfig

TRANSPORTS = {"http2": True, "http1": False}


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def burst(api: ApiClient, count: int) -> list[float]:
    async def one() -> float:
        start = time.monotonic()
        await api.list(NODES)
        return time.monotonic() - start

    return list(await asyncio.gather(*(one() for _ in range(count))))


async def measure(plane: ControlPlane, http2: bool, args: argparse.Namespace) -> dict[str, str]:
    api = ApiClient(endpoint=load_kubeconfig(plane.admin_kubeconfig), http2=http2, timeout=60)
    try:
        probe = await probe_watch_latency(
            api, watches=args.watches, writes=args.writes, gap=args.gap, deadline=args.deadline
        )
        late = [x for x in probe.latencies if x > 1.0]
        started = time.monotonic()
        times = await burst(api, args.burst)
        wall = time.monotonic() - started
        started = time.monotonic()
        warm = await burst(api, args.burst)  # the pool's idle connections are reused
        warm_wall = time.monotonic() - started
    finally:
        await api.aclose()
    ms = [x * 1000 for x in probe.latencies]
    return {
        "events": f"{len(probe.latencies)}/{args.writes}",
        "p50 ms": f"{statistics.median(ms):.0f}" if ms else "-",
        "max ms": f"{max(ms):.0f}" if ms else "-",
        "> 1 s": f"{len(late) + probe.missed}",
        f"{args.burst} GETs wall ms": f"{wall * 1000:.0f}",
        "GET p99 ms": f"{quantile(times, 0.99) * 1000:.0f}",
        "again: wall ms": f"{warm_wall * 1000:.0f}",
        "again: p99 ms": f"{quantile(warm, 0.99) * 1000:.0f}",
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--watches", type=int, default=6)
    parser.add_argument("--writes", type=int, default=10)
    parser.add_argument("--gap", type=float, default=2.0)
    parser.add_argument("--deadline", type=float, default=90.0)
    parser.add_argument("--burst", type=int, default=30)
    parser.add_argument("--only", choices=sorted(TRANSPORTS))
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="na-apit-"))
    root = new_run_dir()
    try:
        plane = start_control_plane(binaries=binaries(), root=root, log_dir=work / "logs")
        try:
            rows = {
                name: asyncio.run(measure(plane, http2, args))
                for name, http2 in TRANSPORTS.items()
                if args.only in (None, name)
            }
        finally:
            plane.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
    columns = list(next(iter(rows.values())))
    print(f"{args.watches} watches open, {args.writes} writes {args.gap:g} s apart")
    print("| transport | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join(row[c] for c in columns) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
