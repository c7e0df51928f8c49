"""What the proxy knows about Services and their endpoints: small frozen values, no API dicts.

A :class:`ServicePort` is one port of one Service (kube-proxy's ``ServicePortName`` plus what it
needs to program: cluster IPs, NodePort, external and load-balancer IPs, affinity, traffic
policies). An :class:`Endpoint` is one address:port from an EndpointSlice with its conditions.
Built from API objects by :mod:`nodeagent.proxy.api`.

They are named tuples rather than frozen dataclasses: a full sync of 10,000 Services creates,
hashes and compares them hundreds of thousands of times, which tuples do in C.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from nodeagent.nft.objects import Family

Protocol = Literal["tcp", "udp", "sctp"]
PROTOCOLS: tuple[Protocol, ...] = ("tcp", "udp", "sctp")
DEFAULT_AFFINITY_TIMEOUT = 10800  # seconds, as the API defaults ClientIP timeoutSeconds
IP_FAMILY_NAMES = {"ip": "IPv4", "ip6": "IPv6"}  # nft families as the API's IPFamily names them


class ServiceName(NamedTuple):
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class ServicePortName(NamedTuple):
    service: ServiceName
    port: str  # the port's name, "" for a single unnamed port
    protocol: Protocol

    def __str__(self) -> str:
        text = f"{self.service}:{self.port}" if self.port else str(self.service)
        return text if self.protocol == "tcp" else f"{text}/{self.protocol}"


class ServicePort(NamedTuple):
    name: ServicePortName
    port: int
    cluster_ips: tuple[str, ...]
    node_port: int | None = None
    external_ips: tuple[str, ...] = ()
    load_balancer_ips: tuple[str, ...] = ()
    affinity_timeout: int | None = None  # seconds; None = no ClientIP affinity
    internal_local: bool = False  # internalTrafficPolicy: Local
    external_local: bool = False  # externalTrafficPolicy: Local (externally reachable only)

    @property
    def protocol(self) -> Protocol:
        return self.name.protocol


class Endpoint(NamedTuple):
    ip: str
    port: int
    node_name: str = ""
    ready: bool = True
    serving: bool = True
    terminating: bool = False
    zone_hints: frozenset[str] = frozenset()  # hints.forZones: zones that should use it
    node_hints: frozenset[str] = frozenset()  # hints.forNodes: nodes that should use it

    def __str__(self) -> str:
        return f"[{self.ip}]:{self.port}" if ":" in self.ip else f"{self.ip}:{self.port}"

    @property
    def target(self) -> tuple[str, int]:
        return (self.ip, self.port)


class Selection(NamedTuple):
    """The endpoints a service port uses: all usable ones, and the usable ones on this node."""

    cluster: tuple[Endpoint, ...] = ()
    local: tuple[Endpoint, ...] = ()


def family_of(address: str) -> Family | None:
    """The family of an address the apiserver validated (cheap: no parsing); None for names."""
    if ":" in address:
        return "ip6"
    if address[-1:].isdigit() and address.count(".") == 3:
        return "ip"
    return None
