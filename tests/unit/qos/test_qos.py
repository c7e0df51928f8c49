"""QoS classes and OOM score adjustment as the kubelet computes them (table tests)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.qos import QOSClass, compute_qos_class, container_oom_score_adj, pod_qos_class
from nodeagent.testing.pods import container, pod

G = {"cpu": "1", "memory": "1Gi"}


@pytest.mark.parametrize(
    ("containers", "init", "expected"),
    [
        pytest.param([container("a")], [], QOSClass.BEST_EFFORT, id="nothing set: BestEffort"),
        pytest.param(
            [container("a", requests=G, limits=G)], [], QOSClass.GUARANTEED, id="requests == limits"
        ),
        pytest.param(
            [container("a", requests=G, limits=G), container("b")],
            [],
            QOSClass.BURSTABLE,
            id="one container without limits makes it Burstable",
        ),
        pytest.param(
            [container("a", requests={"cpu": "1", "memory": "512Mi"}, limits=G)],
            [],
            QOSClass.BURSTABLE,
            id="request below limit",
        ),
        pytest.param(
            [container("a", requests=G, limits=G)],
            [container("i", requests={"cpu": "100m"})],
            QOSClass.BURSTABLE,
            id="init containers count",
        ),
        pytest.param(
            [container("a", requests={"nvidia.com/gpu": "1", "ephemeral-storage": "1Gi"})],
            [],
            QOSClass.BEST_EFFORT,
            id="only cpu and memory count",
        ),
        pytest.param(
            [container("a", requests={"cpu": "0"}, limits={"memory": "0"})],
            [],
            QOSClass.BEST_EFFORT,
            id="zero quantities do not count",
        ),
    ],
)
def test_qos_class(
    containers: list[dict[str, Any]], init: list[dict[str, Any]], expected: QOSClass
) -> None:
    assert compute_qos_class(pod(containers=containers, init_containers=init)) is expected


def test_reported_qos_class_wins() -> None:
    p = pod(containers=[container("a")])
    p.status["qosClass"] = "Burstable"
    assert pod_qos_class(p) is QOSClass.BURSTABLE


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({}, 1000, id="BestEffort 1000"),
        pytest.param({"requests": G, "limits": G}, -997, id="Guaranteed -997"),
        pytest.param({"requests": {"memory": "4Gi"}}, 750, id="Burstable 1000-1000*4/16"),
        pytest.param({"requests": {"memory": "16Gi"}}, 3, id="Burstable floor 3"),
        pytest.param({"requests": {"cpu": "1"}}, 999, id="Burstable without memory 999"),
    ],
)
def test_oom_score_adj(spec: dict[str, Any], expected: int) -> None:
    p = pod(containers=[container("a", **spec)])
    assert container_oom_score_adj(p, p.spec.containers[0], 16 * 2**30) == expected


def test_node_critical_pod_gets_guaranteed_adj() -> None:
    p = pod(priority=2_000_001_000, priorityClassName="system-node-critical")
    assert container_oom_score_adj(p, p.spec.containers[0], 2**30) == -997
