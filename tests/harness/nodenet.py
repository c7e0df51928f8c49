"""The network of a multi-node cluster on one machine: each node a network namespace of its own
with a routed point-to-point link to the host, the way kind makes each node a container.

    host (root netns)                                node netns na-m<K>-n<i>
      lo: 198.18.0.1 (kube-apiserver, registry)
      na-m<K>n<i> 198.18.<16+K>.1 peer .1<i>  ──veth──  eth0 198.18.<16+K>.1<i> peer .1
      route 198.18.<16+K>.1<i>/32 dev na-m<K>n<i>       default via 198.18.<16+K>.1
      route <podCIDR of i> via 198.18.<16+K>.1<i>

Node to node traffic (flannel's VXLAN, the apiserver's calls to :10250, NodePorts) is routed by
the host between the point-to-point links; node to control plane goes to 198.18.0.1 on the
host's `lo`. Only addresses of this machine are used: 198.18.0.0/15 is the benchmarking range
(RFC 2544), which nothing routes. A node's default route points at the host, so that flannel
finds its public interface as on a real machine; the host never forwards anything from a node
link to any other interface (`guard_table`, an nft table in the root namespace), so no packet of
a node leaves the machine. The host forwards between node links, so `ip_forward` is on while a
cluster runs; `remove` puts back the value it found when no other cluster is left.

A libvirt VM joins as one more node on `ROUTED_VM_NETWORK` (the Vagrantfile's
`NODEAGENT_LIBVIRT_NETWORK=routed`: libvirt's forward mode `route`, no NAT, a `virbr*` bridge
of libvirt's naming): the guard lets node links and that network's addresses on a `virbr*`
bridge reach each other, and drops anything else the network sends through the host, so the
VM's packets stay on this machine too.

`K` is the cluster's index: 0 is `make up`'s, a test fixture leases another (`lease`), so a
`make up` cluster and test clusters of several sessions never share a name or an address.
Everything here is plain data plus `ip`/`nft` calls; `NodeAddr` is pure.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

PREFIX = "na-m"  # host devices and netns names: na-m<K>n<i>, na-m<K>-n<i>
MAX_CLUSTERS = 200  # 198.18.16.0 .. 198.18.215.0 (/24 each), well inside 198.18.0.0/15
MAX_NODES = 80  # node i at .1<i>: .11 .. .90
# The Vagrantfile's routed libvirt network (NODEAGENT_LIBVIRT_NETWORK=routed): the host .1 on
# libvirt's bridge, the VMs from its DHCP range; next to the clusters' 198.18.16.0 and up.
ROUTED_VM_NETWORK = "198.18.15.0/24"
LIBVIRT_BRIDGES = "virbr*"
LEASES = Path("/run/nodeagent-harness/multinode")  # <K>: the pid holding cluster index K
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
FORWARD_BEFORE = "ip_forward_before"  # under LEASES: the value found by the first cluster


@dataclass(frozen=True, slots=True)
class NodeAddr:
    """Names and addresses of node `index` (1-based) of cluster `cluster`."""

    cluster: int
    index: int

    def __post_init__(self) -> None:
        if not 0 <= self.cluster < MAX_CLUSTERS:
            raise ValueError(f"cluster index {self.cluster} outside 0..{MAX_CLUSTERS - 1}")
        if not 1 <= self.index <= MAX_NODES:
            raise ValueError(f"node index {self.index} outside 1..{MAX_NODES}")

    @property
    def netns(self) -> str:
        return f"{PREFIX}{self.cluster}-n{self.index}"

    @property
    def host_dev(self) -> str:
        return f"{PREFIX}{self.cluster}n{self.index}"  # <= 15 characters for K < 1000

    @property
    def node_dev(self) -> str:
        return "eth0"

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        return cluster_subnet(self.cluster)

    @property
    def gateway(self) -> str:
        return str(self.subnet.network_address + 1)

    @property
    def ip(self) -> str:
        return str(self.subnet.network_address + 10 + self.index)


def cluster_subnet(cluster: int) -> ipaddress.IPv4Network:
    return ipaddress.ip_network(f"198.18.{16 + cluster}.0/24")


def guard_table(cluster: int) -> str:
    return f"na_m{cluster}_guard"


def guard_rules(cluster: int) -> str:
    """An nft script: forwarded packets from a node link may only go to another node link of
    the same cluster or to a VM on the routed libvirt network, and that network's packets only
    to a node link (of any cluster: every cluster's guard holds this), so nothing a node or that
    VM sends is routed off the machine."""
    links, any_links = f'"{PREFIX}{cluster}n*"', f'"{PREFIX}*"'
    bridges, vms = f'"{LIBVIRT_BRIDGES}"', ROUTED_VM_NETWORK
    table = guard_table(cluster)
    return (
        f"table ip {table} {{\n"
        "  chain forward {\n"
        "    type filter hook forward priority -10; policy accept;\n"
        f"    iifname {links} oifname {bridges} ip daddr {vms} accept\n"
        f"    iifname {bridges} ip saddr {vms} oifname {any_links} accept\n"
        f"    iifname {bridges} ip saddr {vms} drop\n"
        f"    iifname {links} oifname != {links} drop\n"
        f"    oifname {links} iifname != {links} drop\n"
        "  }\n"
        "}\n"
    )


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def _nft(script: str, *, check: bool = True) -> None:
    done = subprocess.run(
        ["nft", "-f", "-"], input=script, capture_output=True, text=True, check=False
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"nft: {done.stderr.strip()}\n{script}")


def add_node(addr: NodeAddr) -> None:
    """The namespace, its link to the host, addresses and routes. Undone by `remove_node`."""
    remove_node(addr)
    _ip("netns", "add", addr.netns)
    try:
        ns = ("-n", addr.netns)
        _ip(*ns, "link", "set", "lo", "up")
        _ip("link", "add", addr.host_dev, "type", "veth", "peer", "name", addr.node_dev,
            "netns", addr.netns)  # fmt: skip
        _ip("addr", "add", f"{addr.gateway}/32", "peer", f"{addr.ip}/32", "dev", addr.host_dev)
        _ip("link", "set", addr.host_dev, "up")
        _ip(*ns, "addr", "add", f"{addr.ip}/32", "peer", f"{addr.gateway}/32",
            "dev", addr.node_dev)  # fmt: skip
        _ip(*ns, "link", "set", addr.node_dev, "up")
        _ip(*ns, "route", "add", "default", "via", addr.gateway, "dev", addr.node_dev)
        # A node forwards for its pods (flannel and the bridge plugin turn this on too).
        _ip("netns", "exec", addr.netns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    except BaseException:
        remove_node(addr)
        raise


def add_vm_link(addr: NodeAddr) -> str:
    """The host end for a VM node (a qemu guest joining the cluster, as the netns nodes do): a
    tap device named like a node link, so the guard and the routes treat it as one. qemu opens
    it (``-netdev tap,ifname=<name>,script=no,downscript=no``); the guest configures its NIC as
    ``<addr.ip>/32 peer <addr.gateway>`` with a default route via the gateway, reaches the
    apiserver and registry at 198.18.0.1 and the other nodes through the host. Returns the
    device name; `remove_node` removes it."""
    _ip("link", "del", addr.host_dev, check=False)
    _ip("tuntap", "add", "dev", addr.host_dev, "mode", "tap")
    try:
        _ip("addr", "add", f"{addr.gateway}/32", "peer", f"{addr.ip}/32", "dev", addr.host_dev)
        _ip("link", "set", addr.host_dev, "up")
    except BaseException:
        _ip("link", "del", addr.host_dev, check=False)
        raise
    return addr.host_dev


def route_pod_cidr(addr: NodeAddr, cidr: str) -> None:
    """Route the node's pod CIDR from the host to the node, as the control plane of a real
    cluster is in the pod network: the apiserver dials a webhook's or an aggregated API's pod
    (``--enable-aggregator-routing``) and ``pods/proxy`` at its pod IP. More specific than the
    cluster CIDR's unreachable hold; goes with the node's link in `remove_node`."""
    _ip("route", "replace", cidr, "via", addr.ip, "dev", addr.host_dev)


def remove_node(addr: NodeAddr) -> None:
    """Delete the namespace (its devices, routes and nft tables go with it) and the host end."""
    _ip("link", "del", addr.host_dev, check=False)
    _ip("netns", "del", addr.netns, check=False)


def netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def add_cluster(cluster: int) -> None:
    """The host side shared by a cluster's nodes: forwarding on, the guard table."""
    table = guard_table(cluster)
    _nft(f"add table ip {table}\ndelete table ip {table}\n" + guard_rules(cluster))
    LEASES.mkdir(parents=True, exist_ok=True)
    before = LEASES / FORWARD_BEFORE
    if not before.exists():
        before.write_text(IP_FORWARD.read_text().strip() + "\n")
    IP_FORWARD.write_text("1\n")


def remove_cluster(cluster: int, *, others_alive: bool) -> None:
    """Drop the guard; the last cluster out puts `ip_forward` back as it found it."""
    _nft(f"delete table ip {guard_table(cluster)}\n", check=False)
    before = LEASES / FORWARD_BEFORE
    if others_alive or not before.exists():
        return
    others = [p for p in Path("/sys/class/net").glob("na-cni*")]  # harness CNI bridges want it
    if before.read_text().strip() == "0" and not others:
        IP_FORWARD.write_text("0\n")
    before.unlink(missing_ok=True)


def stale_nodes(cluster: int) -> list[NodeAddr]:
    """Nodes of cluster `cluster` whose namespace or host link is still there."""
    found = set()
    for path in Path("/run/netns").glob(f"{PREFIX}{cluster}-n*"):
        with contextlib.suppress(ValueError):
            found.add(int(path.name.rsplit("-n", 1)[1]))
    for path in Path("/sys/class/net").glob(f"{PREFIX}{cluster}n*"):
        with contextlib.suppress(ValueError):
            found.add(int(path.name.rsplit("n", 1)[1]))
    return [NodeAddr(cluster, i) for i in sorted(found) if 1 <= i <= MAX_NODES]


# --- cluster indices: 0 is `make up`'s, tests lease one ------------------------------------------


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def _holder(path: Path) -> int | None:
    try:
        return int(path.read_text().strip() or "0") or None
    except (FileNotFoundError, ValueError):
        return None


def live_clusters(*, alive: Callable[[int], bool] = _alive) -> list[int]:
    """Indices whose holder still runs."""
    out = []
    for path in LEASES.glob("[0-9]*"):
        holder = _holder(path)
        if holder is not None and alive(holder):
            out.append(int(path.name))
    return sorted(out)


def claim(cluster: int, *, pid: int) -> None:
    LEASES.mkdir(parents=True, exist_ok=True)
    (LEASES / str(cluster)).write_text(f"{pid}\n")


def release(cluster: int, *, pid: int) -> None:
    lease = LEASES / str(cluster)
    if _holder(lease) == pid:
        lease.unlink(missing_ok=True)


def lease(*, pid: int, first: int = 1, alive: Callable[[int], bool] = _alive) -> int:
    """The first index from `first` that no live process holds, leased to `pid`; a dead
    holder's namespaces are removed first (a killed test session)."""
    LEASES.mkdir(parents=True, exist_ok=True)
    with (LEASES / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for k in range(first, MAX_CLUSTERS):
            holder = _holder(LEASES / str(k))
            if holder is not None and alive(holder):
                continue
            claim(k, pid=pid)
            return k
    raise RuntimeError(f"no free multi-node cluster index: see {LEASES}")


@contextlib.contextmanager
def leased(*, pid: int | None = None) -> Iterator[int]:
    me = pid or os.getpid()
    k = lease(pid=me)
    try:
        yield k
    finally:
        release(k, pid=me)
