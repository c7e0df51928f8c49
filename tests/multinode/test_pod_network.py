"""Three nodeagent nodes with flannel between them, as a user of `make up NODES=3` sees them:
every node Ready with a pod CIDR of its own, a Deployment spread over the nodes whose pods all
reach each other by IP, the apiserver reaching a pod on each node, a ClusterIP reached from a
node that has none of its endpoints, and a hostPort answering on the node's IP through the
portmap plugin."""

from __future__ import annotations

import secrets
import urllib.request
from collections.abc import Iterator

import pytest
from harness.multinode import Cluster
from mnpods import (
    apply,
    by_node,
    condition,
    deployment,
    fetch,
    live,
    node_obj,
    pods,
    ready,
    wait,
    web_pod_spec,
)

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(900)]


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    name = f"mn-{secrets.token_hex(3)}"
    cluster.plane.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        cluster.plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.mark.smoke
def test_three_nodes_are_ready_each_with_its_own_pod_cidr_and_address(cluster: Cluster) -> None:
    cidrs = {}
    for node in cluster.nodes:
        obj = node_obj(cluster.plane, node.name)
        assert condition(obj)["status"] == "True", condition(obj)
        assert [a["address"] for a in obj["status"]["addresses"] if a["type"] == "InternalIP"] == [
            node.ip
        ]
        assert obj["metadata"]["annotations"]["flannel.alpha.coreos.com/public-ip"] == node.ip
        cidrs[node.name] = obj["spec"]["podCIDR"]
        # a node is a machine of its own: its hostname is the node's name
        assert node.run("hostname").stdout.strip() == node.name
        # the runtime was handed the Node's pod CIDR (UpdateRuntimeConfig)
        log = node.agent_log.read_text()
        assert f"newPodCIDR={cidrs[node.name]}" in log
    assert len(set(cidrs.values())) == 3, cidrs


@pytest.mark.smoke
def test_a_deployment_spreads_and_every_pod_reaches_every_other_by_ip(
    cluster: Cluster, namespace: str
) -> None:
    plane = cluster.plane
    apply(plane, deployment("web", namespace, 6))
    items = wait(
        "6 ready web pods",
        lambda: (
            (got := live(pods(plane, namespace, "app=web")))
            and len(got) == 6
            and all(ready(p) for p in got)
            and got
        ),
        within=180,
    )
    spread = by_node(items)
    assert set(spread) == {n.name for n in cluster.nodes}, spread
    names = sorted(items, key=lambda p: p["spec"]["nodeName"])
    matrix = []
    failures = []
    for src in names:
        row = []
        for dst in names:
            body = fetch(
                plane, namespace, src["metadata"]["name"], f"http://{dst['status']['podIP']}:8080/"
            )
            ok = body == dst["metadata"]["name"]
            row.append("ok" if ok else "--")
            if not ok:
                failures.append((src["metadata"]["name"], dst["metadata"]["name"], body))
        matrix.append(row)
    header = [f"{p['spec']['nodeName']}/{p['status']['podIP']}" for p in names]
    lines = ["from \\ to".ljust(26) + " ".join(h.rjust(24) for h in header)]
    for h, row in zip(header, matrix, strict=True):
        lines.append(h.ljust(26) + " ".join(cell.rjust(24) for cell in row))
    print("\npod-to-pod matrix (wget http://<pod IP>:8080/ from each pod):\n" + "\n".join(lines))
    assert not failures, failures


@pytest.mark.smoke
def test_the_apiserver_reaches_a_pod_on_every_node(cluster: Cluster, namespace: str) -> None:
    """The control plane is in the pod network, as a real one: `pods/proxy` (and so webhooks
    and aggregated APIs, dialled at their pod IPs) reaches a pod on any node."""
    plane = cluster.plane
    apply(
        plane,
        *(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"on-{node.name}", "namespace": namespace},
                "spec": web_pod_spec(nodeName=node.name),
            }
            for node in cluster.nodes
        ),
    )
    wait(
        "a ready pod on every node",
        lambda: (
            len(got := pods(plane, namespace)) == len(cluster.nodes) and all(ready(p) for p in got)
        ),
        within=120,
    )
    for node in cluster.nodes:
        path = f"/api/v1/namespaces/{namespace}/pods/on-{node.name}:8080/proxy/"
        out = plane.kubectl("get", "--raw", path, check=False)
        assert out.stdout.strip() == f"on-{node.name}", (node.name, out.stdout, out.stderr)


def test_a_cluster_ip_whose_only_endpoint_is_on_another_node_answers(
    cluster: Cluster, namespace: str
) -> None:
    plane = cluster.plane
    first, last = cluster.nodes[0], cluster.nodes[-1]
    server = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "server", "namespace": namespace, "labels": {"app": "server"}},
        "spec": web_pod_spec(nodeName=last.name),
    }
    client = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "client", "namespace": namespace},
        "spec": web_pod_spec(nodeName=first.name),
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "server", "namespace": namespace},
        "spec": {"selector": {"app": "server"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    apply(plane, server, client, service)
    wait(
        "both pods ready",
        lambda: len(got := pods(plane, namespace)) == 2 and all(ready(p) for p in got),
        within=120,
    )
    ip = plane.get_json("service", "server", "-n", namespace)["spec"]["clusterIP"]
    body = wait(
        f"the ClusterIP {ip} from {first.name}",
        lambda: fetch(plane, namespace, "client", f"http://{ip}/"),
        within=60,
    )
    assert body == "server"


def test_a_host_port_answers_on_the_nodes_ip(cluster: Cluster, namespace: str) -> None:
    plane = cluster.plane
    node = cluster.nodes[1]
    spec = web_pod_spec(nodeName=node.name)
    spec["containers"][0]["ports"] = [{"containerPort": 8080, "hostPort": 18080}]
    apply(
        plane,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "hostport", "namespace": namespace},
            "spec": spec,
        },
    )
    wait(
        "the hostPort pod ready",
        lambda: all(ready(p) for p in pods(plane, namespace)) and pods(plane, namespace),
        within=120,
    )

    def get() -> str | None:
        try:
            with urllib.request.urlopen(f"http://{node.ip}:18080/", timeout=3) as response:
                return str(response.read().decode().strip())
        except OSError:
            return None

    assert wait(f"{node.ip}:18080 from the host", get, within=30) == "hostport"
    other = cluster.nodes[0].run("busybox", "wget", "-q", "-O", "-", f"http://{node.ip}:18080/")
    assert other.stdout.strip() == "hostport"
