"""Service proxy on 3 nodes: nodeagent's proxy vs kube-proxy (nftables mode), same cluster.

    PYTHONPATH=tests .venv/bin/python bench/multinode_proxy.py [--services 1000]
        [--endpoints 10] [--replicas 30] [--only nodeagent|kube-proxy]

Builds a 3-node cluster of its own (`harness.testcluster`), creates ``--services`` selector-less
ClusterIP Services with one EndpointSlice of ``--endpoints`` ready endpoints each (addresses in
10.245.0.0/16, spread over the three nodes' names) and a ``--replicas`` Deployment of busybox
web servers behind a Service. Then, per proxy:

  1. waits until every node's table holds every Service (``service-ips`` map elements);
  2. rolls the Deployment (a template annotation: maxSurge/maxUnavailable 25%) and, for every
     change of its EndpointSlice seen on an API watch, takes each endpoint that turned ready
     or stopped being ready and times it, on every node, until a committed nft object carrying
     that address shows on the node's nf_tables netlink events (`harness.netns.NftEvents`):
     the time from the EndpointSlice change to the rule on each node;
  3. the proxy's CPU seconds during the roll and its RSS at the end, per node.

nodeagent first (its proxy in the agent); then every agent restarts with ``proxy.enabled:
false`` (the pods keep running), its table is deleted and the reference kube-proxy (``make
peers``) runs in each node's network namespace: its CPU and RSS are kube-proxy's alone, and the
agents' CPU during that roll is shown beside it (the kubelet's share of the work). Prints one
markdown table (docs/benchmarks.md). The cluster is removed at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import ipaddress
import json
import os
import platform
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from conformance.peer import kube_proxy_config
from harness import processes
from harness.build import ensure_built
from harness.multinode import Cluster, Node
from harness.netns import NftEvents
from harness.testcluster import multinode_cluster

from nodeagent.apiserver import ApiClient, load_kubeconfig
from nodeagent.apiserver.resources import NAMESPACES, Resource

NAMESPACE = "proxy-bench"
SERVICES = Resource("", "v1", "services", "Service", namespaced=True)
SLICES = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", namespaced=True)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", namespaced=True)
BASE = int(ipaddress.ip_address("10.245.0.1"))
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
WEB = "echo $(hostname) > /tmp/index.html; exec httpd -f -p 8080 -h /tmp"


def say(message: str) -> None:
    print(f">>> {message}", flush=True)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / TICK


def rss_mib(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE / 2**20


class NodeNs:
    """What `NftEvents` needs of a namespace: its name and how to run a command in it."""

    def __init__(self, node: Node) -> None:
        self.name = node.netns

    def argv(self, *args: str) -> list[str]:
        return ["ip", "netns", "exec", self.name, *args]


def bulk_objects(i: int, endpoints: int, nodes: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    svc = {
        "metadata": {"name": f"svc-{i}"},
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}]},
    }
    eps = [
        {
            "addresses": [str(ipaddress.ip_address(BASE + i * endpoints + j))],
            "conditions": {"ready": True},
            "nodeName": nodes[(i * endpoints + j) % len(nodes)],
        }
        for j in range(endpoints)
    ]
    eps_slice = {
        "metadata": {
            "name": f"svc-{i}-bench",
            "labels": {
                "kubernetes.io/service-name": f"svc-{i}",
                "endpointslice.kubernetes.io/managed-by": "proxy-bench",
            },
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": eps,
    }
    return svc, eps_slice


def roll_objects(replicas: int) -> tuple[dict[str, Any], dict[str, Any]]:
    labels = {"app": "roll"}
    deployment = {
        "metadata": {"name": "roll"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "web",
                            "image": "busybox",
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["sh", "-c", WEB],
                            "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                        }
                    ],
                },
            },
        },
    }
    service = {
        "metadata": {"name": "roll"},
        "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    return deployment, service


async def create_all(api: ApiClient, args: argparse.Namespace, nodes: list[str]) -> None:
    await api.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
    gate = asyncio.Semaphore(32)

    async def one(res: Resource, body: dict[str, Any]) -> None:
        async with gate:
            await api.create(res, body, namespace=NAMESPACE)

    started = time.monotonic()
    await asyncio.gather(*(
        one(res, body)
        for i in range(args.services)
        for res, body in zip(
            (SERVICES, SLICES), bulk_objects(i, args.endpoints, nodes), strict=True
        )
    ))  # fmt: skip
    say(f"{2 * args.services} objects created in {time.monotonic() - started:.0f} s")
    deployment, service = roll_objects(args.replicas)
    await api.create(DEPLOYMENTS, deployment, namespace=NAMESPACE)
    await api.create(SERVICES, service, namespace=NAMESPACE)


def service_ips(node: Node, table: str) -> int:
    done = node.run(
        "nft", "-j", "list", "map", "ip", table, "service-ips", check=False, timeout=120
    )
    if done.returncode != 0:
        return 0
    for item in json.loads(done.stdout).get("nftables", []):
        if "map" in item:
            return len(item["map"].get("elem", []))
    return 0


def wait_programmed(cluster: Cluster, table: str, want: int, *, timeout: float = 900) -> float:
    started = time.monotonic()
    for node in cluster.nodes:
        while (have := service_ips(node, table)) < want:
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"{node.name}: {have} of {want} services in {table}")
            time.sleep(2)
    return time.monotonic() - started


def ready_ips(slices: list[dict[str, Any]]) -> set[str]:
    return {
        ip
        for s in slices
        for ep in s.get("endpoints") or []
        if (ep.get("conditions") or {}).get("ready") is not False
        for ip in ep.get("addresses") or []
    }


async def roll(
    api: ApiClient, cluster: Cluster, pids: dict[str, list[int]], *, label: str, limit: float
) -> dict[str, Any]:
    """Roll the Deployment; time every endpoint change to each node's rules."""
    events = {n.name: NftEvents(NodeNs(n)) for n in cluster.nodes}
    for e in events.values():
        await e.start()
    listed = await api.list(
        SLICES, namespace=NAMESPACE, label_selector="kubernetes.io/service-name=roll"
    )
    slices = {s["metadata"]["name"]: s for s in listed.items}
    current = ready_ips(list(slices.values()))
    waits: list[tuple[str, str, float, asyncio.Future[float]]] = []
    cpu0 = {n: sum(cpu_seconds(p) for p in ps) for n, ps in pids.items()}
    started = time.monotonic()
    patch = {"spec": {"template": {"metadata": {"annotations": {"bench/roll": label}}}}}
    await api.patch(DEPLOYMENTS, "roll", patch, namespace=NAMESPACE)

    async def done() -> bool:
        d = await api.get(DEPLOYMENTS, "roll", namespace=NAMESPACE)
        st, spec = d.get("status") or {}, d.get("spec") or {}
        return bool(
            st.get("observedGeneration", 0) >= d["metadata"]["generation"]
            and st.get("updatedReplicas") == spec["replicas"]
            and st.get("readyReplicas") == spec["replicas"]
            and st.get("replicas") == spec["replicas"]
        )

    async def watch() -> None:
        nonlocal current
        async for event in api.watch(
            SLICES, namespace=NAMESPACE, resource_version=listed.resource_version,
            label_selector="kubernetes.io/service-name=roll", timeout_seconds=int(limit),
        ):  # fmt: skip
            if event.type not in ("ADDED", "MODIFIED", "DELETED"):
                continue
            seen = time.monotonic()
            name = event.object["metadata"]["name"]
            if event.type == "DELETED":
                slices.pop(name, None)
            else:
                slices[name] = event.object
            now = ready_ips(list(slices.values()))
            for ip in (now - current) | (current - now):
                for node, ev in events.items():
                    waits.append((node, ip, seen, ev.expect_address(ip)))
            current = now

    watcher = asyncio.create_task(watch())
    try:
        while not await done():
            if time.monotonic() - started > limit:
                raise TimeoutError("the rolling update did not finish")
            await asyncio.sleep(1)
        await asyncio.sleep(5)  # the last changes reach the rules
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await watcher
    seconds = time.monotonic() - started
    per_node: dict[str, list[float]] = {n.name: [] for n in cluster.nodes}
    missed = 0
    for node, _ip, seen, fut in waits:
        if fut.done():
            per_node[node].append(max(0.0, fut.result() - seen))
        else:
            missed += 1
    cpu = {n: sum(cpu_seconds(p) for p in ps) - cpu0[n] for n, ps in pids.items()}
    rss = {n: sum(rss_mib(p) for p in ps) for n, ps in pids.items()}
    return {"seconds": seconds, "latency": per_node, "missed": missed, "cpu": cpu, "rss": rss}


