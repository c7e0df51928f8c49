"""Status setters as pure functions: addresses, resources, nodeInfo, conditions."""

from __future__ import annotations

import ipaddress
from fractions import Fraction

import pytest

from nodeagent.hostinfo import HostInfo, HostNetwork
from nodeagent.nodestatus import setters
from nodeagent.nodestatus.quantity import format_binary, format_decimal
from nodeagent.nodestatus.setters import (
    AddressError,
    RuntimeStatus,
    allocatable,
    capacity,
    node_addresses,
    pressure_condition,
    ready_condition,
    ready_errors,
    render_resources,
)

ip = ipaddress.ip_address
NET = HostNetwork(
    addresses={
        "lo": (ip("127.0.0.1"), ip("::1")),
        "eth0": (ip("10.0.0.5"), ip("fe80::1")),
        "eth1": (ip("192.168.1.9"), ip("fd00::9")),
    },
    default_route_interfaces=("eth1",),
)
HOST = HostInfo(
    hostname="n1",
    num_cpus=2,
    memory_bytes=8 * 2**30,
    boot_id="b1",
    hugepages={2 * 2**20: 4, 2**30: 0},
)


def addresses(*node_ips: str, hostname: str = "n1", resolved: tuple[str, ...] = ()) -> list[object]:
    return node_addresses(
        node_ips=[ip(x) for x in node_ips],
        hostname=hostname,
        host=NET,
        lookup=lambda _: [ip(r) for r in resolved],
    )


@pytest.mark.parametrize(
    ("node_ips", "resolved", "expected"),
    [
        pytest.param((), (), "192.168.1.9", id="no node-ip: the default-route interface"),
        pytest.param(
            (),
            ("127.0.1.1", "10.0.0.5"),
            "10.0.0.5",
            id="no node-ip: the first usable address the name resolves to",
        ),
        pytest.param(("10.0.0.5",), (), "10.0.0.5", id="node-ip is used as given"),
        pytest.param(("::",), (), "fd00::9", id="node-ip :: prefers IPv6 auto-detection"),
    ],
)
def test_internal_ip_selection(
    node_ips: tuple[str, ...], resolved: tuple[str, ...], expected: str
) -> None:
    assert addresses(*node_ips, resolved=resolved) == [
        {"type": "InternalIP", "address": expected},
        {"type": "Hostname", "address": "n1"},
    ]


def test_dual_stack_node_ips_are_both_reported() -> None:
    assert addresses("10.0.0.5", "fd00::9") == [
        {"type": "InternalIP", "address": "10.0.0.5"},
        {"type": "InternalIP", "address": "fd00::9"},
        {"type": "Hostname", "address": "n1"},
    ]


@pytest.mark.parametrize(
    ("node_ip", "message"),
    [
        pytest.param(
            "10.9.9.9",
            'node IP: "10.9.9.9" not found in the host\'s network interfaces',
            id="an address not on this host",
        ),
        pytest.param("127.0.0.1", "nodeIP can't be loopback address", id="loopback"),
        pytest.param("fe80::1", "nodeIP can't be a link-local unicast address", id="link-local"),
    ],
)
def test_unusable_node_ip_is_refused_with_the_kubelet_message(node_ip: str, message: str) -> None:
    with pytest.raises(AddressError) as info:
        addresses(node_ip)
    assert str(info.value) == message


def test_hostname_that_is_an_ip_is_the_internal_ip() -> None:
    assert addresses(hostname="10.1.2.3")[0] == {"type": "InternalIP", "address": "10.1.2.3"}


def test_capacity_and_allocatable_subtract_reservations_eviction_and_hugepages() -> None:
    cap = capacity(host=HOST, max_pods=110, rootfs_bytes=100 * 10**9 + 7)
    alloc = allocatable(
        cap,
        kube_reserved={"cpu": Fraction(1, 10), "memory": Fraction(256 * 2**20)},
        system_reserved={"cpu": Fraction(1, 10)},
        eviction_hard={"memory.available": "100Mi", "nodefs.available": "10%"},
    )

    assert render_resources(cap) == {
        "cpu": "2",
        "memory": "8Gi",
        "pods": "110",
        "ephemeral-storage": "100000000007",
        "hugepages-2Mi": "8Mi",
        "hugepages-1Gi": "0",
    }
    assert render_resources(alloc) == {
        "cpu": "1800m",
        "memory": f"{(8 * 1024 - 256 - 100 - 8)}Mi",
        "pods": "110",
        "ephemeral-storage": "90000000007",
        "hugepages-2Mi": "8Mi",
        "hugepages-1Gi": "0",
    }


def test_reservations_larger_than_capacity_clamp_at_zero() -> None:
    alloc = allocatable(
        {"cpu": Fraction(1)},
        kube_reserved={"cpu": Fraction(2)},
        system_reserved={},
        eviction_hard={},
    )
    assert alloc == {"cpu": 0}


