"""The CNI network the private containerd gives pods: a bridge with host-local IPAM.

`write_conflist` writes one conflist (bridge + portmap) into the containerd's private conf dir.
The bridge (`na-cni0` by default; `na-` marks the harness's devices) is the pods' gateway and
does not masquerade (`ipMasq: false`): pod traffic never gets the host's address, and the
`unreachable` routes of `netsafety` stop anything addressed into the cluster ranges from leaving
the machine. host-local keeps its leases in a private `dataDir`, not in /var/lib/cni. The
`loopback` plugin is not listed: containerd's CRI runs it itself for `lo` from the same bin dir.

The bridge plugin creates the bridge on the first pod and, being a gateway, turns on
`net.ipv4.ip_forward`; `remove_network` deletes the bridge and, when no other harness bridge is
left, restores `ip_forward` and removes the portmap plugin's chains from the root namespace.

`na-cni0` on the node's podCIDR is `make up`'s. A test session (each xdist worker) takes a bridge
and /24 of its own with `leased_network` (a lease file per index under `LEASES`, a dead holder's
lease free again): sessions of several checkouts on one machine, and `make up`, never share a
bridge, which the first of them to stop would delete under the others.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import ipaddress
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harness.hoststate import drop_empty_tables, remove_chains
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


PORTMAP_CHAINS = ("CNI-HOSTPORT-", "CNI-DN-")


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
    """Delete the bridge. When no harness bridge remains: put `ip_forward` back if it was off,
    and remove the portmap plugin's chains (it adds ``CNI-HOSTPORT-*`` to the iptables-nft
    ``ip nat`` table, creating it if need be, on the first pod and never removes them), then
    drop an ``ip nat``/``ip6 nat`` left with nothing in it (its teardown creates ``ip6 nat``)."""
    if net.bridge in _links():
        subprocess.run(["ip", "link", "del", net.bridge], check=True, capture_output=True)
    if any(name.startswith(OUR_DEVICE_PREFIX) for name in _links()):
        return
    if ip_forward_before == "0" and read_ip_forward() != "0":
        IP_FORWARD.write_text("0\n")
    remove_chains(PORTMAP_CHAINS, tables_before=set())
    drop_empty_tables(("ip nat", "ip6 nat"))


# --- a bridge and /24 of a test session's own --------------------------------------------------

LEASES = Path("/run/nodeagent-harness/bridges")  # <n>: the pid holding na-cni<n> and 10.244.<n>/24
# 0 is `make up`'s (na-cni0 on the node's podCIDR); 1-7 are left to older harnesses, whose
# xdist workers took gw<n> -> <n>; 249 is the agent-restart tests', 250-251 the benches'.
SESSION_INDICES = range(8, 249)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _holder(lease: Path) -> int | None:
    try:
        return int(lease.read_text().strip() or "0") or None
    except (FileNotFoundError, ValueError):
        return None


def lease_index(
    leases: Path,
    *,
    pid: int,
    in_use: Callable[[int], bool],
    alive: Callable[[int], bool] = _alive,
) -> int:
    """The first index of SESSION_INDICES that no live process holds and `in_use` (a bridge of
    that name exists, its subnet is routed) does not refuse, leased to `pid`. Every session,
    and each xdist worker, gets its own: a shared bridge would be deleted under the others by
    the first session to end (and `make up`'s with it)."""
    leases.mkdir(parents=True, exist_ok=True)
    with (leases / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for n in SESSION_INDICES:
            holder = _holder(leases / str(n))
            if (holder is not None and alive(holder)) or in_use(n):
                continue
            (leases / str(n)).write_text(f"{pid}\n")
            return n
    raise RuntimeError(f"no free pod bridge among na-cni{SESSION_INDICES[0]}..: see {leases}")


def release_index(leases: Path, n: int, *, pid: int) -> None:
    lease = leases / str(n)
    if _holder(lease) == pid:
        lease.unlink(missing_ok=True)


def session_network(n: int, base: Path) -> CniNetwork:
    """na-cni<n> serving the n-th /24 of the cluster's pod range."""
    first = ipaddress.ip_network(NODE_POD_SUBNET)
    start = int(first.network_address) + n * first.num_addresses
    subnet = str(ipaddress.ip_network((start, first.prefixlen)))
    return CniNetwork(
        conf_dir=base / "net.d", ipam_dir=base / "ipam", subnet=subnet, bridge=f"na-cni{n}"
    )


def _taken(n: int) -> bool:
    net = session_network(n, Path("/nonexistent"))
    if net.bridge in _links():
        return True
    out = subprocess.run(
        ["ip", "-j", "route", "show", "root", net.subnet],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return bool(json.loads(out or "[]"))


@contextlib.contextmanager
def leased_network(base: Path, *, leases: Path = LEASES) -> Iterator[CniNetwork]:
    """A bridge and /24 that no other live session (nor `make up`) uses, for as long as the
    block runs."""
    pid = os.getpid()
    n = lease_index(leases, pid=pid, in_use=_taken)
    try:
        yield session_network(n, base)
    finally:
        release_index(leases, n, pid=pid)
