"""The CNI network the private containerd gives pods: a bridge with host-local IPAM.

`write_conflist` writes one conflist (bridge + portmap) into the containerd's private conf dir.
The bridge (`na-cni0` by default; `na-` marks the harness's devices) is the pods' gateway and
does not masquerade (`ipMasq: false`): pod traffic never gets the host's address, and the
`unreachable` routes of `netsafety` stop anything addressed into the cluster ranges from leaving
the machine. host-local keeps its leases in a private `dataDir`, not in /var/lib/cni. The
`loopback` plugin is not listed: containerd's CRI runs it itself for `lo` from the same bin dir.

The bridge plugin creates the bridge on the first pod and, being a gateway, turns on
`net.ipv4.ip_forward`; `remove_network` deletes the bridge and restores `ip_forward` when no other
harness bridge is left.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Any

from harness.netsafety import NODE_POD_SUBNET, OUR_DEVICE_PREFIX

NETWORK_NAME = "nodeagent"
BRIDGE = "na-cni0"
CONFLIST_NAME = "10-nodeagent.conflist"
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")


@dataclasses.dataclass(frozen=True, slots=True)
class CniNetwork:
    conf_dir: Path  # containerd's `cni.conf_dir`
    ipam_dir: Path  # host-local's leases
    subnet: str = NODE_POD_SUBNET
    bridge: str = BRIDGE
    name: str = NETWORK_NAME

    def __post_init__(self) -> None:
        if not self.bridge.startswith(OUR_DEVICE_PREFIX) or len(self.bridge) > 15:
            raise ValueError(f"bridge name must start with {OUR_DEVICE_PREFIX!r}, <= 15 chars")


def conflist(net: CniNetwork) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": net.name,
        "plugins": [
            {
                "type": "bridge",
                "bridge": net.bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": net.subnet}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(net.ipam_dir),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def write_conflist(net: CniNetwork) -> Path:
    net.conf_dir.mkdir(parents=True, exist_ok=True)
    net.ipam_dir.mkdir(parents=True, exist_ok=True)
    path = net.conf_dir / CONFLIST_NAME
    path.write_text(json.dumps(conflist(net), indent=2) + "\n")
    return path


def read_ip_forward() -> str:
    return IP_FORWARD.read_text().strip()


def _links() -> list[str]:
    out = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True, check=True)
    return [link["ifname"] for link in json.loads(out.stdout)]


def check_subnet_free(net: CniNetwork) -> None:
    """Refuse a subnet that is already routed through another device (say, a `make up` bridge)."""
    out = subprocess.run(
        ["ip", "-j", "route", "show", "root", net.subnet],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    users = {r.get("dev") for r in json.loads(out or "[]") if r.get("type", "unicast") == "unicast"}
    users.discard(net.bridge)
    if users:
        raise RuntimeError(f"pod subnet {net.subnet} is already routed via {sorted(users)}")


def remove_network(net: CniNetwork, *, ip_forward_before: str | None = None) -> None:
    """Delete the bridge; put `ip_forward` back if it was off and no harness bridge remains."""
    if net.bridge in _links():
        subprocess.run(["ip", "link", "del", net.bridge], check=True, capture_output=True)
    others = [name for name in _links() if name.startswith(OUR_DEVICE_PREFIX)]
    if ip_forward_before == "0" and not others and read_ip_forward() != "0":
        IP_FORWARD.write_text("0\n")
