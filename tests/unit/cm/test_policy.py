"""The container manager's pure decisions: cpu weights, pod and QoS cgroup limits, swap."""

from __future__ import annotations

import pytest

from nodeagent.cm.policy import (
    NodeResources,
    own_swap_max_path,
    pod_resource_config,
    qos_resource_configs,
    reserved_from,
    shares_to_weight,
    swap_on_refusal,
)
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


@pytest.mark.parametrize(
    ("shares", "weight"),
    [(2, 1), (1024, 39), (2048, 79), (262144, 10000), (1, 1), (300000, 10000), (0, 0)],
)
def test_shares_to_weight_is_the_kubelets_formula(shares: int, weight: int) -> None:
    assert shares_to_weight(shares) == weight


def test_guaranteed_pod_gets_weight_quota_and_memory_limit() -> None:
    config = pod_resource_config(guaranteed(), pod_pids_limit=1024)
    assert config.files() == {
        "cpu.weight": str(shares_to_weight(512)),
        "cpu.max": "50000 100000",
        "memory.max": str(128 * MIB),
        "pids.max": "1024",
    }


def test_burstable_pod_without_every_limit_has_no_quota_and_no_memory_max() -> None:
    p = pod(
        "b",
        containers=[
            container("a", requests={"cpu": "250m"}, limits={"memory": "64Mi"}),
            container("b", requests={"cpu": "250m"}),
        ],
    )
    assert pod_resource_config(p).files() == {
        "cpu.weight": str(shares_to_weight(512)),
        "cpu.max": "max 100000",
        "memory.max": "max",
    }


def test_burstable_pod_with_every_limit_gets_the_sums() -> None:
    p = pod(
        "b",
        containers=[
            container("a", requests={"cpu": "100m"}, limits={"cpu": "1", "memory": "64Mi"}),
            container("b", requests={"cpu": "100m"}, limits={"cpu": "500m", "memory": "32Mi"}),
        ],
    )
    files = pod_resource_config(p).files()
    assert files["cpu.max"] == "150000 100000"
    assert files["memory.max"] == str(96 * MIB)
    assert files["cpu.weight"] == str(shares_to_weight(204))


def test_init_container_larger_than_the_app_containers_sets_the_pod_limit() -> None:
    res_init = {"cpu": "2", "memory": "1Gi"}
    res_app = {"cpu": "500m", "memory": "128Mi"}
    p = pod(
        "g",
        containers=[container("app", requests=res_app, limits=res_app)],
        init_containers=[container("init", requests=res_init, limits=res_init)],
    )
    files = pod_resource_config(p).files()
    assert files["memory.max"] == str(GIB)
    assert files["cpu.max"] == "200000 100000"


def test_besteffort_pod_gets_minimal_weight_and_no_limits() -> None:
    assert pod_resource_config(besteffort()).files() == {
        "cpu.weight": "1",
        "cpu.max": "max 100000",
        "memory.max": "max",
    }


def test_kubepods_gets_allocatable_and_burstable_the_sum_of_its_pods_requests() -> None:
    node = NodeResources(
        milli_cpu=4000, memory=8 * GIB, pids=4194304, reserved_milli_cpu=500,
        reserved_memory=GIB, reserved_pids=1000,
    )  # fmt: skip
    configs = qos_resource_configs(
        [burstable(), burstable(), guaranteed(), besteffort()], node, enforce_pods=True
    )
    assert configs.kubepods.files() == {
        "cpu.weight": str(shares_to_weight(3584)),
        "memory.max": str(7 * GIB),
        "pids.max": str(4194304 - 1000),
    }
    assert configs.burstable.files()["cpu.weight"] == str(shares_to_weight(512))
    assert configs.besteffort.files()["cpu.weight"] == "1"


def test_without_pods_enforcement_kubepods_gets_capacity_weight_and_no_memory_max() -> None:
    node = NodeResources(milli_cpu=2000, memory=GIB, reserved_memory=MIB)
    kubepods = qos_resource_configs([], node, enforce_pods=False).kubepods
    assert kubepods.files() == {"cpu.weight": str(shares_to_weight(2048)), "memory.max": "max"}


def test_reserved_adds_kube_and_system_reservations() -> None:
    got = reserved_from({"cpu": "100m", "memory": "100Mi"}, {"cpu": "1", "pid": "100"})
    assert got == {"cpu": 1100, "memory": 100 * MIB, "pid": 100}


def test_swap_on_refusal_quotes_proc_swaps_as_the_kubelet() -> None:
    header = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority"
    assert swap_on_refusal(header + "\n") is None
    text = f"{header}\n/swapfile                               file\t\t262140\t\t0\t\t-2\n"
    assert swap_on_refusal(text) == (
        "running with swap on is not supported, please disable swap! or set --fail-swap-on "
        f"flag to false. /proc/swaps contained: [{header} /swapfile                               "
        "file\t\t262140\t\t0\t\t-2]"
    )


def test_swap_controller_is_looked_up_in_the_agents_own_cgroup() -> None:
    assert (
        own_swap_max_path("0::/system.slice/nodeagent.service\n")
        == "/sys/fs/cgroup/system.slice/nodeagent.service/memory.swap.max"
    )
    assert own_swap_max_path("12:memory:/user.slice\n") is None
