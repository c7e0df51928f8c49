"""``/stats/summary`` and ``/metrics/resource`` on the real containerd and this host's /proc."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE
from podnode import NODE, Node, phase, running_node, until

from nodeagent.clock import RealClock
from nodeagent.stats.http import STATS, routes
from nodeagent.stats.summary import host_stats_provider
from nodeagent.testing.pods import container

pytestmark = pytest.mark.integration


@pytest.fixture
async def served(
    containerd: RuntimeEnv, tmp_path: Path
) -> AsyncIterator[tuple[Node, aiohttp.ClientSession, str]]:
    async with running_node(containerd, tmp_path) as node:
        app = web.Application()
        app.add_routes(routes)
        app[STATS] = host_stats_provider(
            runtime=node.managers.connection,
            clock=RealClock(),
            node_name=NODE,
            fs_path=str(tmp_path),
        )
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        try:
            async with aiohttp.ClientSession() as session:
                yield node, session, str(server.make_url("")).rstrip("/")
        finally:
            await server.close()


async def test_summary_and_resource_metrics_show_a_busy_pod(
    served: tuple[Node, aiohttp.ClientSession, str],
) -> None:
    node, session, base = served
    # a container that burns cpu and holds ~20 MiB
    script = "head -c 20000000 /dev/zero | tr '\\0' x > /dev/shm/x; while :; do :; done"
    uid = node.create(
        "busy", containers=[container("app", image=BUSYBOX_IMAGE, command=["sh", "-c", script])]
    )
    await until("Running", lambda: phase(node.pod("busy")) == "Running", within=30)

    async def summary() -> dict[str, Any]:
        async with session.get(f"{base}/stats/summary") as r:
            assert r.status == 200
            body: dict[str, Any] = await r.json()
            return body

    def pod_of(body: dict[str, Any]) -> dict[str, Any] | None:
        return next((p for p in body["pods"] if p["podRef"]["uid"] == uid), None)

    async def busy_with_rate() -> dict[str, Any] | None:
        pod = pod_of(await summary())
        if not pod or not pod["containers"]:
            return None
        cpu = pod["containers"][0].get("cpu", {})
        return pod if cpu.get("usageNanoCores", 0) > 100_000_000 else None

    pod = await until("the busy pod using > 0.1 core", busy_with_rate, within=30, every=1)
    app = pod["containers"][0]
    assert app["name"] == "app"
    assert app["memory"]["workingSetBytes"] > 15 * 2**20
    assert pod["podRef"] == {"name": "busy", "namespace": "default", "uid": uid}
    assert pod["cpu"]["usageCoreNanoSeconds"] >= app["cpu"]["usageCoreNanoSeconds"]
    body = await summary()
    n = body["node"]
    assert n["nodeName"] == NODE
    assert 0 < n["memory"]["workingSetBytes"] < n["memory"]["usageBytes"]
    assert n["cpu"]["usageNanoCores"] > 0
    assert n["fs"]["capacityBytes"] > n["fs"]["availableBytes"] > 0
    async with session.get(f"{base}/metrics/resource") as r:
        text = await r.text()
    line = re.search(
        r'^container_cpu_usage_seconds_total\{container="app",namespace="default",pod="busy"\}'
        r" (\S+) (\d+)$",
        text,
        re.M,
    )
    assert line, text
    assert float(line.group(1)) > 0
    assert re.search(r"^node_memory_working_set_bytes \S+ \d+$", text, re.M)
    assert re.search(
        r'^pod_memory_working_set_bytes\{namespace="default",pod="busy"\} ', text, re.M
    )
    assert "\nresource_scrape_error 0\n" in text
