"""The resize decisions, as the kubelet's allocation manager makes them."""

from __future__ import annotations

import json
from typing import Any

from nodeagent.allocation import policy
from nodeagent.cm.policy import ResourceConfig, widen
from nodeagent.kuberuntime.resources import SwapInputs
from nodeagent.podspec import Pod, decode_pod
from nodeagent.testing.pods import container, pod_object

ALLOCATABLE = {"cpu": "2", "memory": "4Gi", "pods": "110"}


def burstable(
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    *,
    name: str = "web",
    uid: str = "u1",
    **extra: Any,
) -> Pod:
    app = container(
        "app",
        requests=requests or {"cpu": "100m", "memory": "64Mi"},
        limits=limits or {"cpu": "200m", "memory": "128Mi"},
        **extra,
    )
    return decode_pod(pod_object(name, uid=uid, containers=[app]))


def test_allocated_pod_swaps_in_the_allocation_and_says_a_resize_is_requested() -> None:
    admitted = burstable()
    desired = burstable(limits={"cpu": "400m", "memory": "128Mi"})
    allocated, requested = policy.allocated_pod(desired, policy.allocation_of(admitted))
    assert requested is True
    assert allocated.spec.containers[0].resources.limits == {"cpu": "200m", "memory": "128Mi"}
    same, requested = policy.allocated_pod(admitted, policy.allocation_of(admitted))
    assert (same, requested) == (admitted, False)


def test_equal_quantities_in_another_notation_are_no_resize() -> None:
    admitted = burstable(limits={"cpu": "1", "memory": "128Mi"})
    desired = burstable(limits={"cpu": "1000m", "memory": "134217728"})
    assert policy.allocated_pod(desired, policy.allocation_of(admitted))[1] is False


def test_cpu_above_allocatable_is_infeasible_with_the_kubelet_message() -> None:
    desired = burstable({"cpu": "3", "memory": "64Mi"}, {"cpu": "3", "memory": "128Mi"})
    decision = policy.resize_admission(desired, burstable(), allocatable=ALLOCATABLE, others=[])
    assert decision == policy.ResizeDecision(
        False,
        "Infeasible",
        "Node didn't have enough capacity: cpu, requested: 3000, capacity: 2000",
    )


def test_memory_is_checked_before_cpu() -> None:
    desired = burstable({"cpu": "3", "memory": "5Gi"}, {"cpu": "3", "memory": "6Gi"})
    decision = policy.resize_admission(desired, burstable(), allocatable=ALLOCATABLE, others=[])
    assert decision.message == (
        "Node didn't have enough capacity: memory, requested: 5368709120, capacity: 4294967296"
    )


def test_no_room_beside_the_other_pods_is_deferred_with_the_predicate_message() -> None:
    other = burstable({"cpu": "1500m", "memory": "64Mi"}, {"cpu": "2", "memory": "128Mi"}, uid="u2")
    desired = burstable({"cpu": "1", "memory": "64Mi"}, {"cpu": "1", "memory": "128Mi"})
    decision = policy.resize_admission(
        desired, burstable(), allocatable=ALLOCATABLE, others=[other]
    )
    assert decision == policy.ResizeDecision(
        False,
        "Deferred",
        "Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000",
    )


def test_a_fitting_resize_is_accepted() -> None:
    desired = burstable(limits={"cpu": "400m", "memory": "256Mi"})
    assert (
        policy.resize_admission(desired, burstable(), allocatable=ALLOCATABLE, others=[])
        == policy.ACCEPTED
    )


def test_static_pods_are_infeasible() -> None:
    body = pod_object(
        "web",
        uid="u1",
        annotations={"kubernetes.io/config.source": "file"},
        containers=[container("app", requests={"cpu": "100m"})],
    )
    decision = policy.resize_admission(
        decode_pod(body), burstable(), allocatable=ALLOCATABLE, others=[]
    )
    assert decision == policy.ResizeDecision(
        False, "Infeasible", "In-place resize of static-pods is not supported"
    )


def test_a_memory_request_change_with_swap_is_infeasible_unless_it_restarts() -> None:
    swap = SwapInputs(
        behavior="LimitedSwap",
        cgroup_v2=True,
        controller=True,
        memory_capacity=8 * 2**30,
        swap_capacity=2**30,
    )
    desired = burstable({"cpu": "100m", "memory": "96Mi"})
    decision = policy.resize_admission(
        desired, burstable(), allocatable=ALLOCATABLE, others=[], swap=swap
    )
    assert decision.reason == "Infeasible"
    assert decision.message == "In-place resize of containers with swap is not supported."
    restart = [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]
    allocated = burstable(resizePolicy=restart)
    desired = burstable({"cpu": "100m", "memory": "96Mi"}, resizePolicy=restart)
    assert (
        policy.resize_admission(desired, allocated, allocatable=ALLOCATABLE, others=[], swap=swap)
        == policy.ACCEPTED
    )


def test_restart_container_policy_restarts_only_for_its_resource() -> None:
    restart = [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]
    before = policy.allocation_of(burstable(resizePolicy=restart))
    cpu_only = burstable(limits={"cpu": "400m", "memory": "128Mi"}, resizePolicy=restart)
    assert policy.resize_restarts(cpu_only, before, ["app"]) == {}
    memory = burstable(limits={"cpu": "200m", "memory": "256Mi"}, resizePolicy=restart)
    assert policy.resize_restarts(memory, before, ["app"]) == {
        "app": "Container app resize requires restart"
    }
    assert policy.resize_restarts(memory, before, []) == {}  # not running: nothing to restart


def test_the_pod_cgroup_is_widened_before_and_narrowed_after() -> None:
    old = ResourceConfig(cpu_shares=102, cpu_quota=20_000, cpu_period=100_000, memory_max=100)
    new = ResourceConfig(cpu_shares=51, cpu_quota=40_000, cpu_period=100_000, memory_max=50)
    assert widen(old, new) == ResourceConfig(
        cpu_shares=102, cpu_quota=40_000, cpu_period=100_000, memory_max=100
    )
    unlimited = ResourceConfig(cpu_shares=51, cpu_period=100_000)
    assert widen(old, unlimited).memory_max is None
    assert widen(old, unlimited).cpu_quota is None
    assert widen(None, new) == new


def test_event_messages_carry_the_kubelet_json_summary() -> None:
    pod = burstable(limits={"cpu": "400m", "memory": "128Mi"})
    message = policy.event_message("Pod resize started", pod, 3)
    prefix, body = message.split(": ", 1)
    assert prefix == "Pod resize started"
    assert json.loads(body) == {
        "containers": [
            {
                "name": "app",
                "resources": {
                    "limits": {"cpu": "400m", "memory": "128Mi"},
                    "requests": {"cpu": "100m", "memory": "64Mi"},
                },
            }
        ],
        "generation": 3,
    }
    failed = policy.event_message("Pod resize error", pod, 3, "boom")
    assert json.loads(failed.split(": ", 1)[1])["error"] == "boom"


def test_conditions_carry_the_generation_they_observed() -> None:
    assert policy.condition("PodResizePending", reason="Deferred", message="m", generation=2) == {
        "type": "PodResizePending",
        "status": "True",
        "observedGeneration": 2,
        "reason": "Deferred",
        "message": "m",
    }
