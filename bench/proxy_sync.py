"""Service proxy sync benchmark: N ClusterIP services x E endpoints, in throwaway netns.

For each size it measures, through ProxyManager (in-memory Service/EndpointSlice stores, the real
``nft`` inside a fresh network namespace):

  (a)  the initial full sync into an empty namespace (and how much of it is nft);
  (a2) a full resync of the loaded table (what the periodic full sync costs);
  (b)  one endpoint of one service replaced -> partial sync applied (median and p90 of 20);
  (c)  the process RSS after the sync, and its growth over the empty process;
  floor: the raw ``nft -f`` load of the agent's own full-sync script (all of its steps as
         one file) into another empty namespace, and of one partial-sync script into the
         loaded table.

The apiserver and watch are not in the loop (the watch cache delivers objects as they are);
``ip netns exec`` costs a few ms per nft run and is in every figure, floor included.

    sudo .venv/bin/python bench/proxy_sync.py [--sizes 1000,5000,10000] [--endpoints 5] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import psutil

from nodeagent.clock import RealClock
from nodeagent.nft import Element, NFTables, Transaction, Verb
from nodeagent.nft.runner import ExecResult, subprocess_exec
from nodeagent.proxy.conntrack import ConntrackTool
from nodeagent.proxy.manager import ProxyManager
from nodeagent.proxy.settings import ProxySettings

Obj = dict[str, Any]
SERVICE_BASE = int(ipaddress.ip_address("10.96.0.0"))
POD_BASE = int(ipaddress.ip_address("10.244.0.0"))


class Store:
    def __init__(self, objects: list[Obj]) -> None:
        self.objects = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects}
        self.rv = 1

    @property
    def resource_version(self) -> str:
        return str(self.rv)

    def items(self) -> list[Obj]:
        return list(self.objects.values())

    async def wait_synced(self) -> None:
        return None

    async def wait_for(self, predicate: Callable[[Any], bool]) -> None:
        raise NotImplementedError  # the benchmark calls sync() itself

    def put(self, obj: Obj) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.objects[(obj["metadata"]["namespace"], obj["metadata"]["name"])] = obj


def objects(n: int, endpoints: int) -> tuple[list[Obj], list[Obj]]:
    services, slices = [], []
    for i in range(n):
        name, ns = f"svc-{i}", f"ns-{i % 50}"
        ip = str(ipaddress.ip_address(SERVICE_BASE + 10 + i))
        services.append({
            "metadata": {"name": name, "namespace": ns, "resourceVersion": "1"},
            "spec": {"clusterIP": ip, "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
        })  # fmt: skip
        slices.append(
            endpoint_slice(name, ns, [pod_ip(i * endpoints + j) for j in range(endpoints)])
        )
    return services, slices


def endpoint_slice(service: str, ns: str, ips: list[str]) -> Obj:
    return {
        "metadata": {
            "name": f"{service}-x",
            "namespace": ns,
            "resourceVersion": "1",
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in ips],
    }


def pod_ip(i: int) -> str:
    return str(ipaddress.ip_address(POD_BASE + 1 + i))


class TimedExec:
    """The real exec, timing the nft runs that apply a transaction (``nft -f``; not the
    listings, which run while the rules are built)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.runs = 0

    async def __call__(self, argv: Sequence[str], stdin: bytes) -> ExecResult:
        start = time.perf_counter()
        try:
            return await subprocess_exec(argv, stdin)
        finally:
            if "-f" in argv:
                self.seconds += time.perf_counter() - start
                self.runs += 1


def inverse(tx: Transaction) -> Transaction:
    """The element changes of ``tx`` undone (a script that is valid on the loaded table)."""
    back = Transaction(family=tx.family, table=tx.table)
    for op in reversed(tx.operations):
        if isinstance(op.obj, Element):
            (back.delete if op.verb is Verb.ADD else back.add)(op.obj)
    return back


def netns(name: str) -> None:
    subprocess.run(["ip", "netns", "add", name], check=True)


def nft_load(ns: str, script: str) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".nft") as f:
        f.write(script)
        f.flush()
        start = time.perf_counter()
        subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", f.name], check=True)
        return time.perf_counter() - start


