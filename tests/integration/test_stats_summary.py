"""``/stats/summary`` and ``/metrics/resource`` on the real containerd and this host's /proc."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import prometheus_client
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE
from podnode import NODE, Node, phase, running_node, until

from nodeagent.cgroups import host_cgroup_fs
from nodeagent.clock import RealClock
from nodeagent.stats.cgroupv1 import V1PodCgroups
from nodeagent.stats.http import STATS, routes
from nodeagent.stats.summary import host_stats_provider
from nodeagent.testing.pods import container

pytestmark = pytest.mark.integration
V2 = host_cgroup_fs() == "cgroup2"
SANDBOX_STATS = {"operation_type": "list_podsandbox_stats"}


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
            v1_pods=None if V2 else V1PodCgroups(cgroup_root=node.settings.cgroup_root),
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


@pytest.mark.skipif(
    V2,
    reason="reads a cgroup v1 host's pod cgroups; on a v2 host pods come from the v2 sampler"
    " (test_pod_cgroups_spare_the_runtime_pod_stats_call, and the VM tier)",
)
async def test_on_cgroup_v1_a_pods_figures_are_its_cgroups_without_list_pod_sandbox_stats(
    served: tuple[Node, aiohttp.ClientSession, str],
) -> None:
    """containerd spent 1.35 s per ListPodSandboxStats with 100 pods here; the pod cgroup's
    own files give the pod's CPU and memory as cAdvisor gives them to the kubelet."""
    node, session, base = served
    script = "head -c 30000000 /dev/zero | tr '\\0' x > /dev/shm/x; sleep 3600"
    uid = node.create(
        "holder", containers=[container("app", image=BUSYBOX_IMAGE, command=["sh", "-c", script])]
    )
    await until("Running", lambda: phase(node.pod("holder")) == "Running", within=30)
    calls = prometheus_client.REGISTRY.get_sample_value(
        "kubelet_runtime_operations_total", SANDBOX_STATS
    )

    async def holding() -> dict[str, Any] | None:
        async with session.get(f"{base}/stats/summary") as r:
            body: dict[str, Any] = await r.json()
        pod = next((p for p in body["pods"] if p["podRef"]["uid"] == uid), None)
        used = pod.get("memory", {}).get("usageBytes", 0) if pod else 0
        return pod if used > 30_000_000 else None

    pod = await until("the pod holding 30 MB in its cgroup", holding, within=30, every=1)
    on_file = await asyncio.to_thread(_pod_memory_usage, node.settings.cgroup_root, uid)
    assert abs(pod["memory"]["usageBytes"] - on_file) < 4 * 2**20, (pod["memory"], on_file)
    assert 30_000_000 < pod["memory"]["workingSetBytes"] <= pod["memory"]["usageBytes"]
    assert pod["cpu"]["usageCoreNanoSeconds"] > 0
    after = prometheus_client.REGISTRY.get_sample_value(
        "kubelet_runtime_operations_total", SANDBOX_STATS
    )
    assert after == calls, "the runtime was asked for ListPodSandboxStats"


def _pod_memory_usage(cgroup_root: str, uid: str) -> int:
    """``memory.usage_in_bytes`` of the pod's v1 memory cgroup, in whichever QoS tier."""
    pod = next(Path("/sys/fs/cgroup/memory", cgroup_root.lstrip("/")).rglob(f"pod{uid}"))
    return int((pod / "memory.usage_in_bytes").read_text())
