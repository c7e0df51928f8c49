"""RSS and CPU per node of a 3-node cluster (`harness.testcluster`), idle and with pods.

    PYTHONPATH=tests .venv/bin/python bench/multinode_idle.py [--seconds 120] [--pods 10]

Builds a 3-node cluster of its own (control plane, registry, nodes in namespaces, flannel),
lets it settle, then samples every second for ``--seconds``: each node's nodeagent, its
containerd (with its shims) and its flannel pod (the flanneld process). Then ``--pods`` busybox
pods per node (a Deployment of 3 x N spread over the nodes), settles again and samples again.
Prints one markdown table (docs/benchmarks.md). The cluster is removed at the end, whatever
happens.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import statistics
import sys
import time
from pathlib import Path

from harness.containerd import shims_of
from harness.multinode import Cluster, Node
from harness.testcluster import multinode_cluster

TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mib(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2**20


def flanneld_pid(node: Node) -> int | None:
    """The flanneld process whose network namespace is the node's."""
    target = os.stat(f"/run/netns/{node.netns}").st_ino
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv0 = (entry / "cmdline").read_bytes().split(b"\0")[0]
            if argv0.endswith(b"flanneld") and os.stat(entry / "ns/net").st_ino == target:
                return int(entry.name)
        except OSError:
            continue
    return None


def groups(node: Node) -> dict[str, list[int]]:
    assert node.agent_pid is not None and node.containerd_pid is not None
    flannel = flanneld_pid(node)
    return {
        "nodeagent": [node.agent_pid],
        "containerd+shims": [node.containerd_pid, *shims_of(node.containerd_dir / "c.sock")],
        "flanneld": [flannel] if flannel else [],
    }


def sample(cluster: Cluster, seconds: int) -> dict[tuple[str, str], tuple[float, float]]:
    """(node, component) -> (median RSS MiB, CPU % of one core over the window)."""
    pids = {n.name: groups(n) for n in cluster.nodes}
    start = {
        (n, c): sum(cpu_seconds(p) for p in ps) for n, g in pids.items() for c, ps in g.items()
    }
    rss: dict[tuple[str, str], list[float]] = {k: [] for k in start}
    began = time.monotonic()
    for _ in range(seconds):
        for (n, c), _cpu in start.items():
            rss[(n, c)].append(sum(rss_mib(p) for p in pids[n][c]))
        time.sleep(1)
    took = time.monotonic() - began
    out = {}
    for (n, c), cpu0 in start.items():
        cpu = sum(cpu_seconds(p) for p in pids[n][c]) - cpu0
        out[(n, c)] = (statistics.median(rss[(n, c)]), 100 * cpu / took)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=120)
    parser.add_argument("--settle", type=int, default=60)
    parser.add_argument("--pods", type=int, default=10, help="busybox pods per node")
    args = parser.parse_args()
    # SIGTERM (a timeout, Ctrl-C's cousin) unwinds through the cluster's clean-up
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with multinode_cluster(count=3) as cluster:
        time.sleep(args.settle)
        idle = sample(cluster, args.seconds)
        replicas = args.pods * len(cluster.nodes)
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "sleepers", "namespace": "default"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "sleepers"}},
                "template": {
                    "metadata": {"labels": {"app": "sleepers"}},
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "containers": [
                            {
                                "name": "c",
                                "image": "busybox",
                                "imagePullPolicy": "IfNotPresent",
                                "command": ["sleep", "86400"],
                            }
                        ],
                    },
                },
            },
        }
        cluster.plane.kubectl("apply", "-f", "-", input=json.dumps(deployment))
        cluster.plane.kubectl("rollout", "status", "deployment/sleepers", "--timeout=600s")
        time.sleep(args.settle)
        busy = sample(cluster, args.seconds)
    print(
        f"machine: {platform.node()} {os.cpu_count()} cores, load "
        f"{os.getloadavg()[0]:.1f}; {datetime.date.today()}; {args.seconds} s samples, "
        f"{args.settle} s settle, {args.pods} pods per node\n"
    )
    print("| node | component | idle RSS MiB | idle CPU % | with pods RSS MiB | with pods CPU % |")
    print("|---|---|---|---|---|---|")
    for key in idle:
        (r0, c0), (r1, c1) = idle[key], busy[key]
        print(f"| {key[0]} | {key[1]} | {r0:.1f} | {c0:.2f} | {r1:.1f} | {c1:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
