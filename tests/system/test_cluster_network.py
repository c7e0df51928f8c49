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

import pytest
from harness import nodenet, podtraffic
from harness.multinode import Cluster
from harness.testcluster import multinode_cluster
from harness.vm import Image, Machine
from harness.vm.clusternode import LINK_MAC, join_cluster
from harness.vm.pods import NODE
from harness.vm.qemu import TapNic

pytestmark = [pytest.mark.system, pytest.mark.vmcluster]

# The module's fixture builds a cluster, boots a second VM and joins it (a join alone has
# taken minutes under TCG on a busy host): more than the tier's per-test 1200 s.
SETUP_TIMEOUT_S = 2400


@dataclass
class Linked:
    cluster: Cluster
    vm: Machine
    node: str
    ip: str


def _ready_node(cluster: Cluster, name: str) -> bool:
    node = podtraffic.node_object(cluster.plane, name)
    conditions = node["status"].get("conditions", []) if node else []
    return {c["type"]: c["status"] for c in conditions}.get("Ready") == "True"


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
            _wait(
                vm,
                lambda: podtraffic.flannel_took(cluster.plane, NODE),
                "flanneld's subnet lease",
                600,
            )
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


@pytest.mark.timeout(SETUP_TIMEOUT_S)
def test_the_joined_guest_runs_flannel_from_the_daemonset(linked: Linked) -> None:
    plane = linked.cluster.plane
    node = plane.get_json("node", linked.node)
    addresses = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
    assert addresses == [linked.ip]
    assert node["metadata"]["annotations"][podtraffic.PUBLIC_IP] == linked.ip
    flannel = podtraffic.flannel_pods(plane, linked.node)
    assert len(flannel) == 1 and podtraffic.is_ready(flannel[0]), flannel
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
    seen = podtraffic.reach_both_ways(
        linked.cluster.plane,
        namespace,
        host_node=linked.cluster.nodes[0].name,
        guest_node=linked.node,
        read=lambda path: linked.vm.check(f"cat {path}"),
    )
    # host's node -> guest: the guest's pod by its IP, and the ClusterIP whose only endpoint
    # is on the guest
    assert seen.from_host == {"pod IP": "web-guest", "ClusterIP": "web-guest"}, seen.from_host
    # guest -> host's node: the client pod on the guest got both answers
    assert seen.from_guest == seen.expected_from_guest, seen.client_log
    assert seen.client_phase == "Succeeded"
