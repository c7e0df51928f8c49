"""The Linux resources of a container's CRI config: a container's swap."""

from __future__ import annotations

import pytest

from nodeagent.kuberuntime.resources import SwapInputs, container_swap
from nodeagent.podspec import Pod
from nodeagent.testing.pods import container, pod

GIB = 1 << 30
MIB = 1 << 20


def guaranteed(**kw: object) -> Pod:
    res = {"cpu": "500m", "memory": "128Mi"}
    return pod("g", containers=[container("app", requests=res, limits=res)], **kw)


def burstable(request: str = "64Mi", limit: str | None = "256Mi", **kw: object) -> Pod:
    limits = {"memory": limit} if limit else None
    return pod(
        "b",
        containers=[container("app", requests={"cpu": "250m", "memory": request}, limits=limits)],
        **kw,
    )


def besteffort() -> Pod:
    return pod("e", containers=[container("app")])


LIMITED = SwapInputs(
    behavior="LimitedSwap", cgroup_v2=True, controller=True,
    memory_capacity=2 * GIB, swap_capacity=256 * MIB,
)  # fmt: skip


def test_limited_swap_for_a_burstable_container_is_its_share_of_the_swap() -> None:
    p = burstable(request="64Mi", limit="256Mi")
    decision = container_swap(p, p.spec.containers[0], LIMITED)
    assert decision.limit == int(64 * MIB / (2 * GIB) * 256 * MIB) == 8 * MIB
    assert decision.unified == {"memory.swap.max": str(8 * MIB)}
    assert (decision.request, decision.memory_capacity, decision.swap_capacity) == (
        64 * MIB,
        2 * GIB,
        256 * MIB,
    )
    assert decision.formula


def test_limited_swap_burstable_without_limit_still_gets_swap() -> None:
    p = burstable(request="64Mi", limit=None)
    assert container_swap(p, p.spec.containers[0], LIMITED).limit == 8 * MIB


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (guaranteed, "Guaranteed pod: NoSwap"),
        (besteffort, "BestEffort pod: NoSwap"),
        (lambda: burstable(request="64Mi", limit="64Mi"), "memory request equals limit: NoSwap"),
        (lambda: burstable(priority=2_000_000_000), "critical pod: NoSwap"),
        (
            lambda: burstable(annotations={"kubernetes.io/config.source": "file"}),
            "critical pod: NoSwap",
        ),
    ],
)
def test_limited_swap_gives_no_swap_to_the_others(make: object, reason: str) -> None:
    assert callable(make)
    p = make()
    decision = container_swap(p, p.spec.containers[0], LIMITED)
    assert (decision.limit, decision.reason) == (0, reason)


def test_limited_swap_request_above_capacity_is_no_swap() -> None:
    p = burstable(request="3Gi", limit="4Gi")
    decision = container_swap(p, p.spec.containers[0], LIMITED)
    assert decision.limit == 0
    assert "larger than total node memory" in decision.reason


def test_no_swap_sends_zero_for_every_container() -> None:
    inputs = SwapInputs(behavior="NoSwap", cgroup_v2=True, controller=True)
    for p in (guaranteed(), burstable(), besteffort()):
        assert container_swap(p, p.spec.containers[0], inputs).unified == {"memory.swap.max": "0"}


def test_nothing_is_sent_on_cgroup_v1_or_without_the_swap_controller() -> None:
    p = burstable()
    v1 = SwapInputs(behavior="LimitedSwap", cgroup_v2=False, controller=False)
    assert container_swap(p, p.spec.containers[0], v1).unified == {}
    no_ctl = SwapInputs(behavior="NoSwap", cgroup_v2=True, controller=False)
    assert container_swap(p, p.spec.containers[0], no_ctl).unified == {}
