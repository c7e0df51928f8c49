"""The pinned versions and address ranges of the test harness, read from ``versions.env``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

VERSIONS_FILE = Path(__file__).with_name("versions.env")


@dataclass(frozen=True, kw_only=True)
class Versions:
    kubernetes: str
    kubernetes_staging: str
    etcd: str
    service_cidr: str
    cluster_cidr: str
    node_cidr_mask_size: int
    cluster_dns_ip: str
    cluster_domain: str
    metrics_server: str = ""
    coredns: str = ""
    csi_provisioner: str = ""
    csi_attacher: str = ""
    csi_resizer: str = ""
    csi_snapshotter: str = ""
    csi_staging: str = ""
    flannel: str = ""
    flannel_cni_plugin: str = ""
    cni_plugins: str = ""


def parse_env(text: str) -> dict[str, str]:
    """KEY=VALUE lines; blank lines and `#` comments are skipped."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"not KEY=VALUE: {raw!r}")
        values[key.strip()] = value.strip().strip('"')
    return values


def load_versions(path: Path = VERSIONS_FILE) -> Versions:
    env = parse_env(path.read_text())
    return Versions(
        kubernetes=env["KUBERNETES_VERSION"],
        kubernetes_staging=env["KUBERNETES_STAGING_VERSION"],
        etcd=env["ETCD_VERSION"],
        service_cidr=env["SERVICE_CIDR"],
        cluster_cidr=env["CLUSTER_CIDR"],
        node_cidr_mask_size=int(env["NODE_CIDR_MASK_SIZE"]),
        cluster_dns_ip=env["CLUSTER_DNS_IP"],
        cluster_domain=env["CLUSTER_DOMAIN"],
        metrics_server=env.get("METRICS_SERVER_VERSION", ""),
        coredns=env.get("COREDNS_VERSION", ""),
        csi_provisioner=env.get("CSI_PROVISIONER_VERSION", ""),
        csi_attacher=env.get("CSI_ATTACHER_VERSION", ""),
        csi_resizer=env.get("CSI_RESIZER_VERSION", ""),
        csi_snapshotter=env.get("CSI_SNAPSHOTTER_VERSION", ""),
        csi_staging=env.get("CSI_STAGING_VERSION", ""),
        flannel=env.get("FLANNEL_VERSION", ""),
        flannel_cni_plugin=env.get("FLANNEL_CNI_PLUGIN_VERSION", ""),
        cni_plugins=env.get("CNI_PLUGINS_VERSION", ""),
    )


def cache_dir() -> Path:
    """Root of everything the harness caches (`NODEAGENT_CACHE`, default ~/.cache/nodeagent)."""
    override = os.environ.get("NODEAGENT_CACHE")
    return Path(override) if override else Path.home() / ".cache" / "nodeagent"
