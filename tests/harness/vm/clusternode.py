"""The guest as one more node of a multi-node test cluster (`harness.multinode`), as a machine
that joins a kubeadm cluster: linked to the others, pulling from the cluster's registry, joined
with the printed join command, its pod network from the cluster's CNI DaemonSet (flannel).

    addr = nodenet.NodeAddr(cluster.index, len(cluster.nodes) + 1)
    tap = TapNic(ifname=nodenet.add_vm_link(addr), mac=LINK_MAC)
    vm = Machine(image=..., run_dir=..., taps=(tap,)); vm.start(); vm.wait_for_boot()
    join_cluster(vm, deb, cluster.plane, addr=addr, registry_host=cluster.registry_host)

- the link (:func:`link_script`): the NIC on the tap gets ``<addr.ip>/32 peer <gateway>`` and
  the default route, as a netns node's ``eth0``; flannel takes the default route's interface
  as its public one, so its VXLAN runs over this link. The apiserver and the registry are at
  198.18.0.1 on the host, reached directly (no relay, no DNAT). qemu's user-mode NIC stays
  (nothing is routed through it any more). Set by ``ip``: it survives no guest reboot.
- images (:func:`put_registry_hosts`): one ``hosts.toml`` per upstream registry
  (``harness.mirrors``), installed by ``provision.sh --registry-hosts`` as containerd's
  ``config_path``, so ``busybox``, flannel's images and the sandbox's pause image are pulled
  from the cluster's registry as on the netns nodes.
- the join: ``provision.sh --join`` with ``--no-pod-network`` (no fallback bridge network:
  flannel's DaemonSet writes ``/etc/cni/net.d/10-flannel.conflist`` and copies its plugin into
  ``/opt/cni/bin``, the link to Debian's ``/usr/lib/cni``; until then the Node is NotReady with
  the runtime's network not ready, as on any kubeadm node before its CNI).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Final

from harness import mirrors, nodenet
from harness.controlplane import ControlPlane
from harness.vm.guest import provision
from harness.vm.join import JOIN_TIMEOUT_S
from harness.vm.machine import Machine
from harness.vm.rootfs import GATEWAY_IP

LINK_MAC: Final = "52:54:00:6e:61:02"  # the guest's NIC on the cluster link
REGISTRY_HOSTS: Final = "/root/provision/registry-hosts"  # provision.sh --registry-hosts


def link_script(addr: nodenet.NodeAddr, mac: str = LINK_MAC) -> str:
    """A guest shell script: the NIC with ``mac`` becomes the node's link to the host."""
    ip, gw = addr.ip, addr.gateway
    return "\n".join(
        [
            "set -eu",
            "dev=''",
            "for d in /sys/class/net/*; do",
            f'  [ "$(cat "$d/address")" = {shlex.quote(mac)} ] && dev=${{d##*/}}',
            "done",
            f'[ -n "$dev" ] || {{ echo "no NIC with MAC {mac}" >&2; exit 1; }}',
            f'ip addr replace {ip}/32 peer {gw}/32 dev "$dev"',
            'ip link set "$dev" up',
            f"ip route del default via {GATEWAY_IP} 2>/dev/null || true",
            f'ip route replace default via {gw} dev "$dev"',
            'echo "$dev"',
        ]
    )


def link_guest(vm: Machine, addr: nodenet.NodeAddr) -> str:
    """Configure the guest's end of the link; returns the guest's device name."""
    return vm.check(link_script(addr)).strip()


def put_registry_hosts(vm: Machine, registry_host: str) -> str:
    """Hosts files that send every mirrored registry to `registry_host`, put in the guest for
    ``provision.sh --registry-hosts``; returns their directory."""
    for upstream in mirrors.MIRRORED_REGISTRIES:
        text = mirrors.render_hosts_toml(upstream, registry_host)
        vm.put(f"{REGISTRY_HOSTS}/{upstream}/hosts.toml", text.encode())
    return REGISTRY_HOSTS


def join_cluster(
    vm: Machine,
    deb: Path,
    plane: ControlPlane,
    *,
    addr: nodenet.NodeAddr,
    registry_host: str,
    node: str,
) -> str:
    """Link the guest, point its containerd at the registry, and join it as `node` with the
    cluster's printed join command; returns provision.sh's output."""
    link_guest(vm, addr)
    hosts = put_registry_hosts(vm, registry_host)
    command = plane.join_command().split()
    assert command[:2] == ["nodeagent", "join"], command
    return provision(
        vm, deb, "--join", " ".join(command[2:]), "--node-name", node, "--node-ip", addr.ip,
        "--no-pod-network", "--registry-hosts", hosts, timeout=JOIN_TIMEOUT_S,
    )  # fmt: skip
