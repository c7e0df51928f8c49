"""What one service port puts into one family's table: map and set elements, the load-balancing
chains they jump to, and what the sync must clean up when they change. Pure.

Per entry point (each ClusterIP, external IP and LB IP as ``addr . proto . port``; the NodePort
as ``proto . port``): with endpoints, a ``service-ips`` (``service-nodeports``) element going to
the entry's shape chain and one ``service-endpoints`` (``nodeport-endpoints``) element per
slot; without, a ``no-endpoint-*`` element (reject, or drop for a Local policy with no local
endpoints). Plus the ClusterIP in ``cluster-ips``, ``endpoint . endpoint`` in ``hairpin``, and
``affinity-services`` elements for ClientIP affinity.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from nodeagent.nft.objects import COMMENT_MAX, Element
from nodeagent.proxy.layout import (
    AFFINITY_NODEPORTS,
    AFFINITY_SERVICES,
    CLUSTER_IPS,
    HAIRPIN,
    NO_ENDPOINT_NODEPORTS,
    NO_ENDPOINT_SERVICES,
    NO_LOCAL_CHAIN,
    REJECT_CHAIN,
    SERVICE_IPS,
    SERVICE_NODEPORTS,
    Layout,
    Shape,
    affinity_chain,
    endpoints_map,
)
from nodeagent.proxy.model import PROTOCOLS, Endpoint, Selection, ServicePort, family_of
from nodeagent.proxy.policy import assign_slots

NODEPORT = ""  # the "address" of a NodePort entry: any of nodeport-ips
Key = tuple[str, ...]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Contribution:
    groups: Mapping[str, Mapping[Key, Element]] = field(default_factory=dict)
    """The elements per set or map, by key (read-only)."""
    chains: frozenset[str] = frozenset()
    slots_all: tuple[Endpoint, ...] = ()
    slots_local: tuple[Endpoint, ...] = ()
    udp_targets: frozenset[tuple[str, int, str]] = frozenset()
    """(entry address or NODEPORT, port, endpoint IP): DNATs a stale UDP flow may still use."""
    udp_served: frozenset[tuple[str, int]] = frozenset()
    """UDP entries that have endpoints (flows from before they had any must be forgotten)."""
    affinity_targets: frozenset[tuple[str, int, str, int]] = frozenset()
    """(entry address or NODEPORT, port, endpoint IP, endpoint port) affinity may point at."""

    def elements(self) -> Iterator[tuple[str, Element]]:
        """(set or map, element) of every element."""
        for container, els in self.groups.items():
            for el in els.values():
                yield container, el


def contribute(
    sp: ServicePort, selection: Selection, *, layout: Layout, previous: Contribution | None
) -> Contribution:
    fam = layout.family
    prev = previous or _NOTHING
    b = _Builder(sp)
    b.slots_all = assign_slots(prev.slots_all, _of_family(selection.cluster, fam))
    b.slots_local = assign_slots(prev.slots_local, _of_family(selection.local, fam))
    for ip in sp.cluster_ips:
        if family_of(ip) == fam:
            b.group(CLUSTER_IPS)[(ip,)] = Element((ip,), (), CLUSTER_IPS)
            b.cluster_entry(ip)
    if sp.external_ips or sp.load_balancer_ips:
        for ip in dict.fromkeys((*sp.external_ips, *sp.load_balancer_ips)):
            if family_of(ip) == fam:
                b.external_entry(ip)
    if sp.node_port and layout.nodeport_ips:
        b.external_entry(NODEPORT)
    hairpin = b.group(HAIRPIN)
    for eps in (b.slots_all, b.slots_local):
        for ep in eps:
            key = (ep.ip, ep.ip)
            hairpin[key] = Element(key, (), HAIRPIN)
    return b.build()


def _of_family(endpoints: tuple[Endpoint, ...], family: str) -> tuple[Endpoint, ...]:
    kept = [e for e in endpoints if family_of(e.ip) == family]
    return endpoints if len(kept) == len(endpoints) else tuple(kept)


class _Builder:
    __slots__ = (
        "affinity", "chains", "comment", "groups", "proto", "slots_all", "slots_local", "sp",
        "udp_served", "udp_targets",
    )  # fmt: skip

    def __init__(self, sp: ServicePort) -> None:
        self.sp = sp
        self.proto = sp.protocol
        self.comment = str(sp.name)[:COMMENT_MAX]
        self.groups: dict[str, dict[Key, Element]] = {}
        self.chains: set[str] = set()
        self.slots_all: tuple[Endpoint, ...] = ()
        self.slots_local: tuple[Endpoint, ...] = ()
        self.udp_targets: list[tuple[str, int, str]] = []
        self.udp_served: list[tuple[str, int]] = []
        self.affinity: list[tuple[str, int, str, int]] = []

    def group(self, container: str) -> dict[Key, Element]:
        """The elements of one set or map, by key."""
        found = self.groups.get(container)
        if found is None:
            found = self.groups[container] = {}
        return found

    def verdict(self, vmap: str, key: Key, verdict: str) -> None:
        """An element of a verdict map, commented with the service port's name."""
        value = _VERDICTS.get(verdict)
        if value is None:
            value = _VERDICTS[verdict] = (verdict,)
        self.group(vmap)[key] = Element(key, value, None, vmap, self.comment)

    def cluster_entry(self, ip: str) -> None:
        eps = self.slots_local if self.sp.internal_local else self.slots_all
        if eps:
            self.dispatch(ip, self.sp.port, _shape("cluster", len(eps)), eps)
        else:
            drop = self.sp.internal_local and bool(self.slots_all)
            self.no_endpoints(ip, self.sp.port, "drop" if drop else f"goto {REJECT_CHAIN}")

    def external_entry(self, ip: str) -> None:
        nodeport = ip == NODEPORT
        port = self.sp.node_port if nodeport else self.sp.port
        assert port is not None
        kind = "nodeport" if nodeport else "external"
        all_, local = self.slots_all, self.slots_local
        if not all_:
            self.no_endpoints(ip, port, f"goto {REJECT_CHAIN}")
        elif not self.sp.external_local:
            self.dispatch(ip, port, _shape(kind, len(all_)), all_)
        else:
            self.dispatch(ip, port, _shape(kind, len(local), len(all_)), (*local, *all_))
            if not local:
                self.no_endpoints(ip, port, f"goto {NO_LOCAL_CHAIN}")

    def dispatch(self, ip: str, port: int, chain: str, eps: tuple[Endpoint, ...]) -> None:
        """``ip``:``port`` goes to the load-balancing ``chain``, which picks from ``eps``."""
        nodeport = ip == NODEPORT
        text = _text(port)
        entry = (self.proto, text) if nodeport else (ip, self.proto, text)
        self.chains.add(chain)
        self.verdict(SERVICE_NODEPORTS if nodeport else SERVICE_IPS, entry, f"goto {chain}")
        table = _ENDPOINTS_MAPS[(self.proto, nodeport)]
        elements = self.group(table)
        for slot, ep in enumerate(eps):
            key = (text, _text(slot)) if nodeport else (ip, text, _text(slot))
            elements[key] = Element(key, (ep.ip, _text(ep.port)), None, table)
        if self.proto == "udp":
            self.udp_served.append((ip, port))
            self.udp_targets += [(ip, port, ep.ip) for ep in eps]
        timeout = self.sp.affinity_timeout
        if timeout:
            affinity = affinity_chain(timeout)
            self.chains.add(affinity)
            vmap = AFFINITY_NODEPORTS if nodeport else AFFINITY_SERVICES
            self.verdict(vmap, entry, f"goto {affinity}")
            self.affinity += [(ip, port, ep.ip, ep.port) for ep in eps]

    def no_endpoints(self, ip: str, port: int, verdict: str) -> None:
        if ip == NODEPORT:
            self.verdict(NO_ENDPOINT_NODEPORTS, (self.proto, str(port)), verdict)
        else:
            self.verdict(NO_ENDPOINT_SERVICES, (ip, self.proto, str(port)), verdict)

    def build(self) -> Contribution:
        return Contribution(
            groups=self.groups,
            chains=frozenset(self.chains),
            slots_all=self.slots_all,
            slots_local=self.slots_local,
            udp_targets=_frozen(self.udp_targets),
            udp_served=_frozen(self.udp_served),
            affinity_targets=_frozen(self.affinity),
        )


@functools.cache
def _shape(kind: str, n: int, all_: int | None = None) -> str:
    """The name of a load-balancing chain (``all_``: a Local policy's total endpoints)."""
    if all_ is None:
        return Shape(kind, n).name
    return Shape(kind, n, local_policy=True, all_=all_).name


def _frozen(items: list[T]) -> frozenset[T]:
    """The items as a frozenset; the empty ones shared (most service ports have no UDP and no
    affinity, and each empty frozenset is 216 bytes)."""
    return frozenset(items) if items else _NONE


def _text(number: int) -> str:
    """A port or slot number as text, one string per number (60,000 elements of a big table
    share a handful of port strings instead of holding a copy each)."""
    text = _TEXTS.get(number)
    if text is None:
        text = _TEXTS[number] = str(number)
    return text


_NOTHING = Contribution()
_NONE: frozenset[Any] = frozenset()
_TEXTS: dict[int, str] = {}  # ports and slot numbers: a few thousand at most
_VERDICTS: dict[str, tuple[str]] = {}  # one per chain; shared by all elements jumping there
_ENDPOINTS_MAPS = {(p, n): endpoints_map(p, nodeport=n) for p in PROTOCOLS for n in (False, True)}
