"""The node's settings, taken from :class:`nodeagent.config.Config` in one place.

Registration, status, lease and credentials read these frozen values only, so they do not
depend on the configuration's layout.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType

from nodeagent.config import Config, features
from nodeagent.nodestatus.quantity import parse_quantity

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True, kw_only=True)
class NodeSettings:
    node_name: str
    hostname: str
    root_dir: Path
    kubeconfig: Path
    bootstrap_kubeconfig: Path | None = None
    node_ips: tuple[IPAddress, ...] = ()
    """``--node-ip``: empty, one address, or an IPv4,IPv6 pair; ``0.0.0.0``/``::`` pick a family."""
    node_labels: Mapping[str, str] = field(default_factory=dict)
    register_node: bool = True
    register_schedulable: bool = True
    register_with_taints: tuple[Mapping[str, str], ...] = ()
    provider_id: str = ""
    status_update_frequency: float = 10.0
    status_report_frequency: float = 300.0
    lease_duration_seconds: int = 40
    max_pods: int = 110
    node_status_max_images: int = 50
    kube_reserved: Mapping[str, Fraction] = field(default_factory=dict)
    system_reserved: Mapping[str, Fraction] = field(default_factory=dict)
    eviction_hard: Mapping[str, str] = field(
        default_factory=lambda: {"memory.available": "100Mi", "nodefs.available": "10%"}
    )
    kubelet_port: int = 10250
    rotate_certificates: bool = True
    controller_attach_detach: bool = True
    local_storage_capacity_isolation: bool = True
    declared_features: tuple[str, ...] | None = None
    """``status.declaredFeatures``; None leaves the field as it is (NodeDeclaredFeatures off)."""

    @property
    def pki_dir(self) -> Path:
        return self.root_dir / "pki"


def _reserved(values: Mapping[str, str]) -> Mapping[str, Fraction]:
    return MappingProxyType({k: parse_quantity(v) for k, v in values.items() if k != "pid"})


def settings_from_config(cfg: Config, *, hostname: str) -> NodeSettings:
    """``hostname`` is the host name; ``node.hostnameOverride`` wins for the node name."""
    node, kubelet = cfg.node, cfg.kubelet
    name = (node.hostname_override or hostname).strip().lower()
    ips = tuple(ipaddress.ip_address(p.strip()) for p in node.node_ip.split(",") if p.strip())
    taints = tuple(
        MappingProxyType({"key": t.key, "value": t.value, "effect": t.effect})
        for t in kubelet.register_with_taints
    )
    return NodeSettings(
        node_name=name,
        hostname=name,
        root_dir=Path(node.root_dir),
        kubeconfig=Path(node.kubeconfig),
        bootstrap_kubeconfig=Path(node.bootstrap_kubeconfig) if node.bootstrap_kubeconfig else None,
        node_ips=ips,
        node_labels=MappingProxyType(dict(node.node_labels)),
        register_node=kubelet.register_node,
        register_with_taints=taints,
        provider_id=kubelet.provider_id,
        status_update_frequency=kubelet.node_status_update_frequency.nanoseconds / 1e9,
        status_report_frequency=kubelet.node_status_report_frequency.nanoseconds / 1e9,
        lease_duration_seconds=kubelet.node_lease_duration_seconds,
        max_pods=kubelet.max_pods,
        node_status_max_images=kubelet.node_status_max_images,
        kube_reserved=_reserved(kubelet.kube_reserved),
        system_reserved=_reserved(kubelet.system_reserved),
        eviction_hard=MappingProxyType(dict(kubelet.eviction_hard)),
        kubelet_port=kubelet.port,
        rotate_certificates=kubelet.rotate_certificates,
        local_storage_capacity_isolation=kubelet.local_storage_capacity_isolation,
        declared_features=features.declared(features.effective(kubelet.feature_gates)),
    )