def stop_proxy_in_agents(cluster: Cluster) -> None:
    for node in cluster.nodes:
        config = yaml.safe_load(node.config.read_text())
        config.setdefault("proxy", {})["enabled"] = False
        node.config.write_text(yaml.safe_dump(config, sort_keys=False))
        cluster.stop_agent(node)
        node.run("nft", "delete", "table", "ip", "nodeagent", check=False)
        cluster.start_agent(node)


def start_kube_proxies(cluster: Cluster, work: Path) -> list[processes.Proc]:
    binary = ensure_built(peers=True, quiet=True).path("kube-proxy")
    procs = []
    for node in cluster.nodes:
        kubeconfig = cluster.plane.node_kubeconfig(node.name)
        config = work / f"kube-proxy-{node.name}.yaml"
        config.write_text(yaml.safe_dump(kube_proxy_config(kubeconfig=kubeconfig, node=node.name)))
        procs.append(processes.start(
            name=f"kube-proxy-{node.name}",
            argv=[*node.enter(), str(binary), f"--config={config}"],
            log=work / f"kube-proxy-{node.name}.log",
        ))  # fmt: skip
    return procs


def summary(name: str, result: dict[str, Any], extra: dict[str, float] | None = None) -> list[str]:
    rows = []
    for node, seen in result["latency"].items():
        lat = sorted(seen)
        p50 = statistics.median(lat) if lat else float("nan")
        p95 = lat[int(0.95 * (len(lat) - 1))] if lat else float("nan")
        cpu = result["cpu"][node]
        agent = f" (agent {extra[node]:.1f})" if extra else ""
        rows.append(
            f"| {name} | {node} | {len(lat)} | {p50 * 1000:.0f} | {p95 * 1000:.0f} | "
            f"{(max(lat) if lat else 0) * 1000:.0f} | {cpu:.1f}{agent} | "
            f"{result['rss'][node]:.0f} |"
        )
    return rows


