"""QoS classes, OOM score adjustment and admission with the kubelet's reasons (table tests)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.lifecycle.admission import AdmitResult, admit_pod, pod_requests
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


NODE = {"cpu": "2", "memory": "4Gi", "pods": "3", "ephemeral-storage": "10Gi"}


def asking(cpu: str = "0", memory: str = "0") -> Any:
    return pod(containers=[container("a", requests={"cpu": cpu, "memory": memory})])


@pytest.mark.parametrize(
    ("new", "admitted", "expected"),
    [
        pytest.param(asking("500m"), [asking("1")], AdmitResult(True), id="fits"),
        pytest.param(
            asking("1500m"),
            [asking("1")],
            AdmitResult(
                False,
                "OutOfcpu",
                "Node didn't have enough resource: cpu, requested: 1500, used: 1000, "
                "capacity: 2000",
            ),
            id="OutOfcpu",
        ),
        pytest.param(
            asking(memory="3Gi"),
            [asking(memory="2Gi")],
            AdmitResult(
                False,
                "OutOfmemory",
                "Node didn't have enough resource: memory, requested: 3221225472, "
                "used: 2147483648, capacity: 4294967296",
            ),
            id="OutOfmemory",
        ),
        pytest.param(
            asking(),
            [asking(), asking(), asking()],
            AdmitResult(
                False,
                "OutOfpods",
                "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3",
            ),
            id="OutOfpods comes first",
        ),
        pytest.param(
            pod(os={"name": "windows"}),
            [],
            AdmitResult(
                False,
                "PodOSNotSupported",
                "Failed to admit pod as the OS field doesn't match node OS",
            ),
            id="windows pod",
        ),
        pytest.param(asking("5"), [], AdmitResult(False, "OutOfcpu", ""), id="too big alone"),
    ],
)
def test_admission(new: Any, admitted: list[Any], expected: AdmitResult) -> None:
    result = admit_pod(new, allocatable=NODE, admitted=admitted)
    assert (result.admit, result.reason) == (expected.admit, expected.reason)
    if expected.message:
        assert result.message == expected.message


def test_sidecar_containers_and_lifecycle_hooks_are_admitted() -> None:
    p = pod(
        init_containers=[container("proxy", restartPolicy="Always")],
        containers=[container("web", lifecycle={"preStop": {"sleep": {"seconds": 1}}})],
    )
    assert admit_pod(p, allocatable=NODE, admitted=[]).admit


def test_a_stop_signal_is_refused_naming_the_field() -> None:
    p = pod(containers=[container("web", lifecycle={"stopSignal": "SIGUSR1"})])
    result = admit_pod(p, allocatable=NODE, admitted=[])
    assert result.reason == "ContainerStopSignalsNotSupported"
    assert "spec.containers[0].lifecycle.stopSignal" in result.message
    assert "SIGUSR1" in result.message


def test_probes_on_plain_init_containers_are_refused_naming_the_field() -> None:
    p = pod(
        init_containers=[
            container("setup", readinessProbe={"tcpSocket": {"port": 80}}),
        ]
    )
    result = admit_pod(p, allocatable=NODE, admitted=[])
    assert result.reason == "ProbesNotSupported"
    assert "spec.initContainers[0].readinessProbe" in result.message
    assert "'setup'" in result.message


def test_probes_on_sidecars_are_admitted() -> None:
    probe = {"tcpSocket": {"port": 80}}
    sidecar = container(
        "proxy",
        restartPolicy="Always",
        readinessProbe=probe,
        livenessProbe=probe,
        startupProbe=probe,
    )
    p = pod(init_containers=[sidecar], containers=[container("web")])
    assert admit_pod(p, allocatable=NODE, admitted=[]).admit


def test_probes_on_app_containers_are_admitted() -> None:
    p = pod(containers=[container("web", livenessProbe={"tcpSocket": {"port": 80}})])
    assert admit_pod(p, allocatable=NODE, admitted=[]).admit


def test_pod_requests_add_the_sidecars_that_keep_running() -> None:
    p = pod(
        containers=[container("app", requests={"cpu": "100m"})],
        init_containers=[
            container("proxy", restartPolicy="Always", requests={"cpu": "200m"}),
            container("setup", requests={"cpu": "900m"}),
        ],
    )
    # running: app + proxy = 300m; while setup runs: proxy + setup = 1100m
    assert pod_requests(p)["cpu"] == 1100
    light = pod(
        containers=[container("app", requests={"cpu": "100m"})],
        init_containers=[
            container("setup", requests={"cpu": "150m"}),
            container("proxy", restartPolicy="Always", requests={"cpu": "200m"}),
        ],
    )
    assert pod_requests(light)["cpu"] == 300


def test_pod_requests_take_the_largest_init_container_and_the_overhead() -> None:
    p = pod(
        containers=[
            container("a", requests={"cpu": "100m", "memory": "1Mi"}),
            container("b", requests={"cpu": "200m"}),
        ],
        init_containers=[container("i", requests={"cpu": "500m"})],
        overhead={"cpu": "10m"},
    )
    assert pod_requests(p) == {"cpu": 510, "memory": 2**20, "ephemeral-storage": 0}


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("resources", {"limits": {"cpu": "1"}}, "PodLevelResourcesNotSupported"),
        (
            "resourceClaims",
            [{"name": "gpu", "resourceClaimName": "c"}],
            "ResourceClaimsNotSupported",
        ),
        ("hostUsers", False, "UserNamespacesNotSupported"),
    ],
)
def test_pod_fields_nodeagent_does_not_implement_are_refused_by_name(
    field: str, value: Any, reason: str
) -> None:
    result = admit_pod(pod(**{field: value}), allocatable=NODE, admitted=[])
    assert not result.admit
    assert result.reason == reason
    assert result.message.startswith(f"spec.{field}: ")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("hostUsers", True),
        ("hostAliases", []),
        ("readinessGates", []),
        ("readinessGates", [{"conditionType": "example.com/ok"}]),
        ("activeDeadlineSeconds", 30),
        # Implemented now (the managed /etc/hosts, kuberuntime/etchosts.py): admitted.
        ("hostAliases", [{"ip": "10.0.0.1", "hostnames": ["db"]}]),
        ("hostnameOverride", "other-name"),
    ],
)
def test_the_default_values_of_those_fields_and_implemented_ones_are_admitted(
    field: str, value: Any
) -> None:
    assert admit_pod(pod(**{field: value}), allocatable=NODE, admitted=[]).admit
