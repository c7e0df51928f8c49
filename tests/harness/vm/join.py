"""The guest joins the host's cluster with `nodeagent join`, as a new machine joins with kubeadm.

Nothing is copied into the guest but the join command the control plane prints (a bootstrap
token and the CA's hash): `provision.sh --join` runs `nodeagent join`, which verifies
`cluster-info`, downloads the cluster's kubelet configuration (`kube-system/kubelet-config`),
writes the bootstrap kubeconfig and its flags, restarts the packaged service and waits for TLS
bootstrap. Then the guest's kubelet-serving CSR is approved, as an operator approves it (the
cluster's kubelet configuration sets `serverTLSBootstrap`).

Networking: the join command names the apiserver as the cluster advertises it
(`198.18.0.1:<port>`, in `cluster-info` too, so also in the bootstrap and node kubeconfigs),
and qemu's restricted user network only forwards `10.0.2.100:6443` (``relay.py``; qemu takes
no `guestfwd` outside its own /24). :func:`route_apiserver` points that forward at the
control plane and gives the guest a route to the advertised address: a DNAT of
`198.18.0.1:<port>` to the forward in an nftables table of the harness's own
(``nodeagent-test-apiserver``, output hook: the guest's own connections). On a real network
that address is simply routed; pod traffic between guest and host needs the cluster's CNI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from harness.controlplane import ControlPlane
from harness.join_up import approve_serving_csr
from harness.vm.guest import is_active, provision
from harness.vm.machine import APISERVER_GUEST_PORT, Machine
from harness.vm.rootfs import APISERVER_IP, GUEST_IP

APISERVER_TABLE: Final = "nodeagent-test-apiserver"
JOIN_FLAGS: Final = "/var/lib/nodeagent/join-flags.env"
NODE_KUBECONFIG: Final = "/etc/nodeagent/kubeconfig"
SERVING_PAIR: Final = "/var/lib/nodeagent/pki/kubelet-server-current.pem"
JOIN_TIMEOUT_S: Final = 600.0


def route_apiserver(vm: Machine, control_plane: ControlPlane) -> None:
    """The guest reaches the control plane's advertised address (idempotent, survives nothing:
    call it again after a guest reboot)."""
    server = urlsplit(control_plane.server)
    assert server.hostname and server.port
    vm.forward_apiserver(server.hostname, server.port)
    rules = (
        f"table ip {APISERVER_TABLE}\n"
        f"delete table ip {APISERVER_TABLE}\n"
        f"table ip {APISERVER_TABLE} {{\n"
        "  chain output {\n"
        "    type nat hook output priority -100; policy accept;\n"
        f"    ip daddr {server.hostname} tcp dport {server.port}"
        f" dnat to {APISERVER_IP}:{APISERVER_GUEST_PORT}\n"
        "  }\n"
        "}\n"
    )
    vm.check(["nft", "-f", "-"], input=rules.encode())


def joined(vm: Machine) -> bool:
    """The agent runs from a join: its flags file is there and TLS bootstrap wrote the node's
    kubeconfig with the issued certificate (not a copied one)."""
    return (
        is_active(vm)
        and vm.run(f"test -s {JOIN_FLAGS}").rc == 0
        and vm.run(f"grep -q 'client-certificate: /var/lib/nodeagent/pki/' {NODE_KUBECONFIG}").rc
        == 0
    )


def join_guest(
    vm: Machine, deb: Path, control_plane: ControlPlane, *provision_args: str, node: str
) -> str:
    """Provision the guest and join it as ``node``; returns provision.sh's output.

    A Node of that name left from an earlier join is deleted first (kubeadm refuses to join
    over a Ready Node of the same name, and an operator re-joining a machine deletes it)."""
    route_apiserver(vm, control_plane)
    # An agent still running in the guest (an earlier join) would register the Node again
    # within seconds of its deletion, and the join would find it Ready: stop it first.
    vm.run("systemctl stop nodeagent.service")
    control_plane.kubectl("delete", "node", node, "--ignore-not-found", check=False)
    command = control_plane.join_command().split()
    assert command[:2] == ["nodeagent", "join"], command
    # A join restarts the agent (Type=notify) and waits for TLS bootstrap: under TCG on a busy
    # host that alone has taken minutes, so more than provisioning's usual 300 s.
    out = provision(
        vm, deb, "--join", " ".join(command[2:]), "--node-name", node, "--node-ip", GUEST_IP,
        *provision_args, timeout=JOIN_TIMEOUT_S,
    )  # fmt: skip
    # The agent asks for its serving certificate once it knows its addresses (registration);
    # one that kept its pair from an earlier join asks for nothing.
    approve_serving_csr(
        control_plane,
        node,
        timeout=JOIN_TIMEOUT_S,
        waiting=lambda: is_active(vm) and vm.run(f"test -s {SERVING_PAIR}").rc != 0,
    )
    return out
