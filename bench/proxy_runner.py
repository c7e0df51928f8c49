"""nodeagent's service proxy alone, wired exactly as the agent wires it (`proxy_managers`: one
API client, the Services and EndpointSlices watch caches, `ServiceProxy` with the node IP
given), for `proxy_compare.py`. Run it inside the node's network namespace::

    ip netns exec NS .venv/bin/python bench/proxy_runner.py --kubeconfig K --node-name N \
        --node-ip IP --cluster-cidr C --service-cidr S --status FILE [--dump-full FILE]

Its own process, so its RSS is the proxy's (plus the imports it needs). After every sync it
rewrites ``--status`` (JSON: the proxy's metrics, as a scrape would show them); after the first
full sync it writes that sync's nft scripts (one per transaction: a first load of an empty
table may take several) to ``--dump-full``/``full-<k>.nft`` (the benchmark's floor).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

from nodeagent import log
from nodeagent.apiserver import NODES, ApiClient, WatchCache, load_kubeconfig
from nodeagent.clock import RealClock
from nodeagent.config.decode import decode
from nodeagent.proxy.manager import ProxyManager
from nodeagent.proxy.service import ServiceProxy, proxy_managers

POLL_S = 0.05


def status(manager: ProxyManager) -> dict[str, Any]:
    m = manager.metrics
    return {
        "syncs": m.sync_duration.count,
        "sync_sum": m.sync_duration.sum,
        "full_syncs": m.full_sync_duration.count,
        "full_sum": m.full_sync_duration.sum,
        "last_sync": m.last_sync.value,
        "failures": m.sync_failures.value,
        "programming_count": m.network_programming.count,
        "programming_sum": m.network_programming.sum,
        "chains": m.chains.value,
        "rules": m.rules.value,
        "elements": m.elements.value,
    }


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_scripts(directory: Path, scripts: list[str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for k, text in enumerate(scripts):
        write_atomic(directory / f"full-{k}.nft", text)


async def report(proxy: ServiceProxy, path: Path, dump: Path | None) -> None:
    seen = -1
    while True:
        await asyncio.sleep(POLL_S)
        manager = proxy.manager
        if manager is None or manager.metrics.sync_duration.count == seen:
            continue
        now = status(manager)
        if dump is not None and now["full_syncs"] >= 1:
            table = manager.table("ip")
            txs = getattr(table, "last_transactions", None) or [table.last_transaction]
            write_scripts(dump, [str(tx) for tx in txs])  # once, before any change: not timed
            dump = None
        seen = now["syncs"]
        write_atomic(path, json.dumps(now))


async def run(args: argparse.Namespace) -> None:
    config = decode({
        "proxy": {"clusterCIDR": args.cluster_cidr, "serviceCIDR": args.service_cidr},
    })  # fmt: skip
    api = ApiClient(endpoint=load_kubeconfig(args.kubeconfig))
    node_cache = WatchCache(api=api, resource=NODES, name="cache:node")  # never run: IP given
    managers = proxy_managers(
        config,
        api=api,
        clock=RealClock(),
        node_name=args.node_name,
        node_ips=(args.node_ip,),
        node_cache=node_cache,
        local_ips=lambda: (args.node_ip,),
    )
    proxy = managers[-1]
    assert isinstance(proxy, ServiceProxy)
    tasks = [asyncio.create_task(m.run()) for m in managers]
    tasks.append(asyncio.create_task(report(proxy, args.status, args.dump_full)))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    try:
        await asyncio.wait([*tasks, asyncio.create_task(stop.wait())],
                           return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        for t in tasks:
            if t.done() and t.exception():
                raise t.exception()  # type: ignore[misc]
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await api.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--node-name", required=True)
    parser.add_argument("--node-ip", required=True)
    parser.add_argument("--cluster-cidr", required=True)
    parser.add_argument("--service-cidr", required=True)
    parser.add_argument("--status", type=Path, required=True)
    parser.add_argument("--dump-full", type=Path)
    parser.add_argument("-v", type=int, default=0)
    args = parser.parse_args()
    log.setup(verbosity=args.v)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