async def run(args: argparse.Namespace, cluster: Cluster, work: Path) -> list[str]:
    api = ApiClient(endpoint=load_kubeconfig(cluster.plane.admin_kubeconfig), timeout=60.0)
    rows: list[str] = []
    try:
        nodes = [n.name for n in cluster.nodes]
        await create_all(api, args, nodes)
        want = args.services + 2  # + kubernetes and roll
        cluster.plane.kubectl("-n", NAMESPACE, "rollout", "status", "deployment/roll",
                              "--timeout=600s")  # fmt: skip
        if args.only in ("", "nodeagent"):
            took = wait_programmed(cluster, "nodeagent", want)
            say(f"nodeagent: {want} services on every node after {took:.0f} s more")
            pids = {n.name: [n.agent_pid or 0] for n in cluster.nodes}
            result = await roll(api, cluster, pids, label="nodeagent", limit=args.timeout)
            say(f"nodeagent roll: {result['seconds']:.0f} s, {result['missed']} changes unseen")
            rows += summary("nodeagent (agent)", result)
        if args.only in ("", "kube-proxy"):
            stop_proxy_in_agents(cluster)
            procs = start_kube_proxies(cluster, work)
            try:
                took = wait_programmed(cluster, "kube-proxy", want)
                say(f"kube-proxy: {want} services on every node after {took:.0f} s")
                pids = {n.name: [p.pid] for n, p in zip(cluster.nodes, procs, strict=True)}
                agents = {n.name: [n.agent_pid or 0] for n in cluster.nodes}
                a0 = {n: cpu_seconds(ps[0]) for n, ps in agents.items()}
                result = await roll(api, cluster, pids, label="kube-proxy", limit=args.timeout)
                agent_cpu = {n: cpu_seconds(ps[0]) - a0[n] for n, ps in agents.items()}
                say(f"kube-proxy roll: {result['seconds']:.0f} s, {result['missed']} unseen")
                rows += summary("kube-proxy", result, agent_cpu)
            finally:
                for p in procs:
                    p.stop(timeout=15)
                for node in cluster.nodes:
                    node.run("nft", "delete", "table", "ip", "kube-proxy", check=False)
    finally:
        await api.aclose()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--services", type=int, default=1000)
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument("--replicas", type=int, default=30)
    parser.add_argument("--only", default="", choices=("", "nodeagent", "kube-proxy"))
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    load = os.getloadavg()[0]
    with multinode_cluster(count=3) as cluster:
        work = cluster.directory / "bench"
        work.mkdir(parents=True, exist_ok=True)
        rows = asyncio.run(run(args, cluster, work))
    print(
        f"\nmachine: {platform.node()} {os.cpu_count()} cores, load {load:.1f} at start; "
        f"{datetime.date.today()}; {args.services} Services x {args.endpoints} endpoints, "
        f"a {args.replicas}-replica Deployment rolled\n"
    )
    print(
        "| proxy | node | endpoint changes timed | p50 ms | p95 ms | max ms | "
        "proxy CPU s during the roll | RSS MiB |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
    raise SystemExit(130)
