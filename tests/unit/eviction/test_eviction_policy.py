"""The eviction manager's pure decisions: thresholds, observations, conditions, ranking,
messages and admission, with the kubelet's strings."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.allocation import AllocationManager
from nodeagent.eviction import policy
from nodeagent.eviction.thresholds import (
    DISK_SIGNALS,
    MEMORY_AVAILABLE,
    NODEFS_AVAILABLE,
    PID_AVAILABLE,
    Value,
    parse_thresholds,
    parse_value,
)
from nodeagent.testing.pods import container, pod

Mi = 2**20


def summary(
    *, available: int = 1000 * Mi, working: int = 1000 * Mi, pods: list[Any] | None = None
) -> dict[str, Any]:
    return {
        "node": {
            "memory": {"time": "t", "availableBytes": available, "workingSetBytes": working},
            "fs": {"availableBytes": 5, "capacityBytes": 100, "inodesFree": 50, "inodes": 100},
            "runtime": {"imageFs": {"availableBytes": 30, "capacityBytes": 100}},
            "rlimit": {"maxpid": 1000, "curproc": 990},
            "systemContainers": [{"name": "pods", "memory": {"workingSetBytes": 300 * Mi}}],
        },
        "pods": pods or [],
    }


def pod_stats(uid: str, memory: int, **containers: int) -> dict[str, Any]:
    return {
        "podRef": {"uid": uid},
        "memory": {"workingSetBytes": memory},
        "containers": [
            {"name": name, "memory": {"workingSetBytes": used}} for name, used in containers.items()
        ],
    }


def test_defaults_parse_and_zero_disables() -> None:
    thresholds = parse_thresholds(
        hard={"memory.available": "100Mi", "nodefs.available": "10%", "imagefs.available": "0%"}
    )
    assert [t.signal for t in thresholds] == ["memory.available", "nodefs.available"]
    assert thresholds[0].value == Value(quantity=100 * Mi, text="100Mi")
    assert thresholds[1].value.amount(1000) == 100
    assert thresholds[0].condition == "MemoryPressure" and thresholds[1].condition == "DiskPressure"


def test_node_level_reclaim_serves_the_six_disk_signals() -> None:
    assert DISK_SIGNALS == (
        "nodefs.available",
        "nodefs.inodesFree",
        "imagefs.available",
        "imagefs.inodesFree",
        "containerfs.available",
        "containerfs.inodesFree",
    )


def test_soft_threshold_needs_its_grace_period() -> None:
    [soft] = parse_thresholds(
        hard={}, soft={"memory.available": "1Gi"}, soft_grace={"memory.available": 90.0}
    )
    assert (soft.hard, soft.grace_period) == (False, 90.0)
    with pytest.raises(ValueError, match="evictionSoftGracePeriod"):
        parse_thresholds(hard={}, soft={"memory.available": "1Gi"})
    with pytest.raises(ValueError):
        parse_value("120%")


def test_observations_from_the_summary() -> None:
    obs = policy.observe(
        summary(available=80 * Mi, working=1920 * Mi), allocatable_memory=Mi * 1000
    )
    assert obs[MEMORY_AVAILABLE] == policy.Observation(80 * Mi, 2000 * Mi, "t")
    assert obs["allocatableMemory.available"].available == 700 * Mi
    assert obs[NODEFS_AVAILABLE] == policy.Observation(5, 100)
    assert obs["nodefs.inodesFree"].available == 50
    assert obs["imagefs.available"].available == 30
    assert obs[PID_AVAILABLE] == policy.Observation(10, 1000)


def test_thresholds_met_with_minimum_reclaim() -> None:
    [t] = parse_thresholds(
        hard={"memory.available": "100Mi"}, min_reclaim={"memory.available": "50Mi"}
    )
    obs = {MEMORY_AVAILABLE: policy.Observation(120 * Mi, 2000 * Mi)}
    assert policy.thresholds_met([t], obs, enforce_min_reclaim=False) == []
    assert policy.thresholds_met([t], obs, enforce_min_reclaim=True) == [t]


def test_condition_stays_for_the_transition_period() -> None:
    [t] = parse_thresholds(hard={"memory.available": "100Mi"})
    last = policy.conditions_last_observed([t], {}, now=100.0)
    assert policy.conditions_in_window(last, 30.0, now=100.0) == ["MemoryPressure"]
    assert policy.conditions_in_window(last, 30.0, now=129.0) == ["MemoryPressure"]
    assert policy.conditions_in_window(last, 30.0, now=130.0) == []


def test_soft_grace_period() -> None:
    [t] = parse_thresholds(
        hard={}, soft={"memory.available": "1Gi"}, soft_grace={"memory.available": 60}
    )
    first = policy.first_observed([t], {}, now=10.0)
    assert policy.grace_period_met(first, now=69.0) == []
    assert policy.grace_period_met(first, now=70.0) == [t]


def test_memory_ranking_usage_above_request_then_priority_then_usage() -> None:
    guaranteed = pod(
        "big-but-within-request",
        uid="g",
        containers=[container("c", requests={"memory": "1Gi"}, limits={"memory": "1Gi"})],
    )
    low = pod("low", uid="l", priority=0)
    high = pod("high", uid="h", priority=1000)
    hog = pod("hog", uid="x", priority=0)
    usage = policy.pod_usage(
        summary(
            pods=[
                pod_stats("g", 900 * Mi),
                pod_stats("l", 10 * Mi),
                pod_stats("h", 800 * Mi),
                pod_stats("x", 500 * Mi),
            ]
        )
    )
    ranked = policy.rank([guaranteed, high, low, hog], usage, "memory")
    assert [p.name for p in ranked] == ["hog", "low", "high", "big-but-within-request"]


def test_pid_ranking_by_priority_then_processes() -> None:
    a, b = pod("a", uid="a"), pod("b", uid="b")
    usage = {"a": policy.PodUsage(processes=5), "b": policy.PodUsage(processes=50)}
    assert [p.name for p in policy.rank([a, b], usage, "pids")] == ["b", "a"]


def test_eviction_message_is_the_kubelets() -> None:
    [t] = parse_thresholds(hard={"memory.available": "100Mi"})
    hog = pod("hog", uid="x", containers=[container("x"), container("idle")])
    usage = policy.pod_usage(summary(pods=[pod_stats("x", 500 * Mi, x=500 * Mi, idle=0)]))
    obs = {MEMORY_AVAILABLE: policy.Observation(80 * Mi, 2000 * Mi)}
    message = policy.eviction_message("memory", hog, usage, [t], obs)
    assert message == (
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi. "
        "Container x was using 500Mi, request is 0, has larger consumption of memory. "
    )


async def test_a_resize_the_node_did_not_accept_ranks_and_reads_with_the_allocated_request() -> (
    None
):
    """The spec asks for 1Gi (PodResizePending: Infeasible on a 512Mi node) while the pod is
    still allocated 64Mi: eviction sees it using 300Mi above a 64Mi request, as the kubelet's
    ``getAllocatedPods`` does, not within a 1Gi one."""
    allocation = AllocationManager(path=None, allocatable=lambda: {"cpu": "2", "memory": "512Mi"})
    admitted = pod("web", uid="w", containers=[container("app", requests={"memory": "64Mi"})])
    await allocation.allocate(admitted)
    resized = pod("web", uid="w", containers=[container("app", requests={"memory": "1Gi"})])
    assert await allocation.allocate(resized) != resized  # pending: not allocated
    assert allocation.conditions("w")[0]["reason"] == "Infeasible"
    other = pod("other", uid="o", containers=[container("app", requests={"memory": "100Mi"})])
    usage = policy.pod_usage(
        summary(pods=[pod_stats("w", 300 * Mi, app=300 * Mi), pod_stats("o", 250 * Mi)])
    )

    [web, _] = allocation.allocated_pods([resized, other])
    ranked = policy.rank(allocation.allocated_pods([other, resized]), usage, "memory")
    assert [p.name for p in ranked] == ["web", "other"]
    # by the spec's 1Gi the pod would be within its request and ranked last
    assert [p.name for p in policy.rank([other, resized], usage, "memory")] == ["other", "web"]
    [t] = parse_thresholds(hard={"memory.available": "100Mi"})
    obs = {MEMORY_AVAILABLE: policy.Observation(80 * Mi, 2000 * Mi)}
    assert policy.eviction_message("memory", web, usage, [t], obs) == (
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi. "
        "Container app was using 300Mi, request is 64Mi, has larger consumption of memory. "
    )


def test_the_request_ranked_by_counts_sidecars_init_containers_and_overhead() -> None:
    """As the kubelet's ``GetResourceRequestQuantity``: a sidecar's request adds to the
    containers', a plain init container's is a floor, the overhead adds when non-zero."""
    meshed = pod(
        "meshed",
        uid="m",
        init_containers=[container("proxy", restartPolicy="Always", requests={"memory": "200Mi"})],
        containers=[container("app", requests={"memory": "100Mi"})],
    )
    setup = pod(
        "setup",
        uid="s",
        init_containers=[container("setup", requests={"memory": "300Mi"})],
        containers=[container("app", requests={"memory": "100Mi"})],
        overhead={"memory": "50Mi"},
    )
    plain = pod("plain", uid="p", containers=[container("app", requests={"memory": "100Mi"})])
    usage = policy.pod_usage(
        summary(pods=[pod_stats("m", 280 * Mi), pod_stats("s", 320 * Mi), pod_stats("p", 120 * Mi)])
    )
    # only plain uses more than it requests (meshed: 300Mi, setup: 350Mi)
    ranked = policy.rank([meshed, setup, plain], usage, "memory")
    assert [p.name for p in ranked] == ["plain", "meshed", "setup"]


def test_eviction_message_for_a_percentage_threshold() -> None:
    [t] = parse_thresholds(hard={"nodefs.available": "10%"})
    obs = {NODEFS_AVAILABLE: policy.Observation(5 * 2**30, 100 * 2**30)}
    message = policy.eviction_message("ephemeral-storage", pod("p"), {}, [t], obs)
    assert message == (
        "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, "
        "available: 5Gi. "
    )


def test_quantities_format_as_go_binary_si() -> None:
    assert policy.format_quantity(0) == "0"
    assert policy.format_quantity(1536) == "1536"
    assert policy.format_quantity(81920 * 1024) == "80Mi"
    assert policy.format_quantity(3 * 2**30) == "3Gi"


def test_admission_under_pressure() -> None:
    best_effort = pod("be")
    burstable = pod("b", containers=[container("c", requests={"memory": "10Mi"})])
    tolerant = pod(
        "t",
        tolerations=[
            {
                "key": "node.kubernetes.io/memory-pressure",
                "operator": "Exists",
                "effect": "NoSchedule",
            }
        ],
    )
    critical = pod("crit", priority=2_000_000_000)
    assert policy.admit(best_effort, []) is None
    refusal = policy.admit(best_effort, ["MemoryPressure"])
    assert refusal == policy.Refusal("Evicted", "The node had condition: [MemoryPressure]. ")
    assert policy.admit(burstable, ["MemoryPressure"]) is None
    assert policy.admit(tolerant, ["MemoryPressure"]) is None
    disk = policy.admit(burstable, ["MemoryPressure", "DiskPressure"])
    assert disk is not None
    assert disk.message == "The node had condition: [MemoryPressure DiskPressure]. "
    assert policy.admit(critical, ["DiskPressure"]) is None
