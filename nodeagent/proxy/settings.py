"""The proxy's settings, taken from :class:`nodeagent.config.Config` in one place."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from nodeagent.config import Config
from nodeagent.nft.objects import Family
from nodeagent.proxy.model import family_of

TABLE = "nodeagent"
FULL_SYNC_PERIOD = 3600.0  # kube-proxy's FullSyncPeriod in nftables mode


@dataclass(frozen=True, kw_only=True)
class ProxySettings:
    node_name: str
    families: tuple[Family, ...] = ("ip",)
    table: str = TABLE
    cluster_cidrs: tuple[str, ...] = ()
    """Where local traffic comes from (kube-proxy's local traffic detector): the cluster's
    pod CIDRs, or in ``NodeCIDR`` mode the node's; traffic from outside them to a ClusterIP is
    masqueraded."""
    service_cidrs: tuple[str, ...] = ()
    """Service CIDRs: traffic to an unallocated address in them is dropped."""
    nodeport_ips: tuple[str, ...] = ()
    """Local addresses that accept NodePorts (the node's primary IPs, never loopback)."""
    masquerade_all: bool = False
    masquerade_bit: int = 14
    full_sync_period: float = FULL_SYNC_PERIOD
    """Time between periodic full syncs once one succeeded (kube-proxy: 1 h)."""
    sync_period: float = 30.0
    """Longest time between full syncs; also the retry delay after a failed sync."""
    min_sync_period: float = 1.0
    """Shortest time between syncs: changes inside it are applied together."""
    first_load_step: int = 250
    """Service ports in the first transaction when a first sync loads a table that holds
    nothing (each next transaction takes twice as many as the one before)."""

    @property
    def mark(self) -> int:
        return 1 << self.masquerade_bit

    def of_family(self, values: Iterable[str], family: Family) -> tuple[str, ...]:
        """The addresses or CIDRs of ``values`` in ``family``."""
        return tuple(v for v in values if family_of(v.split("/", 1)[0]) == family)


def nodeport_addresses(
    spec: Iterable[str], *, node_ips: Iterable[str], local_ips: Iterable[str]
) -> tuple[str, ...]:
    """``nodePortAddresses`` resolved: ``primary`` (or nothing) means the node IPs; CIDRs select
    local addresses. Loopback addresses never take NodePorts."""
    cidrs = [s for s in spec if s and s != "primary"]
    if not cidrs or "primary" in spec:
        chosen = list(node_ips)
    else:
        nets = [ipaddress.ip_network(c, strict=False) for c in cidrs]
        chosen = [ip for ip in local_ips if any(ipaddress.ip_address(ip) in n for n in nets)]
    return tuple(ip for ip in dict.fromkeys(chosen) if not ipaddress.ip_address(ip).is_loopback)


def settings_from_config(
    config: Config,
    *,
    node_name: str,
    node_ips: Iterable[str],
    local_ips: Iterable[str] = (),
    service_cidrs: Iterable[str] = (),
    pod_cidrs: Iterable[str] = (),
) -> ProxySettings:
    """``pod_cidrs``: the Node's ``spec.podCIDRs``, the local traffic of ``NodeCIDR`` mode."""
    proxy = config.proxy
    node_ips = tuple(node_ips)
    cluster = tuple(c.strip() for c in proxy.cluster_cidr.split(",") if c.strip())
    if proxy.detect_local_mode == "NodeCIDR":
        cluster = tuple(pod_cidrs)
    nodeports = nodeport_addresses(
        proxy.node_port_addresses, node_ips=node_ips, local_ips=local_ips or node_ips
    )
    families = tuple(dict.fromkeys(f for ip in node_ips if (f := family_of(ip)))) or ("ip",)
    return ProxySettings(
        node_name=node_name,
        families=families,
        cluster_cidrs=cluster,
        service_cidrs=tuple(service_cidrs),
        nodeport_ips=nodeports,
        masquerade_all=proxy.masquerade_all,
        masquerade_bit=proxy.masquerade_bit,
        sync_period=proxy.sync_period.nanoseconds / 1e9,
        min_sync_period=proxy.min_sync_period.nanoseconds / 1e9,
    )
