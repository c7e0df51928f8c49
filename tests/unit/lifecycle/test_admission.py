"""Admission with the kubelet's reasons (table tests)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.lifecycle.admission import AdmitResult, admit_pod, pod_requests
from nodeagent.testing.pods import container, pod

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


def test_raw_block_devices_are_admitted_for_the_volume_manager_to_map() -> None:
    p = pod(
        containers=[container("db", volumeDevices=[{"name": "data", "devicePath": "/dev/xvda"}])]
    )
    assert admit_pod(p, allocatable=NODE, admitted=[]).admit


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
