"""Who is the node in a soak: nodeagent (the cluster's own agents) or, for `PEER=kubelet`, the
reference kubelet + kube-proxy started in each node's namespaces in nodeagent's place.

For the kubelet each node's nodeagent is stopped, its nft table and its pods' sandboxes
removed, and the harness-built kubelet (`make peers`) and kube-proxy started inside the node
(`node.enter()`) with the node's client certificate, its containerd, cgroup root, root dir (the
same tmpfs) and IP, the kubelet's default eviction thresholds (as nodeagent's), kube-proxy in
nftables mode. The faults then act on the kubelet and kube-proxy together: both are killed,
stopped, started and throttled as the node's agent. What the kubelet changes on the host is
put back when the run ends (`HostState`)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from conformance.peer import approve_serving_csr, kube_proxy_config, remove_sandboxes
from conformance.peer import kubelet_config as conformance_kubelet_config
from harness import processes
from harness.build import ensure_built
from harness.hoststate import HostState
from harness.multinode import AGENT_STOP_TIMEOUT, Cluster, Node

READY_TIMEOUT = 180.0


class Peer:
    """nodeagent: the cluster's own agent per node."""

    name = "nodeagent"

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def stop(self, node: Node, *, kill: bool = False) -> None:
        self.cluster.stop_agent(node, kill=kill)

    def start(self, node: Node) -> None:
        self.cluster.start_agent(node)

    def root_dir(self, node: Node) -> Path:
        return node.root_dir

    def pids(self, node: Node) -> dict[str, int]:
        """The node's agent processes by role (what the faults and the RSS sampling act on)."""
        return {"agent": node.agent_pid} if node.agent is not None and node.agent_pid else {}

    def close(self) -> None:
        pass


@dataclass
class KubeletPeer(Peer):
    cluster: Cluster
    work: Path
    procs: dict[str, dict[str, processes.Proc]] = field(default_factory=dict)
    name = "kubelet"

    def __post_init__(self) -> None:
        self.bins = ensure_built(peers=True, quiet=True)
        self.host = HostState.snapshot()
        for node in self.cluster.nodes:
            self.cluster.stop_agent(node)
            node.run("nft", "delete", "table", "ip", "nodeagent", check=False)
            remove_sandboxes(node.containerd_dir / "c.sock")
            self._write_configs(node)
            self.start(node)
            approve_serving_csr(
                self.cluster.plane,
                node.name,
                self.procs[node.name]["agent"],
                issued=self.root_dir(node) / "pki" / "kubelet-server-current.pem",
            )

    def root_dir(self, node: Node) -> Path:
        """On the node's root-dir tmpfs, beside nodeagent's (whose checkpoint files the
        kubelet refuses as corrupted)."""
        return node.root_dir / "kubelet"

    def _dir(self, node: Node) -> Path:
        return self.work / node.name

    def _write_configs(self, node: Node) -> None:
        plane = self.cluster.plane
        d = self._dir(node)
        d.mkdir(parents=True, exist_ok=True)
        config = conformance_kubelet_config(
            endpoint=node.endpoint, ca=plane.ca_path, root=self.root_dir(node)
        )
        config.pop("evictionHard")  # the kubelet's defaults, as nodeagent's (a tmpfs root dir)
        config.pop("imageGCHighThresholdPercent")
        config.pop("imageGCLowThresholdPercent")
        config["cgroupRoot"] = node.cgroup_root
        self.root_dir(node).mkdir(parents=True, exist_ok=True)
        (d / "kubelet.yaml").write_text(yaml.safe_dump(config))
        kubeconfig = plane.node_kubeconfig(node.name)
        proxy = kube_proxy_config(kubeconfig=kubeconfig, node=node.name)
        (d / "kube-proxy.yaml").write_text(yaml.safe_dump(proxy))
        (d / "kubeconfig").write_text(kubeconfig.read_text())

    def start(self, node: Node) -> None:
        d = self._dir(node)
        kubelet = [
            str(self.bins.path("kubelet")),
            f"--config={d / 'kubelet.yaml'}",
            f"--kubeconfig={d / 'kubeconfig'}",
            f"--hostname-override={node.name}",
            f"--node-ip={node.ip}",
            f"--root-dir={self.root_dir(node)}",
            f"--cert-dir={self.root_dir(node) / 'pki'}",
        ]
        proxy = [str(self.bins.path("kube-proxy")), f"--config={d / 'kube-proxy.yaml'}"]
        started = {}
        for role, argv in (("agent", kubelet), ("proxy", proxy)):
            name = "kubelet" if role == "agent" else "kube-proxy"
            started[role] = processes.start(
                name=f"{name}-{node.name}",
                argv=[*node.enter(), *argv],
                log=self.cluster.log_dir / f"{name}-{node.name}.log",
            )
        self.procs[node.name] = started
        node.agent, node.agent_pid = started["agent"], started["agent"].pid

    def stop(self, node: Node, *, kill: bool = False) -> None:
        for proc in self.procs.pop(node.name, {}).values():
            if kill:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
            proc.stop(timeout=AGENT_STOP_TIMEOUT)
        node.agent, node.agent_pid = None, None

    def pids(self, node: Node) -> dict[str, int]:
        return {role: p.pid for role, p in self.procs.get(node.name, {}).items() if p.alive()}

    def close(self) -> None:
        for node in self.cluster.nodes:
            self.stop(node)
            remove_sandboxes(node.containerd_dir / "c.sock")
            for table in ("ip kube-proxy", "ip6 kube-proxy"):
                node.run("nft", "delete", "table", *table.split(), check=False)
        self.host.restore()


@contextlib.contextmanager
def peer(kind: str, cluster: Cluster, work: Path) -> Iterator[Peer]:
    p: Peer = Peer(cluster) if kind == "nodeagent" else KubeletPeer(cluster, work)
    try:
        yield p
    finally:
        p.close()
