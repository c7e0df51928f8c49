"""What the periodic sync of running pods nothing happens to costs, counted in CRI requests,
with 110 pods. Each pod still syncs every minute (its status is computed again, its cgroup and
volumes looked at), but the runtime state it starts from is the one read before as long as
the PLEG's relists see the pod's sandboxes and containers unchanged: the relists' two list
calls are the only CRI requests of a quiet minute. Anything the relist sees change, and
anything the agent does to the pod, makes the next sync read the state again."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from pod_stack import NODE, Stack, until

from nodeagent.apiserver import CONFIGMAPS, PODS
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.pods import container, pod_object

pytestmark = pytest.mark.looptime

PODS_ON_NODE = 10
PER_POD_READS = ("PodSandboxStatus", "ContainerStatus")


def seed(server: FakeApiServer, name: str, **kw: Any) -> dict[str, Any]:
    body = pod_object(name, node=NODE, **kw)
    del body["metadata"]["uid"]
    return server.seed(PODS, body)


def phase(stack: Stack, name: str) -> str:
    return str(((stack.pod(name) or {}).get("status") or {}).get("phase", ""))


def rpcs(stack: Stack, since: int) -> Counter[str]:
    return Counter(stack.runtime.calls[since:])


async def test_a_quiet_minute_of_running_pods_asks_the_runtime_only_for_the_relists(
    stack: Stack,
) -> None:
    names = [f"web-{i}" for i in range(PODS_ON_NODE)]
    for name in names:
        seed(stack.server, name)
    await until(lambda: all(phase(stack, n) == "Running" for n in names), within=60)
    await asyncio.sleep(2)
    mark = len(stack.runtime.calls)
    patches = len(stack.server.calls_to("patch", "pods"))

    await asyncio.sleep(125)  # two resyncs of every pod, 125 relists

    calls = rpcs(stack, mark)
    assert {rpc: calls[rpc] for rpc in PER_POD_READS} == dict.fromkeys(PER_POD_READS, 0)
    # Only the PLEG lists (one ListPodSandbox and one ListContainers per relist): before the
    # relist served as the pods' runtime cache, each pod's resync added a filtered
    # ListPodSandbox and ListContainers, one PodSandboxStatus and one ContainerStatus per
    # container.
    assert calls["ListPodSandbox"] == calls["ListContainers"]
    assert 124 <= calls["ListPodSandbox"] <= 127
    assert len(stack.server.calls_to("patch", "pods")) == patches


async def test_a_container_that_exits_between_resyncs_is_read_again_and_restarted(
    stack: Stack,
) -> None:
    seed(stack.server, "web", containers=[container("app", command=["sleep", "3600"])])
    await until(lambda: phase(stack, "web") == "Running")
    await asyncio.sleep(30)
    [first] = await stack.running("app")
    mark = len(stack.runtime.calls)

    stack.runtime.exit_container(first.id, exit_code=3)

    [second] = await until(lambda: stack.running("app"), within=3)
    assert second.id != first.id
    assert rpcs(stack, mark)["ContainerStatus"] >= 1  # read again, not reused
    await until(
        lambda: (stack.pod("web") or {})["status"]["containerStatuses"][0]["restartCount"] == 1
    )
    app = (stack.pod("web") or {})["status"]["containerStatuses"][0]
    assert app["lastState"]["terminated"]["exitCode"] == 3


async def test_a_resource_update_by_the_agent_is_read_back_not_reused(stack: Stack) -> None:
    """What the runtime reports besides a container's state can only change when the agent
    changes it (UpdateContainerResources): then the state is read again."""
    seed(stack.server, "web")
    await until(lambda: phase(stack, "web") == "Running")
    await asyncio.sleep(3)
    manager = stack.manager
    assert manager is not None
    uid = (stack.pod("web") or {})["metadata"]["uid"]
    kept = await manager.pod_state(uid, reuse=True)
    mark = len(stack.runtime.calls)
    assert await manager.pod_state(uid, reuse=True) is kept
    assert rpcs(stack, mark)["ContainerStatus"] == 0

    assert stack.workers is not None
    [pod] = stack.workers.active_pods()
    [record] = kept.containers
    updated = manager.resources_updated  # what the stats sampler watches to read limits again
    await manager.update_container_resources(pod, pod.spec.containers[0], record.id)
    assert manager.resources_updated > updated
    again = await manager.pod_state(uid, reuse=True)
    assert again is not kept
    assert rpcs(stack, mark)["ContainerStatus"] == 1


async def test_a_resync_fetches_no_environment_only_a_container_start_does(stack: Stack) -> None:
    """The containers' ConfigMaps and Secrets are read when a container is created, as the
    kubelet's ``makeEnvironmentVariables``: never by a sync that starts nothing."""
    stack.server.seed(
        CONFIGMAPS,
        {"metadata": {"name": "settings", "namespace": "default"}, "data": {"mode": "fast"}},
    )
    ref = {"configMapKeyRef": {"name": "settings", "key": "mode"}}
    seed(stack.server, "web", containers=[container("app", env=[{"name": "M", "valueFrom": ref}])])
    await until(lambda: phase(stack, "web") == "Running")
    assert len(stack.server.calls_to("get", "configmaps")) == 1
    await asyncio.sleep(125)  # two resyncs
    assert len(stack.server.calls_to("get", "configmaps")) == 1
    [first] = await stack.running("app")

    stack.runtime.exit_container(first.id, exit_code=1)  # restarted: its environment is read
    await until(lambda: len(stack.server.calls_to("get", "configmaps")) == 2, within=5)


async def test_a_deleted_pod_is_read_before_its_kill_and_after_it_only(stack: Stack) -> None:
    """The terminated sync and the removal of a killed pod reuse the state read after the
    kill (every container exited, no sandbox ready: nothing changes until the agent acts);
    each read is a ListPodSandbox, a PodSandboxStatus, a ListContainers and a ContainerStatus
    per container. Before, they read it twice more."""
    seed(stack.server, "web", grace=1)
    await until(lambda: phase(stack, "web") == "Running")
    await asyncio.sleep(3)
    mark = len(stack.runtime.calls)

    def delete(obj: dict[str, Any]) -> None:  # what kubectl delete does
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:05Z"
        obj["metadata"]["deletionGracePeriodSeconds"] = 1

    stack.server.modify(PODS, "web", delete, "default")
    await until(lambda: stack.pod("web") is None)
    await until(lambda: not stack.runtime.sandbox_ids and not stack.runtime.container_ids)

    calls = rpcs(stack, mark)
    assert {rpc: calls[rpc] for rpc in PER_POD_READS} == dict.fromkeys(PER_POD_READS, 2)
    assert (calls["StopContainer"], calls["RemoveContainer"], calls["RemovePodSandbox"]) == (
        1,
        1,
        1,
    )
    assert [c.name for c in stack.server.calls_to("delete", "pods")] == ["web"]
