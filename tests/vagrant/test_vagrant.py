"""The project's Vagrantfile, run for real: vagrant-libvirt, qemu without KVM, the local box.

What the README's "Try it in a Vagrant VM" section tells a user to run is what this test runs,
against a multi-node test cluster (`harness.testcluster`: control plane and registry on
198.18.0.1, node-1 in a network namespace, flannel's DaemonSet): ``vagrant up`` (the
Vagrantfile's provisioner is ``provision.sh`` with the project's .deb, the join command the
control plane printed, the cluster's registry mirrors and no pod network of its own:
``nodeagent join`` in the box, TLS bootstrap), the node joins and turns Ready (read from the
apiserver), flannel's DaemonSet pod runs on it, ``vagrant ssh`` sees the service active with
join's flags and an issued certificate; pods on the box and on node-1 reach each other by pod
IP and through a ClusterIP, both ways (`harness.podtraffic`); ``vagrant destroy -f`` leaves no
domain and no volume behind. libvirt is started by the test when no daemon runs (the CI host
has no systemd), and everything libvirt holds that appeared during the test is removed at the
end, so the host is as before: no domain, volume, network or pool, no qemu, dnsmasq or libvirtd
process.

The box is on the Vagrantfile's routed libvirt network (``NODEAGENT_LIBVIRT_NETWORK=routed``:
198.18.15.0/24, no NAT), so node-1 reaches it and it node-1, as flannel's VXLAN needs; the
cluster's forwarding guard (`harness.nodenet`) lets that network and the node links talk and
nothing of either leave the machine. The box reaches the apiserver and the registry at
198.18.0.1 (the harness's /32 on the host's ``lo``) through its default route, the host's
address on that network.
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness import mirrors, nodenet, podtraffic
from harness.controlplane import ControlPlane
from harness.testcluster import multinode_cluster
from harness.vagrant.box import BOX_NAME, box_name
from harness.vagrant.libvirt import (
    Inventory,
    LibvirtHost,
    is_alive,
    libvirt_host,
    processes_matching,
)
from harness.versions import cache_dir
from harness.vm import Image

pytestmark = pytest.mark.vagrant

REPO = Path(__file__).resolve().parents[2]
NODE = "nodeagent-vagrant"
# vagrant-libvirt names the domain <directory of the Vagrantfile>_<machine>.
DOMAIN = f"{REPO.name}_default"
LIBVIRT_DEFINITIONS = (
    Path("/etc/libvirt/qemu/networks/nodeagent-routed.xml"),
    Path("/etc/libvirt/storage/default.xml"),
)
UP_TIMEOUT_S = 1200.0
READY_TIMEOUT_S = 240.0
FLANNEL_TIMEOUT_S = 600.0


def vagrant_env(
    tmp_path: Path, deb: Path, box: str, join_command: str, registry_hosts: Path
) -> dict[str, str]:
    """The environment the README's instructions set, plus where vagrant keeps its state."""
    return {
        **os.environ,
        "VAGRANT_CWD": str(REPO),
        "VAGRANT_HOME": str(cache_dir() / "vagrant" / "home"),  # the added box stays cached
        "VAGRANT_DOTFILE_PATH": str(tmp_path / "dot-vagrant"),  # not in the worktree
        "VAGRANT_DEFAULT_PROVIDER": "libvirt",
        "VAGRANT_CHECKPOINT_DISABLE": "1",  # no version check over the network
        "VAGRANT_NO_COLOR": "1",
        "NODEAGENT_VAGRANT_BOX": box,
        "NODEAGENT_LIBVIRT_DRIVER": "qemu",
        "NODEAGENT_DEB": str(deb),
        "NODEAGENT_JOIN": join_command,
        "NODEAGENT_NODE_NAME": NODE,
        "NODEAGENT_LIBVIRT_NETWORK": "routed",
        "NODEAGENT_POD_NETWORK": "daemonset",
        "NODEAGENT_REGISTRY_HOSTS": str(registry_hosts),
    }


class Vagrant:
    def __init__(self, env: dict[str, str], log: Path, say: Callable[[str], None]) -> None:
        self.env = env
        self.log = log
        self.say = say

    def __call__(self, *args: str, timeout: float = 300.0, check: bool = True) -> str:
        started = time.monotonic()
        with open(self.log, "a") as log:
            log.write(f"\n$ vagrant {' '.join(args)}\n")
            log.flush()
            done = subprocess.run(
                ["vagrant", *args], env=self.env, cwd=REPO, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False,
            )  # fmt: skip
            log.write(done.stdout)
        self.say(f"vagrant {args[0]}: exit {done.returncode} in {time.monotonic() - started:.0f}s")
        if check and done.returncode != 0:
            raise AssertionError(
                f"vagrant {' '.join(args)} exited {done.returncode}:\n{done.stdout[-6000:]}"
            )
        return done.stdout

    def ensure_box(self, name: str, box: Path) -> None:
        """Add the local box under `name` once; drop boxes of older builds from VAGRANT_HOME."""
        listed = self("box", "list", "--machine-readable")
        names = {line.split(",")[3] for line in listed.splitlines() if ",box-name," in line}
        for old in sorted(names):
            if old.startswith(f"{BOX_NAME}-") and old != name:
                self("box", "remove", "--force", "--all", old, timeout=120)
        if name not in names:
            self("box", "add", "--name", name, str(box), timeout=600)


