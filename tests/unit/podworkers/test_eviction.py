"""The eviction manager over the pods stack (fake API server and runtime, virtual time):
the evicted pod's status and Event, the node conditions and their transition period, the
highest-priority pod surviving, node-level reclaim before eviction, admission under
pressure and the memory notifier waking a pass between ticks."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pod_stack import NODE, Stack, running_stack, until

from nodeagent.apiserver import NODES, PODS
from nodeagent.events import ObjectReference
from nodeagent.eviction import EvictionManager, parse_thresholds
from nodeagent.kuberuntime import CriUnavailable
from nodeagent.lifecycle.admission import AdmitResult
from nodeagent.pods.managers import evict_pod
from nodeagent.podspec import Pod
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.fake_runtime import FakeRuntime
from nodeagent.testing.pods import container, pod_object

pytestmark = pytest.mark.looptime

Mi = 2**20
CAPACITY = 2048 * Mi


class Events:
    def __init__(self) -> None:
        self.node: list[tuple[str, str, str]] = []
        self.pods: list[tuple[str, str, str, str]] = []

    def record(self, type: str, reason: str, message: str) -> None:
        self.node.append((type, reason, message))

    def record_for(self, ref: ObjectReference, type: str, reason: str, message: str) -> None:
        self.pods.append((ref.name, type, reason, message))


class Node:
    """What the summary reports: node memory available, disk, and each pod's usage."""

    def __init__(self) -> None:
        self.available = 1500 * Mi
        self.nodefs_available = 50 * 2**30
        self.usage: dict[str, tuple[int, dict[str, int]]] = {}
        self.storage: dict[str, dict[str, Any]] = {}  # a pod's disk figures, by UID

    async def summary(self) -> dict[str, Any]:
        return {
            "node": {
                "memory": {
                    "time": "t",
                    "availableBytes": self.available,
                    "workingSetBytes": CAPACITY - self.available,
                },
                "fs": {
                    "availableBytes": self.nodefs_available,
                    "capacityBytes": 100 * 2**30,
                    "inodesFree": 10**6,
                    "inodes": 10**6,
                },
            },
            "pods": [
                {
                    "podRef": {"uid": uid},
                    "memory": {"workingSetBytes": total},
                    "containers": [
                        {"name": n, "memory": {"workingSetBytes": u}} for n, u in per.items()
                    ],
                }
                for uid, (total, per) in self.usage.items()
            ]
            + [{"podRef": {"uid": uid}, **disk} for uid, disk in self.storage.items()],
        }

    async def memory_available(self) -> int | None:
        return self.available


def seed(server: FakeApiServer, name: str, **kw: Any) -> dict[str, Any]:
    body = pod_object(name, node=NODE, **kw)
    del body["metadata"]["uid"]
    return server.seed(PODS, body)


def status(stack: Stack, name: str) -> dict[str, Any]:
    return dict((stack.pod(name) or {}).get("status", {}))


class Terminator:
    def __init__(self, stack: Stack) -> None:
        self.stack = stack

    async def evict(self, pod: Pod, eviction: Any) -> None:
        assert self.stack.podsync is not None and self.stack.workers is not None
        evict_pod(self.stack.podsync, self.stack.workers, pod, eviction)


def manager(stack: Stack, node: Node, events: Events, **kw: Any) -> EvictionManager:
    assert stack.workers is not None
    workers = stack.workers
    return EvictionManager(
        thresholds=kw.pop("thresholds", parse_thresholds(hard={"memory.available": "600Mi"})),
        transition_period=kw.pop("transition_period", 30.0),
        max_pod_grace_period=0,
        summary=node.summary,
        active_pods=kw.pop("active_pods", workers.active_pods),
        terminator=Terminator(stack),
        clock=stack.server.clock,
        pod_cleaned_up=lambda uid: (
            workers.stage(uid) is None or workers.stage(uid).name == "TERMINATED"
        ),
        memory_available=node.memory_available,
        node_events=events,
        pod_events=events,
        **kw,
    )


