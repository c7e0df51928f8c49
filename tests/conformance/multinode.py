"""The cluster of a multi-node conformance run (``make conformance NODES=3 [PEER=kubelet]``).

A cluster of the run's own (`harness.testcluster`: control plane, registry, N nodes in network
and mount namespaces, flannel), not `make up`'s, so a run never takes the machine's one
`make up` cluster from whoever uses it, and everything is removed when the run ends; plus
CoreDNS as `make up NODES=N` deploys it.

With ``PEER=kubelet`` every node's nodeagent is stopped once the cluster is Ready (its pods'
sandboxes removed, its nft table deleted) and the reference kubelet and kube-proxy (``make
peers``) run in the node's namespaces instead, configured as the single-node peer
(`conformance.peer`) with the node's own address, cgroup root and client certificate.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml
from harness import coredns, processes
from harness.build import Binaries, ensure_built
from harness.controlplane import ControlPlane
from harness.hoststate import HostState
from harness.multinode import Cluster, Node
from harness.testcluster import multinode_cluster

from conformance.peer import (
    approve_serving_csr,
    kube_proxy_config,
    kubelet_config,
    remove_sandboxes,
    wait_ready,
)


def say(message: str) -> None:
    print(f">>> {message}", flush=True)


@dataclass
class RunCluster:
    plane: ControlPlane
    registry_host: str
    cluster: Cluster


@contextlib.contextmanager
def run_cluster(*, nodes: int, peer: str, work: Path) -> Iterator[RunCluster]:
    with multinode_cluster(count=nodes, log_dir=work / "cluster-logs") as cluster:
        plane = cluster.plane
        say(f"{nodes} nodes Ready: " + ", ".join(f"{n.name} {n.ip}" for n in cluster.nodes))
        coredns.up(plane, registry_host=cluster.registry_host, work_dir=work / "coredns")
        ctx: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
        if peer == "kubelet":
            ctx = kubelet_nodes(cluster, work=work)
        with ctx:
            yield RunCluster(plane=plane, registry_host=cluster.registry_host, cluster=cluster)


@contextlib.contextmanager
def kubelet_nodes(cluster: Cluster, *, work: Path) -> Iterator[None]:
    bins = ensure_built(peers=True, quiet=True)
    before = HostState.snapshot()
    started: list[tuple[Node, processes.Proc]] = []
    try:
        for node in cluster.nodes:
            started += _swap(cluster, node, bins, work=work)
        for node, proc in started:
            if proc.name.startswith("kubelet"):
                wait_ready(cluster.plane, node.name, proc)
        yield
    finally:
        for _node, proc in reversed(started):
            proc.stop(timeout=15)
        for node in cluster.nodes:
            with contextlib.suppress(Exception):
                remove_sandboxes(node.containerd_dir / "c.sock")
            for family in ("ip", "ip6"):
                node.run("nft", "delete", "table", family, "kube-proxy", check=False)
            node.run("sh", "-c", f"grep -o ' {work}/[^ ]*' /proc/mounts | sort -r |"
                     " xargs -r -n1 umount -l", check=False)  # fmt: skip
        before.restore()
        say("reference kubelets and kube-proxies stopped")


def _swap(
    cluster: Cluster, node: Node, bins: Binaries, *, work: Path
) -> list[tuple[Node, processes.Proc]]:
    """Stop the node's nodeagent and start the kubelet and kube-proxy in its namespaces."""
    cluster.stop_agent(node)
    socket = node.containerd_dir / "c.sock"
    removed = remove_sandboxes(socket)
    for family in ("ip", "ip6"):
        node.run("nft", "delete", "table", family, "nodeagent", check=False)
    root = node.dir / "kubelet"  # short: unix socket paths under it have a limit
    root.mkdir(parents=True, exist_ok=True)
    plane = cluster.plane
    kubeconfig = plane.node_kubeconfig(node.name)
    config = kubelet_config(endpoint=f"unix://{socket}", ca=plane.ca_path, root=root)
    config["cgroupRoot"] = node.cgroup_root
    kcfg = root / "kubelet.yaml"
    kcfg.write_text(yaml.safe_dump(config))
    pcfg = root / "kube-proxy.yaml"
    pcfg.write_text(yaml.safe_dump(kube_proxy_config(kubeconfig=kubeconfig, node=node.name)))
    path = bins.path
    kubelet = processes.start(
        name=f"kubelet-{node.name}",
        argv=[
            *node.enter(),
            str(path("kubelet")),
            f"--config={kcfg}",
            f"--kubeconfig={kubeconfig}",
            f"--hostname-override={node.name}",
            f"--node-ip={node.ip}",
            f"--root-dir={root}",
            f"--cert-dir={root / 'pki'}",
        ],
        log=work / "cluster-logs" / f"kubelet-{node.name}.log",
    )
    proxy = processes.start(
        name=f"kube-proxy-{node.name}",
        argv=[*node.enter(), str(path("kube-proxy")), f"--config={pcfg}"],
        log=work / "cluster-logs" / f"kube-proxy-{node.name}.log",
    )
    say(
        f"{node.name}: nodeagent stopped ({removed} sandboxes removed); kubelet pid"
        f" {kubelet.pid}, kube-proxy pid {proxy.pid}"
    )
    approve_serving_csr(
        plane, node.name, kubelet, issued=root / "pki" / "kubelet-server-current.pem"
    )
    return [(node, kubelet), (node, proxy)]
