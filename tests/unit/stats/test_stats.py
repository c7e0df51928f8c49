"""Node figures from /proc, the Summary's shape from CRI stats, /metrics/resource."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from nodeagent.clock import FrozenClock
from nodeagent.kuberuntime import CriUnavailable
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.labels import CONTAINER_NAME
from nodeagent.stats.http import STATS, routes
from nodeagent.stats.node import (
    FsSample,
    NodeSample,
    cpu_ns_from_stat,
    meminfo,
    node_sample_from,
    vmstat,
)
from nodeagent.stats.resource import render
from nodeagent.stats.summary import StatsProvider
from nodeagent.testing.fake_runtime import FakeRuntime

STAT = "cpu  100 5 50 1000 20 3 2 1 0 0\ncpu0 100 5 50 1000 20 3 2 1 0 0\nbtime 1764000000\n"
MEMINFO = (
    "MemTotal:        8000000 kB\nMemFree:         2000000 kB\n"
    "Inactive(file):  1000000 kB\nAnonPages:        500000 kB\nHugePages_Total: 0\n"
)
IMAGE = "localhost:5000/busybox:1.36"
T0 = dt.datetime(2026, 11, 25, 4, 0, 0, tzinfo=dt.UTC)


def test_proc_parsing() -> None:
    # busy = user + nice + system + irq + softirq + steal = 100+5+50+3+2+1 ticks of 1/100 s
    assert cpu_ns_from_stat(STAT, clk_tck=100) == 161 * 10_000_000
    mem = meminfo(MEMINFO)
    assert mem["MemTotal"] == 8_000_000 * 1024
    assert mem["HugePages_Total"] == 0
    sample = node_sample_from(STAT, mem, vmstat("pgfault 42\npgmajfault 7\n"), None)
    assert sample.memory_usage == 6_000_000 * 1024
    assert sample.working_set == 5_000_000 * 1024
    assert (sample.page_faults, sample.major_page_faults) == (42, 7)
    assert sample.boot_time == 1764000000


class Node:
    def __init__(self) -> None:
        self.cpu_ns = 10**12

    async def sample(self) -> NodeSample:
        self.cpu_ns += 50_000_000  # 50 ms of cpu per sample
        return NodeSample(
            cpu_ns=self.cpu_ns,
            memory_total=8 * 2**30,
            memory_free=2 * 2**30,
            inactive_file=2**30,
            anon=2**29,
            page_faults=1,
            major_page_faults=0,
            fs=FsSample(capacity=100, available=40, used=60, inodes=10, inodes_free=4),
            boot_time=T0.timestamp() - 3600,
        )


async def running_pod(runtime: FakeRuntime) -> str:
    runtime.publish(IMAGE)
    await runtime.pull_image(IMAGE)
    sandbox = cri.sandbox_config(name="web", namespace="default", uid="u1")
    sid = await runtime.run_pod_sandbox(sandbox)
    ids = []
    for name in ("app", "sidecar"):
        cid = await runtime.create_container(
            sid,
            cri.ContainerConfig(
                metadata=cri.ContainerMetadata(name=name),
                image=cri.ImageSpec(image=IMAGE),
                labels={CONTAINER_NAME: name},
            ),
            sandbox,
        )
        await runtime.start_container(cid)
        ids.append(cid)
    runtime.usage[ids[0]] = (2_000_000_000, 30 * 2**20)
    runtime.usage[ids[1]] = (1_000_000_000, 10 * 2**20)
    return ids[0]


async def test_summary_shape() -> None:
    clock = FrozenClock(T0)
    runtime = FakeRuntime(clock=clock)
    app_id = await running_pod(runtime)
    provider = StatsProvider(
        runtime=runtime, clock=clock, node_name="n1", sample_node=Node().sample
    )
    first = await provider.summary()
    node = first["node"]
    assert node["nodeName"] == "n1"
    assert node["startTime"] == "2026-11-25T03:00:00Z"
    assert node["cpu"]["usageNanoCores"] == 500_000_000  # 50 ms over the 100 ms first gap
    assert node["memory"] == {
        "time": "2026-11-25T04:00:00Z",
        "availableBytes": 3 * 2**30,
        "usageBytes": 6 * 2**30,
        "workingSetBytes": 5 * 2**30,
        "rssBytes": 2**29,
        "pageFaults": 1,
        "majorPageFaults": 0,
    }
    assert node["fs"]["usedBytes"] == 60
    [pod] = first["pods"]
    assert pod["podRef"] == {"name": "web", "namespace": "default", "uid": "u1"}
    assert [c["name"] for c in pod["containers"]] == ["app", "sidecar"]
    app = pod["containers"][0]
    assert app["cpu"] == {"time": "2026-11-25T04:00:00Z", "usageCoreNanoSeconds": 2_000_000_000}
    assert app["memory"]["workingSetBytes"] == 30 * 2**20
    assert pod["cpu"]["usageCoreNanoSeconds"] == 3_000_000_000
    assert pod["memory"]["workingSetBytes"] == 40 * 2**20
    # a second sample 10 s later: rates from the two
    clock.advance(10)
    runtime.usage[app_id] = (7_000_000_000, 30 * 2**20)
    second = await provider.summary()
    assert second["pods"][0]["containers"][0]["cpu"]["usageNanoCores"] == 500_000_000


async def test_resource_metrics_and_summary_over_http() -> None:
    clock = FrozenClock(T0)
    runtime = FakeRuntime(clock=clock)
    await running_pod(runtime)
    app = web.Application()
    app.add_routes(routes)
    app[STATS] = StatsProvider(
        runtime=runtime, clock=clock, node_name="n1", sample_node=Node().sample
    )
    async with TestClient(TestServer(app)) as client:
        r = await client.get("/stats/summary?only_cpu_and_memory=true")
        body: dict[str, Any] = await r.json()
        assert set(body["node"]) == {"nodeName", "startTime", "cpu", "memory"}
        r = await client.get("/metrics/resource")
        text = await r.text()
    ms = int(T0.timestamp() * 1000)
    assert "# TYPE container_cpu_usage_seconds_total counter" in text
    labels = 'container="app",namespace="default",pod="web"'
    assert f"container_cpu_usage_seconds_total{{{labels}}} 2.0 {ms}" in text
    assert f'pod_memory_working_set_bytes{{namespace="default",pod="web"}} 41943040.0 {ms}' in text
    assert "node_memory_working_set_bytes 5368709120.0" in text
    assert "container_start_time_seconds{" in text
    assert "\nresource_scrape_error 0\n" in text


def test_scrape_error_when_the_runtime_fails() -> None:
    text = render(None, timestamp_ms=1)
    assert "resource_scrape_error 1\n" in text
    assert "node_cpu" not in text


async def test_summary_is_a_500_when_the_runtime_is_down() -> None:
    clock = FrozenClock(T0)
    runtime = FakeRuntime(clock=clock)
    runtime.inject_error(
        "ListPodSandbox", CriUnavailable("connection refused", rpc="ListPodSandbox")
    )
    app = web.Application()
    app.add_routes(routes)
    app[STATS] = StatsProvider(
        runtime=runtime, clock=clock, node_name="n1", sample_node=Node().sample
    )
    async with TestClient(TestServer(app)) as client:
        r = await client.get("/stats/summary")
        assert r.status == 500
        assert "connection refused" in await r.text()


@pytest.mark.parametrize("value", ['a"b', "a\\b"])
def test_label_values_are_escaped(value: str) -> None:
    summary = {
        "node": {},
        "pods": [
            {
                "podRef": {"name": value, "namespace": "n", "uid": "u"},
                "memory": {"workingSetBytes": 1},
                "containers": [],
            }
        ],
    }
    text = render(summary, timestamp_ms=1)
    assert 'pod="' + value.replace("\\", "\\\\").replace('"', '\\"') + '"' in text