async def test_memory_pressure_evicts_the_hog_and_spares_the_high_priority_pod(
    stack: Stack,
) -> None:
    hog = seed(stack.server, "hog", containers=[container("x", command=["sleep", "1d"])])
    vip = seed(stack.server, "vip", priority=1_000_000)
    await until(lambda: status(stack, "hog").get("phase") == "Running")
    await until(lambda: status(stack, "vip").get("phase") == "Running")
    node, events = Node(), Events()
    node.usage = {
        hog["metadata"]["uid"]: (500 * Mi, {"x": 500 * Mi}),
        vip["metadata"]["uid"]: (700 * Mi, {"app": 700 * Mi}),
    }
    m = manager(stack, node, events)
    task = asyncio.create_task(m.run())
    try:
        await asyncio.sleep(1)
        assert m.conditions == [] and not m.evicted
        node.available = 80 * Mi  # the notifier notices within a second, not at the next tick
        await until(lambda: m.conditions == ["MemoryPressure"], within=2)
        final = await until(
            lambda: status(stack, "hog").get("phase") == "Failed" and status(stack, "hog")
        )
        message = (
            "The node was low on resource: memory. Threshold quantity: 600Mi, available: 80Mi. "
            "Container x was using 500Mi, request is 0, has larger consumption of memory. "
        )
        assert (final["reason"], final["message"]) == ("Evicted", message)
        disruption = next(c for c in final["conditions"] if c["type"] == "DisruptionTarget")
        assert (disruption["status"], disruption["reason"], disruption["message"]) == (
            "True",
            "TerminationByKubelet",
            message,
        )
        assert ("hog", "Warning", "Evicted", message) in events.pods
        assert ("Warning", "EvictionThresholdMet", "Attempting to reclaim memory") in events.node
        assert not await stack.running("x")
        # pressure relieved: the condition holds for the transition period, then clears
        node.available = 1500 * Mi
        del node.usage[hog["metadata"]["uid"]]
        await asyncio.sleep(15)
        assert m.conditions == ["MemoryPressure"]
        await until(lambda: m.conditions == [], within=40)
        assert status(stack, "vip").get("phase") == "Running"
        assert list(m.evicted) == [hog["metadata"]["uid"]]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_disk_pressure_reclaims_node_level_first(stack: Stack) -> None:
    seed(stack.server, "writer")
    await until(lambda: status(stack, "writer").get("phase") == "Running")
    node, events = Node(), Events()
    node.nodefs_available = 2 * 2**30  # below 10% of 100Gi
    reclaimed: list[str] = []

    async def image_gc() -> None:
        reclaimed.append("images")
        node.nodefs_available = 40 * 2**30

    m = manager(
        stack,
        node,
        events,
        thresholds=parse_thresholds(hard={"nodefs.available": "10%"}),
        reclaim={"nodefs.available": [image_gc]},
    )
    assert await m.synchronize() == []
    assert reclaimed == ["images"]
    assert m.conditions == ["DiskPressure"]
    assert status(stack, "writer").get("phase") == "Running"
    assert (
        "Warning",
        "EvictionThresholdMet",
        "Attempting to reclaim ephemeral-storage",
    ) in events.node


async def test_disk_pressure_evicts_when_reclaim_is_not_enough(stack: Stack) -> None:
    seed(stack.server, "writer")
    await until(lambda: status(stack, "writer").get("phase") == "Running")
    node, events = Node(), Events()
    node.nodefs_available = 2 * 2**30

    async def nothing_to_free() -> None:
        pass

    m = manager(
        stack,
        node,
        events,
        thresholds=parse_thresholds(hard={"nodefs.available": "10%"}),
        reclaim={"nodefs.available": [nothing_to_free]},
    )
    evicted = await m.synchronize()
    assert [p.name for p in evicted] == ["writer"]
    final = await until(
        lambda: status(stack, "writer").get("phase") == "Failed" and status(stack, "writer")
    )
    assert final["message"].startswith(
        "The node was low on resource: ephemeral-storage. "
        "Threshold quantity: 10Gi, available: 2Gi. "
    )


