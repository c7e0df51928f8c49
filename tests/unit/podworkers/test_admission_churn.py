"""Admission under churn: which pods count against a new one, as the kubelet counts them.

The kubelet counts the pods its pod manager holds (those the API still has) that are not
inactive: not known terminated, and not in a terminal phase unless still terminating. A pod
the API no longer has frees its room at once, whatever its worker is doing; the scheduler
frees it at the same moment and may bind another pod into that room.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from pod_stack import NODE, running_stack, until

from nodeagent.apiserver import NODES, PODS
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.fake_runtime import FakeRuntime
from nodeagent.testing.pods import container, pod_object

pytestmark = pytest.mark.looptime


def seed(server: FakeApiServer, name: str, cpu: str, **kw: Any) -> dict[str, Any]:
    body = pod_object(name, node=NODE, containers=[container("app", requests={"cpu": cpu})], **kw)
    del body["metadata"]["uid"]
    return server.seed(PODS, body)


def phase(pod: dict[str, Any] | None) -> str:
    return str((pod or {}).get("status", {}).get("phase", ""))


def rejection(pod: dict[str, Any] | None) -> tuple[str, str]:
    status = (pod or {}).get("status", {})
    return status.get("reason", ""), status.get("message", "")


@pytest.fixture
def two_cpus(server: FakeApiServer) -> FakeApiServer:
    server.seed(
        NODES,
        {
            "metadata": {"name": NODE},
            "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"}},
        },
    )
    return server


async def test_pod_removed_in_the_same_watch_batch_frees_its_room(
    two_cpus: FakeApiServer, runtime: FakeRuntime
) -> None:
    async with running_stack(two_cpus, runtime) as stack:
        seed(stack.server, "a", "1")
        seed(stack.server, "b", "1")
        await until(lambda: phase(stack.pod("a")) == phase(stack.pod("b")) == "Running")
        # a force deletion (grace 0) and the scheduler's next binding reach the node together
        stack.server.remove(PODS, "a", "default")
        seed(stack.server, "c", "1")
        await until(lambda: phase(stack.pod("c")) in ("Running", "Failed"))
        assert rejection(stack.pod("c")) == ("", "")
        assert phase(stack.pod("c")) == "Running"


async def test_pod_removed_while_its_worker_is_busy_frees_its_room(
    two_cpus: FakeApiServer, runtime: FakeRuntime
) -> None:
    runtime.latency["RunPodSandbox"] = 30.0  # containerd under load: CNI takes its time
    async with running_stack(two_cpus, runtime) as stack:
        seed(stack.server, "a", "1")
        seed(stack.server, "b", "1")
        await until(lambda: runtime.calls.count("RunPodSandbox") == 2)
        stack.server.remove(PODS, "a", "default")
        await asyncio.sleep(5)  # a's worker still waits for its sandbox
        seed(stack.server, "c", "1")
        await until(lambda: phase(stack.pod("c")) in ("Running", "Failed"), within=120)
        assert rejection(stack.pod("c")) == ("", "")


async def test_terminating_pod_still_counts_until_its_containers_stop(
    two_cpus: FakeApiServer, runtime: FakeRuntime
) -> None:
    """A pod being deleted still holds its room until the node has stopped it (the kubelet's
    ``IsPodKnownTerminated``); a pod bound around the scheduler meanwhile is refused."""
    runtime.stop_seconds = 20.0  # its SIGTERM handler takes 20 s
    async with running_stack(two_cpus, runtime) as stack:
        seed(stack.server, "a", "1")
        seed(stack.server, "b", "1")
        await until(lambda: phase(stack.pod("a")) == phase(stack.pod("b")) == "Running")

        def delete(obj: dict[str, Any]) -> None:  # kubectl delete --grace-period=30
            obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:30Z"
            obj["metadata"]["deletionGracePeriodSeconds"] = 30

        stack.server.modify(PODS, "a", delete, "default")
        await asyncio.sleep(2)
        seed(stack.server, "c", "1")
        await until(lambda: phase(stack.pod("c")) == "Failed")
        assert rejection(stack.pod("c")) == (
            "OutOfcpu",
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 1000, "
            "used: 2000, capacity: 2000",
        )


async def test_a_restarted_node_admits_its_pods_with_what_it_had_allocated(
    two_cpus: FakeApiServer, runtime: FakeRuntime, tmp_path: Path
) -> None:
    """``a`` asks 1500m in its spec, but the node had allocated it 500m (the resize is still
    deferred): after a restart the kubelet admits it against its checkpoint, beside ``b``."""
    a = seed(two_cpus, "a", "1500m")
    seed(two_cpus, "b", "1")
    checkpoint = tmp_path / "allocated_pods_state"
    allocation = {"app": {"requests": {"cpu": "500m"}, "limits": {}}}
    checkpoint.write_text(json.dumps({"pods": {a["metadata"]["uid"]: {"allocation": allocation}}}))
    async with running_stack(
        two_cpus, runtime, allocation=True, allocation_checkpoint=checkpoint
    ) as stack:
        await until(lambda: phase(stack.pod("a")) == phase(stack.pod("b")) == "Running")
        assert rejection(stack.pod("a")) == rejection(stack.pod("b")) == ("", "")