def bench(n: int, endpoints: int, changes: int) -> dict[str, Any]:
    tag = f"na-bench-{os.getpid()}-{n}"
    netns(tag)
    netns(f"{tag}-floor")
    try:
        row, full, last = asyncio.run(measure(tag, n, endpoints, changes))
        row["floor_full_s"] = nft_load(f"{tag}-floor", full)
        row["floor_partial_ms"] = nft_load(tag, str(inverse(last))) * 1000
        return row
    finally:
        subprocess.run(["ip", "netns", "del", tag], check=False)
        subprocess.run(["ip", "netns", "del", f"{tag}-floor"], check=False)


async def measure(
    tag: str, n: int, endpoints: int, changes: int
) -> tuple[dict[str, Any], str, Transaction]:
    rss_empty = psutil.Process().memory_info().rss
    services, slices = objects(n, endpoints)
    timed = TimedExec()
    prefix = ("ip", "netns", "exec", tag)
    slice_store = Store(slices)
    nft = NFTables(family="ip", table="nodeagent", argv=(*prefix, "nft"), exec_=timed)
    manager = ProxyManager(
        settings=ProxySettings(
            node_name="bench",
            cluster_cidrs=("10.244.0.0/16",),
            service_cidrs=("10.96.0.0/12",),
            nodeport_ips=("192.0.2.1",),
        ),
        services=Store(services),
        slices=slice_store,
        nft={"ip": nft},
        conntrack=ConntrackTool(argv=(*prefix, "conntrack")),
        clock=RealClock(),
    )
    start = time.perf_counter()
    assert await manager.sync()
    initial = time.perf_counter() - start
    initial_nft = timed.seconds
    table = manager.table("ip")
    steps = table.last_transactions
    full = "".join(map(str, steps))
    rss = psutil.Process().memory_info().rss

    timed.seconds = 0
    start = time.perf_counter()
    assert await manager.sync(full=True)
    resync = time.perf_counter() - start
    resync_nft = timed.seconds

    latencies: list[float] = []
    for k in range(changes):
        i = (k * 7919) % n
        ips = [pod_ip(i * endpoints + j) for j in range(endpoints)]
        ips[-1] = pod_ip(n * endpoints + 1000 + k)
        slice_store.put(endpoint_slice(f"svc-{i}", f"ns-{i % 50}", ips))
        start = time.perf_counter()
        assert await manager.sync()
        latencies.append(time.perf_counter() - start)
    last = table.last_transaction
    assert last is not None
    chains, rules, elements = table.counts()
    row = {
        "services": n,
        "endpoints": endpoints,
        "chains": chains,
        "rules": rules,
        "elements": elements,
        "script_bytes": len(full),
        "initial_steps": len(steps),
        "initial_s": initial,
        "initial_nft_s": initial_nft,
        "resync_s": resync,
        "resync_nft_s": resync_nft,
        "change_median_ms": statistics.median(latencies) * 1000,
        "change_p90_ms": statistics.quantiles(latencies, n=10)[-1] * 1000,
        "change_ops": len(last),
        "rss_mib": rss / 2**20,
        "rss_growth_mib": (rss - rss_empty) / 2**20,
    }
    return row, full, last


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| services x eps | chains / rules / elements | (a) initial sync (nft part)"
        " | floor nft -f | (a2) full resync | (b) 1 endpoint change median / p90 (ops)"
        " | floor partial |"
        " (c) RSS (growth) |\n|---|---|---|---|---|---|---|---|\n"
    )
    lines = [
        f"| {r['services']:,} x {r['endpoints']} | {r['chains']} / {r['rules']} / {r['elements']:,}"
        f" | {r['initial_s']:.2f} s ({r['initial_nft_s']:.2f} s) | {r['floor_full_s']:.2f} s"
        f" | {r['resync_s']:.2f} s ({r['resync_nft_s']:.2f} s)"
        f" | {r['change_median_ms']:.0f} / {r['change_p90_ms']:.0f} ms ({r['change_ops']})"
        f" | {r['floor_partial_ms']:.0f} ms | {r['rss_mib']:.0f} MiB ({r['rss_growth_mib']:+.0f}) |"
        for r in rows
    ]
    return head + "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000,10000")
    parser.add_argument("--endpoints", type=int, default=5)
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [bench(int(n), args.endpoints, args.changes) for n in args.sizes.split(",")]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        nft = subprocess.run(["nft", "--version"], check=False, capture_output=True, text=True)
        version = nft.stdout.strip()
        print(f"{platform.node()} {platform.release()} {os.cpu_count()} CPUs, {version}, "
              f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}")  # fmt: skip
        print(table(rows))


if __name__ == "__main__":
    main()