async def test_admission_refuses_best_effort_pods_under_memory_pressure(stack: Stack) -> None:
    node, events = Node(), Events()
    node.available = 10 * Mi
    m = manager(stack, node, events)
    await m.synchronize()

    def admit(pod: Pod) -> AdmitResult | None:
        refusal = m.admit(pod)
        return None if refusal is None else AdmitResult(False, refusal.reason, refusal.message)

    stack.sync_loop.admit_handlers.append(admit)
    seed(stack.server, "late")
    seed(stack.server, "burst", containers=[container("c", requests={"memory": "1Mi"})])
    refused = await until(
        lambda: status(stack, "late").get("phase") == "Failed" and status(stack, "late")
    )
    assert refused["reason"] == "Evicted"
    assert refused["message"] == "Pod was rejected: The node had condition: [MemoryPressure]. "
    await until(lambda: status(stack, "burst").get("phase") == "Running")


async def test_soft_threshold_waits_for_its_grace_period(stack: Stack) -> None:
    seed(stack.server, "web")
    await until(lambda: status(stack, "web").get("phase") == "Running")
    node, events = Node(), Events()
    node.available = 500 * Mi
    m = manager(
        stack,
        node,
        events,
        thresholds=parse_thresholds(
            hard={}, soft={"memory.available": "1Gi"}, soft_grace={"memory.available": 30.0}
        ),
    )
    assert await m.synchronize() == []
    assert m.conditions == ["MemoryPressure"]
    await asyncio.sleep(31)
    evicted = await m.synchronize()
    assert [p.name for p in evicted] == ["web"]


async def test_a_pending_resize_is_ranked_and_described_by_the_allocated_request(
    server: FakeApiServer, runtime: FakeRuntime
) -> None:
    """web asks for 5Gi by a resize the 4Gi node cannot take (PodResizePending Infeasible):
    eviction still sees its allocated 64Mi request, so web (300Mi used) goes before other
    (250Mi used, 100Mi requested), with the allocated request in the message."""
    server.seed(
        NODES,
        {
            "metadata": {"name": NODE},
            "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"}},
        },
    )
    async with running_stack(server, runtime, allocation=True) as stack:
        assert stack.allocation is not None and stack.workers is not None
        allocation, workers = stack.allocation, stack.workers
        web = seed(
            server,
            "web",
            containers=[container("app", command=["sleep", "1d"], requests={"memory": "64Mi"})],
        )
        other = seed(
            server,
            "other",
            containers=[container("app", command=["sleep", "1d"], requests={"memory": "100Mi"})],
        )
        await until(lambda: status(stack, "web").get("phase") == "Running")
        await until(lambda: status(stack, "other").get("phase") == "Running")
        body = dict(stack.pod("web") or {})
        body["spec"]["containers"][0]["resources"] = {"requests": {"memory": "5Gi"}}
        body["metadata"]["generation"] = 2
        await server.replace(PODS, "web", body, namespace="default")
        await until(
            lambda: any(
                c.get("type") == "PodResizePending" and c.get("reason") == "Infeasible"
                for c in status(stack, "web").get("conditions") or []
            )
        )
        node, events = Node(), Events()
        node.usage = {
            web["metadata"]["uid"]: (300 * Mi, {"app": 300 * Mi}),
            other["metadata"]["uid"]: (250 * Mi, {"app": 250 * Mi}),
        }
        node.available = 80 * Mi
        m = manager(
            stack,
            node,
            events,
            active_pods=lambda: allocation.allocated_pods(workers.active_pods()),
        )
        evicted = await m.synchronize()
        assert [p.name for p in evicted] == ["web"]
        final = await until(
            lambda: status(stack, "web").get("phase") == "Failed" and status(stack, "web")
        )
    assert final["message"] == (
        "The node was low on resource: memory. Threshold quantity: 600Mi, available: 80Mi. "
        "Container app was using 300Mi, request is 64Mi, has larger consumption of memory. "
    )
    assert status(stack, "other").get("phase") == "Running"


def disk(total: int, volumes: dict[str, int] | None = None, **rootfs: int) -> dict[str, Any]:
    return {
        "containers": [{"name": n, "rootfs": {"usedBytes": u}} for n, u in rootfs.items()],
        "volume": [{"name": n, "usedBytes": u} for n, u in (volumes or {}).items()],
        "ephemeral-storage": {"usedBytes": total},
    }