def node(control_plane: ControlPlane) -> dict[str, Any] | None:
    done = control_plane.kubectl("get", "node", NODE, "-o", "json", check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


def ready_condition(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    if obj is None:
        return None
    conditions = obj.get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == "Ready"), None)


def wait_ready(control_plane: ControlPlane, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    last: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        last = node(control_plane)
        cond = ready_condition(last)
        if cond is not None and cond["status"] == "True":
            assert last is not None
            return last
        time.sleep(2)
    raise AssertionError(f"node {NODE} not Ready after {timeout:.0f}s: {ready_condition(last)}")


def assert_joined(ready: dict[str, Any]) -> str:
    """The Node the VM's agent registered, as the apiserver holds it; returns its address."""
    assert ready["metadata"]["labels"]["kubernetes.io/hostname"] == NODE
    info = ready["status"]["nodeInfo"]
    assert info["osImage"].startswith("Debian GNU/Linux 12")
    assert info["containerRuntimeVersion"].startswith("containerd://")
    condition = ready_condition(ready)
    assert condition is not None and condition["reason"] == "KubeletReady"
    addresses = [a["address"] for a in ready["status"]["addresses"] if a["type"] == "InternalIP"]
    assert len(addresses) == 1, addresses
    routed = ipaddress.ip_network(nodenet.ROUTED_VM_NETWORK)
    assert ipaddress.ip_address(addresses[0]) in routed, addresses
    return str(addresses[0])


def wait_flannel(control_plane: ControlPlane, vagrant: Vagrant, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not podtraffic.flannel_took(control_plane, NODE):
        if time.monotonic() > deadline:
            pods = podtraffic.flannel_pods(control_plane, NODE)
            journal = vagrant(
                "ssh", "-c", "sudo journalctl -u nodeagent --no-pager -n 40", check=False
            )
            raise AssertionError(
                f"flannel did not take {NODE} within {timeout:.0f}s: "
                f"{[p.get('status') for p in pods]}\nnodeagent journal in the VM:\n{journal}"
            )
        time.sleep(2)


def assert_pods_reach_each_other(control_plane: ControlPlane, vagrant: Vagrant, host: str) -> None:
    """A pod on node-1 reaches the box's by pod IP and ClusterIP, a pod on the box node-1's."""
    namespace = f"vagrant-{secrets.token_hex(3)}"
    control_plane.kubectl("create", "namespace", namespace)
    try:
        seen = podtraffic.reach_both_ways(
            control_plane,
            namespace,
            host_node=host,
            guest_node=NODE,
            read=lambda path: vagrant("ssh", "-c", f"sudo cat {path}"),
        )
    finally:
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    assert seen.from_host == {"pod IP": "web-guest", "ClusterIP": "web-guest"}, seen.from_host
    assert seen.from_guest == seen.expected_from_guest, seen.client_log
    assert seen.client_phase == "Succeeded"


def assert_flannel_installed_the_network(vagrant: Vagrant) -> None:
    """flannel's DaemonSet, not provisioning, gave the box its pod network."""
    conf = vagrant("ssh", "-c", "sudo ls /etc/cni/net.d")
    assert "10-flannel.conflist" in conf.split(), conf
    assert "10-nodeagent-bridge.conflist" not in conf, conf


def assert_joined_in_the_box(vagrant: Vagrant) -> None:
    """Joined, not handed credentials: join's flags, the certificate TLS bootstrap got."""
    flags = vagrant("ssh", "-c", "sudo cat /var/lib/nodeagent/join-flags.env")
    assert f"--hostname-override={NODE}" in flags, flags
    issued = vagrant(
        "ssh", "-c", "sudo test -s /var/lib/nodeagent/pki/kubelet-client-current.pem"
        " && echo issued", check=False,
    )  # fmt: skip
    assert "issued" in issued.split(), issued


def test_vagrant_up_joins_a_node_whose_pods_reach_the_cluster_and_destroy_leaves_nothing(
    *,
    nodeagent_deb: Path,
    vm_image: Image,
    vagrant_box: Path,
    tmp_path: Path,
    say: Callable[[str], None],
    timings: dict[str, float],
) -> None:
    definitions_before = {path: path.exists() for path in LIBVIRT_DEFINITIONS}
    libvirt_chains_before = "LIBVIRT_" in _ruleset()
    started = time.monotonic()
    with multinode_cluster(count=1, log_dir=tmp_path / "cluster-logs") as cluster:
        timings["cluster"] = time.monotonic() - started
        plane = cluster.plane
        registry_hosts = tmp_path / "registry-hosts"
        mirrors.write_mirrors(registry_hosts, cluster.registry_host)
        env = vagrant_env(
            tmp_path, nodeagent_deb, box_name(vm_image), plane.join_command(), registry_hosts
        )
        vagrant = Vagrant(env, tmp_path / "vagrant.log", say)
        vagrant.ensure_box(box_name(vm_image), vagrant_box)
        with libvirt_host(tmp_path / "libvirt") as host:
            before, started_daemons = _up_use_destroy(
                plane, cluster.nodes[0].name, vagrant, host, timings
            )

    # The host's libvirt holds nothing the test made: definitions, daemons, helpers.
    if started_daemons:
        alive = [pid for pid in started_daemons.values() if is_alive(pid)]
        assert not alive, f"daemons the test started still run: {started_daemons}"
    else:
        assert Inventory.take() == before
    for path, existed in definitions_before.items():
        assert path.exists() == existed, f"{path} left behind"
    if not libvirt_chains_before:
        assert "LIBVIRT_" not in _ruleset(), "libvirt's firewall chains left behind"
    assert not processes_matching(f"guest={DOMAIN}", "/var/lib/libvirt/dnsmasq/nodeagent-routed")
    say(
        "cluster {cluster:.0f}s, box {box:.0f}s, up {up:.0f}s, Ready {ready:.0f}s and flannel"
        " {flannel:.0f}s after up began, pods both ways {pods:.0f}s, destroy {destroy:.0f}s"
        .format(**{"box": 0.0, **timings})
    )  # fmt: skip


def _up_use_destroy(
    plane: ControlPlane,
    host_node: str,
    vagrant: Vagrant,
    host: LibvirtHost,
    timings: dict[str, float],
) -> tuple[Inventory, dict[str, int]]:
    """`vagrant up`, the joined node checked and used, `vagrant destroy`; returns what the
    host's libvirt held before and the daemons the test started."""
    assert host.before is not None
    destroyed = False
    try:
        started = time.monotonic()
        vagrant("up", "--provider=libvirt", timeout=UP_TIMEOUT_S)
        timings["up"] = time.monotonic() - started
        assert DOMAIN in host.new_since_start().domains

        # The node registered from the VM and the apiserver sees it Ready.
        try:
            ready = wait_ready(plane, READY_TIMEOUT_S)
        except AssertionError as e:
            journal = vagrant(
                "ssh", "-c", "sudo journalctl -u nodeagent --no-pager -n 40", check=False
            )
            raise AssertionError(f"{e}\nnodeagent journal in the VM:\n{journal}") from None
        assert_joined(ready)
        timings["ready"] = time.monotonic() - started

        # The README's check: the service is active inside the VM.
        out = vagrant("ssh", "-c", "systemctl is-active nodeagent", timeout=120)
        assert "active" in out.split(), out  # ssh adds its "Connection ... closed." line
        assert_joined_in_the_box(vagrant)

        # The cluster's CNI DaemonSet runs on it, and pods reach each other both ways.
        wait_flannel(plane, vagrant, FLANNEL_TIMEOUT_S)
        timings["flannel"] = time.monotonic() - started
        assert_flannel_installed_the_network(vagrant)
        began = time.monotonic()
        assert_pods_reach_each_other(plane, vagrant, host_node)
        timings["pods"] = time.monotonic() - began

        domain_volumes = {
            (pool, vol) for pool, vol in host.new_since_start().volumes if DOMAIN in vol
        }
        assert domain_volumes, "no volume of the domain in libvirt's pool"
        started = time.monotonic()
        vagrant("destroy", "-f", timeout=300)
        destroyed = True
        timings["destroy"] = time.monotonic() - started

        left = host.new_since_start()
        assert DOMAIN not in left.domains
        assert not (left.volumes & domain_volumes), f"volumes left: {left.volumes}"
        assert not processes_matching(f"guest={DOMAIN}")
    finally:
        if not destroyed:
            vagrant("destroy", "-f", timeout=300, check=False)
        plane.kubectl("delete", "node", NODE, "--ignore-not-found", check=False)
    return host.before, dict(host.started)


def _ruleset() -> str:
    return subprocess.run(
        ["nft", "list", "ruleset"], capture_output=True, text=True, check=True
    ).stdout
