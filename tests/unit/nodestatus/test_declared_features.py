"""``status.declaredFeatures`` (NodeDeclaredFeatures): what the node declares, from its gates."""

from __future__ import annotations

import dataclasses
import datetime as dt
import ipaddress
from pathlib import Path

from nodeagent.config import features
from nodeagent.hostinfo import HostInfo, HostNetwork
from nodeagent.nodestatus.compute import NodeFacts, compute_node
from nodeagent.nodestatus.setters import runtime_not_checked
from nodeagent.nodestatus.settings import NodeSettings

FACTS = NodeFacts(
    now=dt.datetime(2026, 11, 25, tzinfo=dt.UTC),
    host=HostInfo(
        hostname="n",
        machine_id="m",
        system_uuid="u",
        boot_id="b",
        kernel_version="6.1.0",
        os_image="Debian",
        num_cpus=2,
        memory_bytes=2**32,
    ),
    network=HostNetwork(
        addresses={"eth0": (ipaddress.ip_address("10.0.0.5"),)},
        default_route_interfaces=("eth0",),
    ),
    rootfs_bytes=2**34,
    runtime=runtime_not_checked(),
)
SETTINGS = NodeSettings(
    node_name="n", hostname="n", root_dir=Path("/var/lib/x"), kubeconfig=Path("/etc/x")
)


def test_the_node_declares_what_its_server_serves() -> None:
    assert features.declared(features.effective({})) == ("ExtendWebSocketsToKubelet",)
    off = features.effective({"ExtendWebSocketsToKubelet": False})
    assert features.declared(off) == ()
    assert features.declared(features.effective({"NodeDeclaredFeatures": False})) is None


def test_status_carries_the_declaration_and_drops_it_when_the_gate_goes() -> None:
    on = dataclasses.replace(SETTINGS, declared_features=("ExtendWebSocketsToKubelet",))
    node = compute_node({}, FACTS, on).node
    assert node["status"]["declaredFeatures"] == ["ExtendWebSocketsToKubelet"]
    none = dataclasses.replace(SETTINGS, declared_features=())
    assert "declaredFeatures" not in compute_node(node, FACTS, none).node["status"]
    # NodeDeclaredFeatures off: the field is left as it is.
    assert compute_node(node, FACTS, SETTINGS).node["status"]["declaredFeatures"] == [
        "ExtendWebSocketsToKubelet"
    ]