async def test_pods_over_their_local_storage_limits_are_evicted_without_pressure(
    stack: Stack,
) -> None:
    """No threshold configured and no pressure: every pod over a local storage limit goes in
    one pass, with the kubelet's message, the Event and no DisruptionTarget condition; a pod
    within its limits and a critical pod over them keep running."""

    def limited(name: str, limit: str) -> dict[str, Any]:
        return container(name, command=["sleep", "1d"], limits={"ephemeral-storage": limit})

    over = seed(stack.server, "over", containers=[limited("app", "1Mi"), limited("idle", "20Mi")])
    scratch = seed(
        stack.server, "scratch", volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}}]
    )
    within = seed(stack.server, "within", containers=[limited("app", "20Mi")])
    vip = seed(stack.server, "vip", containers=[limited("app", "1Mi")], priority=2_000_000_000)
    for name in ("over", "scratch", "within", "vip"):
        await until(lambda name=name: status(stack, name).get("phase") == "Running")
    node, events = Node(), Events()
    node.storage = {
        over["metadata"]["uid"]: disk(4 * Mi, app=4 * Mi, idle=0),
        scratch["metadata"]["uid"]: disk(4 * Mi, volumes={"scratch": 4 * Mi}),
        within["metadata"]["uid"]: disk(Mi, app=Mi),
        vip["metadata"]["uid"]: disk(4 * Mi, app=4 * Mi),
    }
    m = manager(stack, node, events, thresholds=[])
    task = asyncio.create_task(m.run())
    try:
        messages = {
            "over": 'Container app exceeded its local ephemeral storage limit "1Mi". ',
            "scratch": 'Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". ',
        }
        for name, message in messages.items():
            final = await until(
                lambda name=name: (
                    status(stack, name).get("phase") == "Failed" and status(stack, name)
                ),
                within=15,
            )
            assert (final["reason"], final["message"]) == ("Evicted", message)
            kinds = [c["type"] for c in final.get("conditions") or []]
            assert "DisruptionTarget" not in kinds
            assert (name, "Warning", "Evicted", message) in events.pods
        assert not await stack.running("idle")
        assert sorted(m.evicted) == sorted([over["metadata"]["uid"], scratch["metadata"]["uid"]])
        await asyncio.sleep(30)  # later passes leave the others alone
        assert status(stack, "within").get("phase") == "Running"
        assert status(stack, "vip").get("phase") == "Running"
        assert len(m.evicted) == 2 and m.conditions == [] and not events.node
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_local_storage_isolation_off_evicts_nothing(stack: Stack) -> None:
    over = seed(
        stack.server,
        "over",
        containers=[container("app", command=["sleep", "1d"], limits={"ephemeral-storage": "1Mi"})],
    )
    await until(lambda: status(stack, "over").get("phase") == "Running")
    node, events = Node(), Events()
    node.storage = {over["metadata"]["uid"]: disk(4 * Mi, app=4 * Mi)}
    m = manager(stack, node, events, local_storage=False)
    assert await m.synchronize() == []
    assert status(stack, "over").get("phase") == "Running"


async def test_the_image_fs_is_asked_once_and_a_dedicated_one_spares_the_writable_layer(
    stack: Stack,
) -> None:
    over = seed(
        stack.server,
        "over",
        containers=[
            container("app", command=["sleep", "1d"], limits={"ephemeral-storage": "1Mi"}),
            container("idle", command=["sleep", "1d"], limits={"ephemeral-storage": "50Mi"}),
        ],
    )
    await until(lambda: status(stack, "over").get("phase") == "Running")
    node, events = Node(), Events()
    node.storage = {over["metadata"]["uid"]: disk(4 * Mi, app=4 * Mi)}
    asked: list[str] = []
    answers: list[bool | Exception] = [CriUnavailable("ImageFsInfo: runtime down"), True]

    async def dedicated() -> bool:
        asked.append("ImageFsInfo")
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    m = manager(stack, node, events, dedicated_image_fs=dedicated)
    assert await m.synchronize() == []  # not known yet: no pass at all, as the kubelet
    assert await m.synchronize() == []  # the writable layer is on the image fs: not counted
    assert await m.synchronize() == []
    assert asked == ["ImageFsInfo", "ImageFsInfo"]
    assert status(stack, "over").get("phase") == "Running"
