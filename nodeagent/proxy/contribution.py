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

from dataclasses import dataclass

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
from nodeagent.proxy.model import Endpoint, Selection, ServicePort, family_of
from nodeagent.proxy.policy import assign_slots

NODEPORT = ""  # the "address" of a NodePort entry: any of nodeport-ips


@dataclass(frozen=True, slots=True)
class Contribution:
    elements: tuple[Element, ...] = ()
    chains: frozenset[str] = frozenset()
    slots_all: tuple[Endpoint, ...] = ()
    slots_local: tuple[Endpoint, ...] = ()
    udp_targets: frozenset[tuple[str, int, str]] = frozenset()
    """(entry address or NODEPORT, port, endpoint IP): DNATs a stale UDP flow may still use."""
    udp_served: frozenset[tuple[str, int]] = frozenset()
    """UDP entries that have endpoints (flows from before they had any must be forgotten)."""
    affinity_targets: frozenset[tuple[str, int, str, int]] = frozenset()
    """(entry address or NODEPORT, port, endpoint IP, endpoint port) affinity may point at."""


def contribute(
    sp: ServicePort, selection: Selection, *, layout: Layout, previous: Contribution | None
) -> Contribution:
    fam = layout.family
    prev = previous or Contribution()
    mine = Selection(
        cluster=tuple(e for e in selection.cluster if family_of(e.ip) == fam),
        local=tuple(e for e in selection.local if family_of(e.ip) == fam),
    )
    b = _Builder(sp, layout)
    b.slots_all = assign_slots(prev.slots_all, mine.cluster)
    b.slots_local = assign_slots(prev.slots_local, mine.local)
    for ip in (a for a in sp.cluster_ips if family_of(a) == fam):
        b.el(CLUSTER_IPS, (ip,))
        b.cluster_entry(ip)
    for ip in dict.fromkeys(a for a in (*sp.external_ips, *sp.load_balancer_ips)):
        if family_of(ip) == fam:
            b.external_entry(ip)
    if sp.node_port and layout.nodeport_ips:
        b.external_entry(NODEPORT)
    for ep in (*b.slots_all, *b.slots_local):
        b.el(HAIRPIN, (ep.ip, ep.ip))
    return b.build()


class _Builder:
    def __init__(self, sp: ServicePort, layout: Layout) -> None:
        self.sp = sp
        self.layout = layout
        self.proto = sp.protocol
        self.comment = str(sp.name)[:COMMENT_MAX]
        self.elements: dict[tuple[str, tuple[str, ...]], Element] = {}
        self.chains: set[str] = set()
        self.slots_all: tuple[Endpoint, ...] = ()
        self.slots_local: tuple[Endpoint, ...] = ()
        self.udp_targets: set[tuple[str, int, str]] = set()
        self.udp_served: set[tuple[str, int]] = set()
        self.affinity: set[tuple[str, int, str, int]] = set()

    def el(self, container: str, key: tuple[str, ...], value: tuple[str, ...] = ()) -> None:
        is_map = bool(value)
        el = Element(
            map=container if is_map else None,
            set=None if is_map else container,
            key=key,
            value=value,
            comment=self.comment if container not in (HAIRPIN, CLUSTER_IPS) else None,
        )
        self.elements[(container, key)] = el

    def cluster_entry(self, ip: str) -> None:
        eps = self.slots_local if self.sp.internal_local else self.slots_all
        if eps:
            self.dispatch(ip, self.sp.port, Shape("cluster", len(eps)), eps)
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
            self.dispatch(ip, port, Shape(kind, len(all_)), all_)
        else:
            shape = Shape(kind, len(local), local_policy=True, all_=len(all_))
            self.dispatch(ip, port, shape, (*local, *all_))
            if not local:
                self.no_endpoints(ip, port, f"goto {NO_LOCAL_CHAIN}")

    def dispatch(self, ip: str, port: int, shape: Shape, eps: tuple[Endpoint, ...]) -> None:
        nodeport = ip == NODEPORT
        entry = (self.proto, str(port)) if nodeport else (ip, self.proto, str(port))
        self.chains.add(shape.name)
        self.el(SERVICE_NODEPORTS if nodeport else SERVICE_IPS, entry, (f"goto {shape.name}",))
        table = endpoints_map(self.proto, nodeport=nodeport)
        service = (str(port),) if nodeport else (ip, str(port))
        for slot, ep in enumerate(eps):
            key = (*service, str(slot))
            self.elements[(table, key)] = Element(map=table, key=key, value=(ep.ip, str(ep.port)))
        if self.proto == "udp":
            self.udp_served.add((ip, port))
            self.udp_targets.update((ip, port, ep.ip) for ep in eps)
        timeout = self.sp.affinity_timeout
        if timeout:
            chain = affinity_chain(timeout)
            self.chains.add(chain)
            vmap = AFFINITY_NODEPORTS if nodeport else AFFINITY_SERVICES
            self.el(vmap, entry, (f"goto {chain}",))
            self.affinity.update((ip, port, ep.ip, ep.port) for ep in eps)

    def no_endpoints(self, ip: str, port: int, verdict: str) -> None:
        if ip == NODEPORT:
            self.el(NO_ENDPOINT_NODEPORTS, (self.proto, str(port)), (verdict,))
        else:
            self.el(NO_ENDPOINT_SERVICES, (ip, self.proto, str(port)), (verdict,))

    def build(self) -> Contribution:
        return Contribution(
            elements=tuple(self.elements.values()),
            chains=frozenset(self.chains),
            slots_all=self.slots_all,
            slots_local=self.slots_local,
            udp_targets=frozenset(self.udp_targets),
            udp_served=frozenset(self.udp_served),
            affinity_targets=frozenset(self.affinity),
        )
