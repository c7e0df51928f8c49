"""The Node's spec.podCIDRs reach the runtime through UpdateRuntimeConfig, as the kubelet's
updatePodCIDR hands them over, and Ready follows the runtime's NetworkReady."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from nodeagent.apiserver import NODES, WatchCache
from nodeagent.kuberuntime import CriUnavailable
from nodeagent.log.facade import record_fields
from nodeagent.podcidr import PodCIDRManager, pod_cidr
from nodeagent.runtimestate import RuntimeState
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.fake_runtime import FakeRuntime

pytestmark = pytest.mark.looptime

NODE = "node-a"
NETWORK_NOT_READY = (
    "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady"
    " message:Network plugin returns error: cni plugin not initialized"
)


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        pytest.param(None, "", id="no node yet"),
        pytest.param({"spec": {}}, "", id="no podCIDRs allocated yet"),
        pytest.param({"spec": {"podCIDR": "10.244.1.0/24"}}, "", id="only the singular field"),
        pytest.param({"spec": {"podCIDRs": ["10.244.1.0/24"]}}, "10.244.1.0/24", id="one"),
        pytest.param(
            {"spec": {"podCIDRs": ["10.244.1.0/24", "fd00:10:244:1::/64"]}},
            "10.244.1.0/24,fd00:10:244:1::/64",
            id="dual stack joined by a comma",
        ),
    ],
)
def test_pod_cidr_is_the_nodes_pod_cidrs_joined(node: Any, expected: str) -> None:
    assert pod_cidr(node) == expected


async def until(check: Callable[[], object], *, within: float = 60.0) -> None:
    async with asyncio.timeout(within):
        while not check():  # noqa: ASYNC110 - polls what the managers publish
            await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def running(
    server: FakeApiServer, runtime: FakeRuntime
) -> AsyncIterator[tuple[PodCIDRManager, RuntimeState, list[str]]]:
    nodes = WatchCache(api=server, resource=NODES, field_selector=f"metadata.name={NODE}")
    pokes: list[str] = []

    async def connect(endpoint: str) -> FakeRuntime:
        return runtime

    state = RuntimeState(endpoint="unix:///run/fake-cri.sock", connect=connect)

    def applied() -> None:
        pokes.append(manager.pod_cidr())
        state.poke()

    manager = PodCIDRManager(
        node_name=NODE, node_cache=nodes, update=runtime.update_runtime_config, on_change=applied
    )
    tasks = [asyncio.create_task(r()) for r in (nodes.run, state.run, manager.run)]
    try:
        yield manager, state, pokes
    finally:
        for task in reversed(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def allocate(server: FakeApiServer, *cidrs: str) -> None:
    server.modify(NODES, NODE, lambda n: n["spec"].__setitem__("podCIDRs", list(cidrs)))


async def test_the_allocated_cidr_reaches_the_runtime_once_and_ready_follows_at_once() -> None:
    server, runtime = FakeApiServer(), FakeRuntime()
    server.seed(NODES, {"metadata": {"name": NODE}, "spec": {}})
    runtime.network_ready = False
    runtime.on_pod_cidr = lambda _cidr: setattr(runtime, "network_ready", True)
    async with running(server, runtime) as (_, state, pokes):
        await until(lambda: state.errors() == (NETWORK_NOT_READY,))
        assert runtime.pod_cidrs == []  # nothing allocated: nothing sent
        allocate(server, "10.244.3.0/24")
        started = asyncio.get_running_loop().time()
        await until(lambda: state.errors() == ())
        # the runtime is read again at once, not at its next 5 s check
        assert asyncio.get_running_loop().time() - started < 1.0
        server.modify(NODES, NODE, lambda n: n["metadata"].__setitem__("labels", {"a": "b"}))
        await asyncio.sleep(30)
    assert runtime.pod_cidrs == ["10.244.3.0/24"]
    assert pokes == ["10.244.3.0/24"]


async def test_a_changed_allocation_is_sent_again_with_both_families() -> None:
    server, runtime = FakeApiServer(), FakeRuntime()
    server.seed(NODES, {"metadata": {"name": NODE}, "spec": {"podCIDRs": ["10.244.1.0/24"]}})
    async with running(server, runtime) as (manager, _, _):
        await until(lambda: manager.pod_cidr() == "10.244.1.0/24")
        allocate(server, "10.244.1.0/24", "fd00:10:244:1::/64")
        await until(lambda: manager.pod_cidr() == "10.244.1.0/24,fd00:10:244:1::/64")
    assert runtime.pod_cidrs == ["10.244.1.0/24", "10.244.1.0/24,fd00:10:244:1::/64"]


async def test_a_refused_update_is_logged_in_the_kubelets_words_and_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, runtime = FakeApiServer(), FakeRuntime()
    server.seed(NODES, {"metadata": {"name": NODE}, "spec": {"podCIDRs": ["10.244.2.0/24"]}})
    runtime.inject_error(
        "UpdateRuntimeConfig", CriUnavailable("connection refused", rpc="UpdateRuntimeConfig")
    )
    caplog.set_level(logging.INFO)
    async with running(server, runtime) as (manager, _, pokes):
        await until(lambda: manager.pod_cidr() == "10.244.2.0/24")
    failures = [r for r in caplog.records if r.getMessage() == "Error updating pod CIDR"]
    assert len(failures) == 1
    assert record_fields(failures[0])["error"].startswith("failed to update pod CIDR: ")
    assert runtime.calls.count("UpdateRuntimeConfig") == 2
    assert pokes == ["10.244.2.0/24"]
    updated = [r for r in caplog.records if r.getMessage() == "Updating Pod CIDR"]
    fields = record_fields(updated[0])
    assert (fields["originalPodCIDR"], fields["newPodCIDR"]) == ("", "10.244.2.0/24")