@pytest.mark.parametrize(
    ("value", "binary", "text"),
    [
        pytest.param(Fraction(19, 10), False, "1900m", id="fractional cpu in millicores"),
        pytest.param(Fraction(4), False, "4", id="whole cpus"),
        pytest.param(Fraction(1000), False, "1k", id="decimal SI suffix"),
        pytest.param(Fraction(16 * 2**30), True, "16Gi", id="binary largest exact suffix"),
        pytest.param(Fraction(8124628 * 1024), True, "8124628Ki", id="MemTotal in Ki"),
        pytest.param(Fraction(94630121956), True, "94630121956", id="not a 1024 multiple"),
    ],
)
def test_quantities_are_written_in_canonical_form(value: Fraction, binary: bool, text: str) -> None:
    assert (format_binary if binary else format_decimal)(value) == text


def test_node_info_reports_host_runtime_and_version() -> None:
    info = setters.node_info(host=HOST, runtime_version="unknown", kubelet_version="v1.36.3+x")
    assert info["bootID"] == "b1"
    assert info["containerRuntimeVersion"] == "unknown"
    assert info["kubeletVersion"] == "v1.36.3+x"
    assert (info["operatingSystem"], info["architecture"]) == ("linux", "amd64")


NOW, LATER = "2026-01-01T00:00:00Z", "2026-01-01T00:00:10Z"


def test_new_pressure_condition_transitions_from_unknown_and_emits_an_event() -> None:
    cond, event = pressure_condition(
        None, kind="MemoryPressure", under_pressure=False, now=NOW, node_name="n1"
    )
    assert cond == {
        "type": "MemoryPressure",
        "status": "False",
        "reason": "KubeletHasSufficientMemory",
        "message": "kubelet has sufficient memory available",
        "lastHeartbeatTime": NOW,
        "lastTransitionTime": NOW,
    }
    assert event == setters.Event(
        "Normal", "NodeHasSufficientMemory", "Node n1 status is now: NodeHasSufficientMemory"
    )


@pytest.mark.parametrize(
    ("kind", "reason", "message", "event"),
    [
        pytest.param(
            "MemoryPressure",
            "KubeletHasInsufficientMemory",
            "kubelet has insufficient memory available",
            "NodeHasInsufficientMemory",
            id="memory",
        ),
        pytest.param(
            "DiskPressure",
            "KubeletHasDiskPressure",
            "kubelet has disk pressure",
            "NodeHasDiskPressure",
            id="disk",
        ),
        pytest.param(
            "PIDPressure",
            "KubeletHasInsufficientPID",
            "kubelet has insufficient PID available",
            "NodeHasInsufficientPID",
            id="pid",
        ),
    ],
)
def test_pressure_turning_on_sets_the_kubelet_reason(
    kind: str, reason: str, message: str, event: str
) -> None:
    before, _ = pressure_condition(None, kind=kind, under_pressure=False, now=NOW, node_name="n")
    cond, ev = pressure_condition(before, kind=kind, under_pressure=True, now=LATER, node_name="n")
    assert (cond["status"], cond["reason"], cond["message"]) == ("True", reason, message)
    assert cond["lastTransitionTime"] == LATER
    assert ev is not None and ev.reason == event


def test_steady_condition_only_moves_its_heartbeat() -> None:
    before, _ = pressure_condition(
        None, kind="PIDPressure", under_pressure=False, now=NOW, node_name="n"
    )
    cond, event = pressure_condition(
        before, kind="PIDPressure", under_pressure=False, now=LATER, node_name="n"
    )
    assert (cond["lastHeartbeatTime"], cond["lastTransitionTime"], event) == (LATER, NOW, None)


def test_ready_is_false_until_the_runtime_is_checked() -> None:
    errors = ready_errors(
        runtime=setters.runtime_not_checked(),
        other=(),
        cap={"cpu": 1, "memory": 1, "pods": 1, "ephemeral-storage": 1},
        local_storage=True,
    )
    cond, event = ready_condition(None, errors=errors, now=NOW, node_name="n1")

    assert cond == {
        "type": "Ready",
        "status": "False",
        "reason": "KubeletNotReady",
        "message": "container runtime status check may not have completed yet",
        "lastHeartbeatTime": NOW,
        "lastTransitionTime": NOW,
    }
    assert event is None  # a brand-new Ready condition records no event


def test_ready_turning_true_records_node_ready() -> None:
    before, _ = ready_condition(None, errors=["x"], now=NOW, node_name="n1")
    cond, event = ready_condition(before, errors=[], now=LATER, node_name="n1")
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "True",
        "KubeletReady",
        "kubelet is posting ready status",
    )
    assert cond["lastTransitionTime"] == LATER
    assert event == setters.Event("Normal", "NodeReady", "Node n1 status is now: NodeReady")


def test_several_ready_errors_are_aggregated_like_the_kubelet() -> None:
    errors = ready_errors(
        runtime=RuntimeStatus(errors=("container runtime is down",), version=""),
        other=("node is shutting down",),
        cap={"cpu": 1},
        local_storage=True,
    )
    cond, _ = ready_condition(None, errors=errors, now=NOW, node_name="n1")
    assert cond["message"] == (
        "[container runtime is down, node is shutting down, missing node "
        "capacity for resources: memory, pods, ephemeral-storage]"
    )


def test_a_new_boot_id_is_a_rebooted_warning() -> None:
    assert setters.rebooted_event("b0", "b1", "n1") == setters.Event(
        "Warning", "Rebooted", "Node n1 has been rebooted, boot id: b1"
    )
    assert setters.rebooted_event("", "b1", "n1") is None
