"""How `proxy_compare.py` runs each service proxy inside its node namespace, and how it reads
each one's sync metrics.

- **kube-proxy** (the harness-built reference binary): ``--config`` with a
  KubeProxyConfiguration: ``mode: nftables``, this cluster's pod CIDR, ``nodePortAddresses:
  [primary]``, healthz and metrics on the namespace's 127.0.0.1, ``minSyncPeriod: 1s`` /
  ``syncPeriod: 30s`` (its defaults), conntrack settings all 0 (leave the kernel's alone),
  ``oomScoreAdj: 0``, verbosity 0. Metrics are read from its ``/metrics``.
- **nodeagent**: `proxy_runner.py` (the agent's own wiring of the proxy) with the same CIDRs and
  periods (the agent's defaults are also 1 s / 30 s). Metrics are read from its status file.

Both use the admin kubeconfig through the namespace's forwarded API port, the same node name
and node IP, and exec ``nft`` inside the namespace.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from harness.netns import NODE_IP, http_get

BENCH_DIR = Path(__file__).resolve().parent
METRICS_PORT = 10249
HEALTHZ_PORT = 10256


@dataclass(frozen=True, kw_only=True)
class Scrape:
    syncs: int = 0
    sync_sum: float = 0.0
    full_syncs: int = 0
    full_sum: float = 0.0
    last_sync: float = 0.0
    failures: float = 0.0
    programming_count: int = 0
    programming_sum: float = 0.0


def prometheus_values(text: str, *, family: str = "IPv4") -> dict[str, float]:
    """``name value`` of an exposition: a series labelled ``ip_family`` counts only for
    ``family`` (kube-proxy runs one proxier per family; the IPv6 one has nothing to do
    here); other labelled series are summed."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not m or ("ip_family=" in (m.group(2) or "") and f'"{family}"' not in m.group(2)):
            continue
        out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
    return out


def kube_proxy_config(*, kubeconfig: Path, node: str, cluster_cidr: str) -> dict[str, Any]:
    zero = "0s"
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "nftables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node,
        "clusterCIDR": cluster_cidr,
        "detectLocalMode": "ClusterCIDR",
        "healthzBindAddress": f"127.0.0.1:{HEALTHZ_PORT}",
        "metricsBindAddress": f"127.0.0.1:{METRICS_PORT}",
        "nodePortAddresses": ["primary"],
        "oomScoreAdj": 0,
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": zero,
            "tcpCloseWaitTimeout": zero,
            "udpTimeout": zero,
            "udpStreamTimeout": zero,
        },
        "nftables": {"masqueradeBit": 14, "minSyncPeriod": "1s", "syncPeriod": "30s"},
        "logging": {"verbosity": 0},
    }


class KubeProxy:
    name = "kube-proxy"
    table = "kube-proxy"
    caches_synced = '"Caches are synced" controller="'  # the last of its informers

    def __init__(self, *, binary: Path, ns: str, work: Path) -> None:
        self.binary, self.ns, self.work = binary, ns, work
        self.last_metrics = ""

    def argv(
        self, *, kubeconfig: Path, node: str, cluster_cidr: str, service_cidr: str
    ) -> list[str]:
        del service_cidr  # kube-proxy reads the ServiceCIDR objects itself
        config = self.work / "kube-proxy.yaml"
        config.write_text(yaml.safe_dump(
            kube_proxy_config(kubeconfig=kubeconfig, node=node, cluster_cidr=cluster_cidr)
        ))  # fmt: skip
        return [str(self.binary), f"--config={config}"]

    async def scrape(self) -> Scrape | None:
        text = await http_get(self.ns, METRICS_PORT, "/metrics")
        if not text:
            return None
        self.last_metrics = text
        v = prometheus_values(text)
        p = "kubeproxy_"
        return Scrape(
            syncs=int(v.get(f"{p}sync_proxy_rules_duration_seconds_count", 0)),
            sync_sum=v.get(f"{p}sync_proxy_rules_duration_seconds_sum", 0.0),
            full_syncs=int(v.get(f"{p}sync_full_proxy_rules_duration_seconds_count", 0)),
            full_sum=v.get(f"{p}sync_full_proxy_rules_duration_seconds_sum", 0.0),
            last_sync=v.get(f"{p}sync_proxy_rules_last_timestamp_seconds", 0.0),
            failures=v.get(f"{p}sync_proxy_rules_nftables_sync_failures_total", 0.0),
            programming_count=int(v.get(f"{p}network_programming_duration_seconds_count", 0)),
            programming_sum=v.get(f"{p}network_programming_duration_seconds_sum", 0.0),
        )


class NodeagentProxy:
    name = "nodeagent"
    table = "nodeagent"
    caches_synced = "Caches synced; programming service rules"

    def __init__(self, *, ns: str, work: Path) -> None:
        self.ns, self.work = ns, work
        self.status = work / "status.json"
        self.dump = work / "full"

    def argv(
        self, *, kubeconfig: Path, node: str, cluster_cidr: str, service_cidr: str
    ) -> list[str]:
        return [
            sys.executable,
            str(BENCH_DIR / "proxy_runner.py"),
            f"--kubeconfig={kubeconfig}",
            f"--node-name={node}",
            f"--node-ip={NODE_IP}",
            f"--cluster-cidr={cluster_cidr}",
            f"--service-cidr={service_cidr}",
            f"--status={self.status}",
            f"--dump-full={self.dump}",
        ]

    async def scrape(self) -> Scrape | None:
        try:
            s = json.loads(self.status.read_text())
        except (OSError, ValueError):
            return Scrape()
        return Scrape(
            syncs=int(s["syncs"]),
            sync_sum=float(s["sync_sum"]),
            full_syncs=int(s["full_syncs"]),
            full_sum=float(s["full_sum"]),
            last_sync=float(s["last_sync"]),
            failures=float(s["failures"]),
            programming_count=int(s["programming_count"]),
            programming_sum=float(s["programming_sum"]),
        )
