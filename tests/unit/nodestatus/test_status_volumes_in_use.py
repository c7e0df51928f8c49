"""``Node.status.volumesInUse``: the attachable volumes mounted here, sorted, so the
attach/detach controller leaves them attached; gone once none is."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from nodeagent.clock import FrozenClock
from nodeagent.hostinfo import HostInfo, HostNetwork
from nodeagent.nodestatus.compute import NodeFacts, compute_node, node_changed
from nodeagent.nodestatus.setters import RuntimeStatus
from nodeagent.nodestatus.settings import NodeSettings

NODE = "node-a"
SETTINGS = NodeSettings(
    node_name=NODE,
    hostname=NODE,
    root_dir=Path("/var/lib/nodeagent"),
    kubeconfig=Path("/etc/nodeagent/kubeconfig"),
    node_ips=(ipaddress.ip_address("10.0.0.5"),),
)
IN_USE = (
    "kubernetes.io/csi/hostpath.csi.k8s.io^vol-b",
    "kubernetes.io/csi/hostpath.csi.k8s.io^vol-a",
)


def facts(in_use: tuple[str, ...]) -> NodeFacts:
    return NodeFacts(
        now=FrozenClock().now(),
        host=HostInfo(hostname=NODE, num_cpus=2, memory_bytes=2**30, boot_id="b"),
        network=HostNetwork(
            addresses={"eth0": (ipaddress.ip_address("10.0.0.5"),)},
            default_route_interfaces=("eth0",),
        ),
        rootfs_bytes=2**34,
        runtime=RuntimeStatus(errors=(), version="containerd://1.6.20"),
        volumes_in_use=in_use,
    )


def test_volumes_in_use_are_reported_sorted_and_dropped_when_none() -> None:
    old: dict[str, Any] = {"metadata": {"name": NODE}, "status": {}}
    node = compute_node(old, facts(IN_USE), SETTINGS).node
    assert node["status"]["volumesInUse"] == sorted(IN_USE)
    idle = compute_node(node, facts(()), SETTINGS).node
    assert "volumesInUse" not in idle["status"]
    assert node_changed(node, idle)
