"""What a pod requests as the kubelet's admission counts it (component-helpers PodRequests)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.lifecycle.resources import Amounts, is_scalar, pod_requests, used
from nodeagent.podspec import Pod
from nodeagent.testing.pods import container, pod


def cpu(milli: int) -> dict[str, str]:
    return {"cpu": f"{milli}m"}


def sidecar(name: str, milli: int) -> dict[str, Any]:
    return container(name, requests=cpu(milli), restartPolicy="Always")


def running(p: Pod, **status: Any) -> Pod:
    """``p`` as the API has it once the node reported ``status``."""
    p.status.update(status)
    return p


def cs(name: str, *, actual: int | None = None, allocated: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name}
    if actual is not None:
        out["resources"] = {"requests": cpu(actual)}
    if allocated is not None:
        out["allocatedResources"] = cpu(allocated)
    return out


INFEASIBLE = {"type": "PodResizePending", "status": "True", "reason": "Infeasible"}
DEFERRED = {"type": "PodResizePending", "status": "True", "reason": "Deferred"}


@pytest.mark.parametrize(
    ("p", "expected"),
    [
        pytest.param(
            pod(containers=[container("a", requests=cpu(100)), container("b", requests=cpu(200))]),
            {"cpu": 300},
            id="containers are summed",
        ),
        pytest.param(
            pod(
                containers=[container("a", requests=cpu(100))],
                init_containers=[
                    container("i1", requests=cpu(500)),
                    container("i2", requests=cpu(300)),
                ],
            ),
            {"cpu": 500},
            id="init containers are maxed, not summed",
        ),
        pytest.param(
            pod(
                containers=[container("a", requests=cpu(100))],
                init_containers=[container("i", requests=cpu(50))],
            ),
            {"cpu": 100},
            id="a small init container adds nothing",
        ),
        pytest.param(
            pod(
                containers=[container("a", requests=cpu(100))],
                init_containers=[sidecar("s", 200), container("i", requests=cpu(250))],
            ),
            {"cpu": 450},
            id="an init container after a sidecar needs both",
        ),
        pytest.param(
            pod(
                containers=[container("a", requests=cpu(100))],
                init_containers=[container("i", requests=cpu(250)), sidecar("s", 200)],
            ),
            {"cpu": 300},
            id="a sidecar started after an init container is summed with the containers",
        ),
        pytest.param(
            pod(containers=[container("a", requests=cpu(100))], overhead={"cpu": "250m"}),
            {"cpu": 350},
            id="overhead is added",
        ),
        pytest.param(
            pod(
                containers=[
                    container(
                        "a",
                        requests={
                            "memory": "1Gi",
                            "ephemeral-storage": "2Gi",
                            "hugepages-2Mi": "4Mi",
                            "example.com/gpu": "1",
                        },
                    )
                ]
            ),
            {
                "memory": 2**30,
                "ephemeral-storage": 2 * 2**30,
                "hugepages-2Mi": 4 * 2**20,
                "example.com/gpu": 1,
            },
            id="every resource is counted",
        ),
    ],
)
def test_pod_requests(p: Pod, expected: Amounts) -> None:
    assert pod_requests(p) == expected


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        pytest.param({}, 500, id="no status yet: the spec (the allocation)"),
        pytest.param(
            {"containerStatuses": [cs("a", actual=800, allocated=500)]},
            800,
            id="a resize down not actuated yet: what runs",
        ),
        pytest.param(
            {"containerStatuses": [cs("a", actual=200, allocated=300)]},
            500,
            id="the spec when it is the largest",
        ),
        pytest.param(
            {"containerStatuses": [cs("a", allocated=900)]},
            500,
            id="without resources in the status, the status is not read",
        ),
        pytest.param(
            {"containerStatuses": [cs("a", actual=200, allocated=300)], "conditions": [DEFERRED]},
            500,
            id="a deferred resize keeps the spec",
        ),
        pytest.param(
            {"containerStatuses": [cs("a", actual=200, allocated=300)], "conditions": [INFEASIBLE]},
            300,
            id="an infeasible resize leaves the spec out",
        ),
    ],
)
def test_a_running_pod_counts_its_status(status: dict[str, Any], expected: int) -> None:
    p = running(pod(containers=[container("a", requests=cpu(500))]), **status)
    assert pod_requests(p, use_status=True) == {"cpu": expected}
    assert pod_requests(p) == {"cpu": 500}  # a new pod: its spec only


def test_a_plain_init_container_never_counts_its_status() -> None:
    p = running(
        pod(
            containers=[container("a", requests=cpu(100))],
            init_containers=[container("i", requests=cpu(300)), sidecar("s", 100)],
        ),
        initContainerStatuses=[cs("i", actual=900), cs("s", actual=400)],
    )
    # the init container's 300 stays; the sidecar counts what it runs with (400)
    assert pod_requests(p, use_status=True) == {"cpu": 500}


def test_used_sums_the_pods() -> None:
    pods = [pod(containers=[container("a", requests=cpu(300))]) for _ in range(3)]
    assert used(pods) == {"cpu": 900}


@pytest.mark.parametrize(
    ("name", "scalar"),
    [
        ("cpu", False),
        ("hugepages-1Gi", True),
        ("example.com/gpu", True),
        ("kubernetes.io/something", True),
        ("requests.example.com/x", False),
        ("attachable-volumes-csi-x", True),
    ],
)
def test_scalar_resources(name: str, scalar: bool) -> None:
    assert is_scalar(name) is scalar
