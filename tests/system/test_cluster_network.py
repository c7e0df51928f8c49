"""The guest as a node of a real multi-node cluster: the packaged agent joins the host's cluster
with `nodeagent join`, runs the CNI DaemonSet's pod (flannel), and pods on the guest and on a
node of the host reach each other by pod IP and through a ClusterIP, both ways.

The cluster is a 1-node test cluster of its own (`harness.testcluster`: control plane and
registry on 198.18.0.1, node-1 in a network namespace, flannel); the guest is its second node,
on a routed tap link made like a netns node's (`harness.vm.clusternode`). What a user sees: the
Node Ready with the link's address, flannel's pod running on it, the pods' answers (from the
host's node through `kubectl exec`, from the guest in its client pod's log on the node).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import nodenet
from harness.multinode import Cluster
from harness.testcluster import multinode_cluster
from harness.vm import Image, Machine
from harness.vm.clusternode import LINK_MAC, join_cluster
from harness.vm.pods import NODE, wait_pod
from harness.vm.qemu import TapNic

pytestmark = [pytest.mark.system, pytest.mark.vmcluster]

# The module's fixture builds a cluster, boots a second VM and joins it (a join alone has
# taken minutes under TCG on a busy host): more than the tier's per-test 1200 s.
SETUP_TIMEOUT_S = 2400
PUBLIC_IP = "flannel.alpha.coreos.com/public-ip"
WEB = "echo $(hostname) > /tmp/index.html; exec httpd -f -p 8080 -h /tmp"


@dataclass
class Linked:
    cluster: Cluster
    vm: Machine
    node: str
    ip: str


def _node(cluster: Cluster, name: str) -> dict[str, Any] | None:
    got = cluster.plane.kubectl("get", "node", name, "-o", "json", check=False)
    return yaml.safe_load(got.stdout) if got.returncode == 0 else None


def _ready_node(cluster: Cluster, name: str) -> bool:
    node = _node(cluster, name)
    conditions = node["status"].get("conditions", []) if node else []
    return {c["type"]: c["status"] for c in conditions}.get("Ready") == "True"


def _flannel_pods(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    pods = cluster.plane.get_json("pods", "-n", "kube-flannel")["items"]
    return [p for p in pods if p["spec"].get("nodeName") == name]


def _flannel_took(cluster: Cluster, name: str) -> bool:
    """flanneld on the node has leased its subnet (it annotates the Node with its public IP)
    and its pod is Ready, as `kubectl rollout status` waits for. The Node is Ready before that:
    flannel's init container writes the CNI config (the runtime's network is then ready)
    before flanneld starts."""
    node = _node(cluster, name)
    if node is None or PUBLIC_IP not in node["metadata"].get("annotations", {}):
        return False
    return any(_is_ready(p) for p in _flannel_pods(cluster, name))


def _wait(vm: Machine, ok: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            journal = vm.run("journalctl -u nodeagent --no-pager -n 40").stdout
            raise AssertionError(f"{NODE}: {what} not seen within {timeout:.0f} s:\n{journal}")
        time.sleep(2)


@pytest.fixture(scope="module")
def linked(
    vm_image: Image, nodeagent_deb: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Linked]:
    logs = tmp_path_factory.mktemp("linked-cluster-logs")
    with multinode_cluster(count=1, log_dir=logs) as cluster:
        addr = nodenet.NodeAddr(cluster.index, len(cluster.nodes) + 1)
        tap = TapNic(ifname=nodenet.add_vm_link(addr), mac=LINK_MAC)
        vm = Machine(image=vm_image, run_dir=tmp_path_factory.mktemp("vm-linked"), taps=(tap,))
        try:
            vm.start()
            vm.wait_for_boot()
            join_cluster(
                vm,
                nodeagent_deb,
                cluster.plane,
                addr=addr,
                registry_host=cluster.registry_host,
                node=NODE,
            )
            _wait(vm, lambda: _ready_node(cluster, NODE), "Ready after its join", 600)
            _wait(vm, lambda: _flannel_took(cluster, NODE), "flanneld's subnet lease", 600)
            yield Linked(cluster=cluster, vm=vm, node=NODE, ip=addr.ip)
        finally:
            vm.close()
            nodenet.remove_node(addr)


@pytest.fixture
def namespace(linked: Linked) -> Iterator[str]:
    name = f"vmnet-{secrets.token_hex(3)}"
    linked.cluster.plane.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        linked.cluster.plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _apply(linked: Linked, *objects: dict[str, Any]) -> None:
    doc = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
    linked.cluster.plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))


def _pod(name: str, namespace: str, node: str, command: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", command],
                }
            ],
            **spec,
        },
    }


def _web(name: str, namespace: str, node: str) -> dict[str, Any]:
    pod = _pod(name, namespace, node, WEB)
    pod["spec"]["containers"][0]["readinessProbe"] = {
        "tcpSocket": {"port": 8080},
        "periodSeconds": 1,
    }
    return pod


def _service(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]},
    }


def _is_ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in pod.get("status", {}).get("conditions", [])
    )


@pytest.mark.timeout(SETUP_TIMEOUT_S)
def test_the_joined_guest_runs_flannel_from_the_daemonset(linked: Linked) -> None:
    plane = linked.cluster.plane
    node = plane.get_json("node", linked.node)
    addresses = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
    assert addresses == [linked.ip]
    assert node["metadata"]["annotations"][PUBLIC_IP] == linked.ip
    flannel = _flannel_pods(linked.cluster, linked.node)
    assert len(flannel) == 1 and _is_ready(flannel[0]), flannel
    # flannel's DaemonSet, not provisioning, gave the guest its pod network: its CNI config,
    # its plugin beside Debian's, and the Node's podCIDR as its subnet
    conf = linked.vm.check("ls /etc/cni/net.d").split()
    assert conf == ["10-flannel.conflist"], conf
    linked.vm.check("test -x /opt/cni/bin/flannel")
    subnet = linked.vm.check("cat /run/flannel/subnet.env")
    cidr = node["spec"]["podCIDR"]
    assert f"FLANNEL_SUBNET={cidr.rsplit('.', 1)[0]}.1/" in subnet, (cidr, subnet)


def test_pods_on_the_guest_and_on_the_hosts_node_reach_each_other_both_ways(
    linked: Linked, namespace: str
) -> None:
    plane = linked.cluster.plane
    host_node = linked.cluster.nodes[0].name
    _apply(
        linked,
        _web("web-host", namespace, host_node),
        _web("web-guest", namespace, linked.node),
        _service("web-host", namespace),
        _service("web-guest", namespace),
    )
    pods = {
        name: wait_pod(plane, name, _is_ready, namespace=namespace, timeout=300, what="Ready")
        for name in ("web-host", "web-guest")
    }
    ips = {name: pod["status"]["podIP"] for name, pod in pods.items()}
    cluster_ips = {
        name: plane.get_json("service", name, "-n", namespace)["spec"]["clusterIP"]
        for name in ("web-host", "web-guest")
    }

    # host's node -> guest: the guest's pod by its IP, and the ClusterIP whose only endpoint
    # is on the guest
    from_host = {
        target: _fetch_from(plane, namespace, "web-host", url)
        for target, url in (
            ("pod IP", f"http://{ips['web-guest']}:8080/"),
            ("ClusterIP", f"http://{cluster_ips['web-guest']}/"),
        )
    }
    assert from_host == {"pod IP": "web-guest", "ClusterIP": "web-guest"}, from_host

    # guest -> host's node: a client pod on the guest fetches both and logs what it got
    # (`timeout 3 wget`, not `wget -T 3`: Debian 12's static busybox 1.35 wget segfaults with -T)
    urls = [f"http://{ips['web-host']}:8080/", f"http://{cluster_ips['web-host']}/"]
    script = (
        "for u in " + " ".join(urls) + "; do ok=; for i in $(seq 30); do "
        'if b=$(timeout 3 wget -q -O - "$u"); then echo "GOT $u $b"; ok=1; break; fi; '
        "sleep 1; done; "
        '[ -n "$ok" ] || { echo "FAILED $u"; exit 1; }; done'
    )
    _apply(linked, _pod("client", namespace, linked.node, script, restartPolicy="Never"))
    client = wait_pod(
        plane,
        "client",
        lambda p: p.get("status", {}).get("phase") in {"Succeeded", "Failed"},
        namespace=namespace,
        timeout=300,
        what="the client pod to finish",
    )
    uid = client["metadata"]["uid"]
    log = linked.vm.check(f"cat /var/log/pods/{namespace}_client_{uid}/c/0.log")
    got = [line.split(" F ", 1)[1] for line in log.splitlines() if " F " in line]
    assert got == [f"GOT {u} web-host" for u in urls], log
    assert client["status"]["phase"] == "Succeeded"


def _fetch_from(plane: Any, namespace: str, pod: str, url: str, within: float = 60) -> str | None:
    """GET `url` from inside `pod` (busybox wget), retried until it answers or `within` ends."""
    deadline = time.monotonic() + within
    while True:
        done = plane.kubectl(
            "exec", "-n", namespace, pod, "--", "timeout", "3", "wget", "-q", "-O", "-", url,
            check=False,
        )  # fmt: skip
        if done.returncode == 0:
            return str(done.stdout.strip())
        if time.monotonic() > deadline:
            return None
        time.sleep(1)
