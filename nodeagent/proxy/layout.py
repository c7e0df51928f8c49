"""The ruleset's fixed part: sets and maps, base and helper chains, and load-balancing chains.

No chain depends on a Service. A packet to a service address is dispatched by one verdict-map
lookup (``service-ips``, keyed ``daddr . l4proto . dport``; ``service-nodeports`` for NodePorts on
``nodeport-ips``) to a load-balancing chain named after its *shape*: how it masquerades and how
many endpoints it picks from. That chain DNATs through one named map per protocol keyed
``service key . slot``, with ``numgen random mod N`` choosing the slot. Shapes (one chain each,
created when first used):

``cluster-N``             ClusterIP: masquerade from outside the pod CIDRs; N endpoints
``external-N``            externalIP / LB IP, externalTrafficPolicy Cluster: masquerade; N endpoints
``nodeport-N``            the same through ``nodeport-endpoints-*`` (keyed ``port . slot``)
``external-local-L-of-C`` externalTrafficPolicy Local: slots 0..L-1 hold local endpoints and
                          L..L+C-1 all endpoints; pods and the node itself use all of them (the
                          node's own traffic masqueraded), others only the local ones
``nodeport-local-L-of-C`` the same for NodePorts
``affinity-T``            records ClientIP affinity with a T-second timeout

ClientIP affinity needs no per-service object: every load-balancing chain first looks the client
up in the dynamic ``affinity`` map (``saddr . service key -> endpoint``), and ``affinity-record``
(postrouting, first packet of each DNATed connection) refreshes it for services listed in
``affinity-services``. Hairpin connections (an endpoint reaching itself through its service) are
masqueraded via the ``hairpin`` set of ``endpoint . endpoint`` pairs.

Filter chains (kube-proxy's priorities, so CNIs can order themselves against us): services with
no usable endpoints get ``no-endpoint-*`` map elements (reject: connection refused; drop for a
Local policy without local endpoints), un-DNATed traffic to a ClusterIP's other ports is
rejected and traffic to unallocated service-CIDR addresses dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nodeagent.nft.objects import Chain, Element, Family, Map, Set
from nodeagent.proxy.model import PROTOCOLS
from nodeagent.proxy.settings import ProxySettings

CLUSTER_IPS = "cluster-ips"
SERVICE_CIDRS = "service-cidrs"
CLUSTER_CIDRS = "cluster-cidrs"
NODEPORT_IPS = "nodeport-ips"
SERVICE_IPS = "service-ips"
SERVICE_NODEPORTS = "service-nodeports"
NO_ENDPOINT_SERVICES = "no-endpoint-services"
NO_ENDPOINT_NODEPORTS = "no-endpoint-nodeports"
HAIRPIN = "hairpin"
AFFINITY = "affinity"
AFFINITY_SERVICES = "affinity-services"
AFFINITY_NODEPORTS = "affinity-nodeports"
DYNAMIC = frozenset({AFFINITY})  # filled by packets: never flushed by a sync
AFFINITY_SIZE = 262144

REJECT_CHAIN = "reject-chain"
NO_LOCAL_CHAIN = "no-local-endpoints"
MASQ_CHAIN = "mark-for-masquerade"

_SHAPE = re.compile(
    r"^(cluster|external|nodeport)-(\d+)$|^(external|nodeport)-local-(\d+)-of-(\d+)$"
)
_AFFINITY = re.compile(r"^affinity-(\d+)$")


@dataclass(frozen=True, slots=True)
class Shape:
    """A load-balancing chain: ``kind`` cluster/external/nodeport, ``n`` endpoints picked from,
    ``local_policy`` with ``n`` local endpoints first and ``all_`` endpoints after them."""

    kind: str
    n: int
    local_policy: bool = False
    all_: int = 0

    @property
    def name(self) -> str:
        if self.local_policy:
            return f"{self.kind}-local-{self.n}-of-{self.all_}"
        return f"{self.kind}-{self.n}"

    @staticmethod
    def parse(name: str) -> Shape | None:
        m = _SHAPE.match(name)
        if m is None:
            return None
        if m.group(1):
            return Shape(m.group(1), int(m.group(2)))
        return Shape(m.group(3), int(m.group(4)), local_policy=True, all_=int(m.group(5)))


class Layout:
    """The fixed part of one family's table, rendered for the given settings."""

    def __init__(self, *, family: Family, settings: ProxySettings) -> None:
        self.family = family
        self.settings = settings
        self.ip = "ip6" if family == "ip6" else "ip"
        self.addr = "ipv6_addr" if family == "ip6" else "ipv4_addr"
        self.cluster_cidrs = settings.of_family(settings.cluster_cidrs, family)
        self.service_cidrs = settings.of_family(settings.service_cidrs, family)
        self.nodeport_ips = settings.of_family(settings.nodeport_ips, family)

    def sets(self) -> list[Set | Map]:
        a, ip = self.addr, self.ip
        key = f"{a} . inet_proto . inet_service"
        return [
            Set(name=CLUSTER_IPS, type=a, comment="allocated ClusterIPs"),
            Set(name=SERVICE_CIDRS, type=a, flags=("interval",), comment="service CIDRs"),
            Set(name=CLUSTER_CIDRS, type=a, flags=("interval",), comment="pod CIDRs"),
            Set(name=NODEPORT_IPS, type=a, comment="addresses that accept NodePorts"),
            Map(name=SERVICE_IPS, type=f"{key} : verdict"),
            Map(name=SERVICE_NODEPORTS, type="inet_proto . inet_service : verdict"),
            Map(name=NO_ENDPOINT_SERVICES, type=f"{key} : verdict"),
            Map(name=NO_ENDPOINT_NODEPORTS, type="inet_proto . inet_service : verdict"),
            *(
                Map(
                    name=endpoints_map(p),
                    typeof=f"{ip} daddr . {p} dport . numgen random mod 1 : {ip} daddr . {p} dport",
                )
                for p in PROTOCOLS
            ),
            *(
                Map(
                    name=endpoints_map(p, nodeport=True),
                    typeof=f"{p} dport . numgen random mod 1 : {ip} daddr . {p} dport",
                )
                for p in PROTOCOLS
            ),
            Set(name=HAIRPIN, type=f"{a} . {a}", comment="endpoint . endpoint"),
            Map(
                name=AFFINITY,
                type=f"{a} . {key} : {a} . inet_service",
                flags=("dynamic", "timeout"),
                timeout=10800,
                size=AFFINITY_SIZE,
                comment="client . service -> endpoint",
            ),
            Map(name=AFFINITY_SERVICES, type=f"{key} : verdict"),
            Map(name=AFFINITY_NODEPORTS, type="inet_proto . inet_service : verdict"),
        ]

    def static_elements(self) -> list[Element]:
        return [
            *(Element(set=CLUSTER_CIDRS, key=(c,)) for c in self.cluster_cidrs),
            *(Element(set=SERVICE_CIDRS, key=(c,)) for c in self.service_cidrs),
            *(Element(set=NODEPORT_IPS, key=(ip,)) for ip in self.nodeport_ips),
        ]

    def chains(self) -> list[tuple[Chain, list[str]]]:
        """Base and helper chains with their rules."""
        ip, mark = self.ip, hex(self.settings.mark)
        new = "ct state new"
        return [
            (
                _base("filter-input", "filter", "input", -110),
                [
                    f"{new} jump nodeport-endpoints-check",
                    f"{new} jump service-endpoints-check",
                ],
            ),
            (
                _base("filter-forward", "filter", "forward", -110),
                [
                    f"{new} jump service-endpoints-check",
                    f"{new} jump cluster-ips-check",
                ],
            ),
            (
                _base("filter-output", "filter", "output", -110),
                [
                    f"{new} jump service-endpoints-check",
                ],
            ),
            (
                _base("filter-output-post-dnat", "filter", "output", -90),
                [
                    f"{new} jump cluster-ips-check",
                ],
            ),
            (_base("nat-prerouting", "nat", "prerouting", -100), ["jump services"]),
            (_base("nat-output", "nat", "output", -100), ["jump services"]),
            (
                _base("nat-postrouting", "nat", "postrouting", 100),
                [
                    "jump affinity-record",
                    "jump masquerading",
                ],
            ),
            (
                Chain(name="services"),
                [
                    f"{ip} daddr . meta l4proto . th dport vmap @{SERVICE_IPS}",
                    f"{ip} daddr @{NODEPORT_IPS} meta l4proto . th dport vmap @{SERVICE_NODEPORTS}",
                ],
            ),
            (
                Chain(name="service-endpoints-check"),
                [
                    f"{ip} daddr . meta l4proto . th dport vmap @{NO_ENDPOINT_SERVICES}",
                ],
            ),
            (
                Chain(name="nodeport-endpoints-check"),
                [
                    f"{ip} daddr @{NODEPORT_IPS} meta l4proto . th dport"
                    f" vmap @{NO_ENDPOINT_NODEPORTS}",
                ],
            ),
            (
                Chain(name="cluster-ips-check"),
                [
                    f"{ip} daddr @{CLUSTER_IPS} reject",
                    f"{ip} daddr @{SERVICE_CIDRS} drop",
                ],
            ),
            (Chain(name=MASQ_CHAIN), [f"meta mark set meta mark or {mark}"]),
            (
                Chain(name="masquerading"),
                [
                    f"ct status dnat {ip} saddr . {ip} daddr @{HAIRPIN} jump {MASQ_CHAIN}",
                    f"meta mark and {mark} == 0 return",
                    f"meta mark set meta mark xor {mark}",
                    "masquerade fully-random",
                ],
            ),
            (
                Chain(name="affinity-record"),
                [
                    *(
                        f"ct status dnat meta l4proto {p} ct original {ip} daddr . meta l4proto"
                        f" . ct original proto-dst vmap @{AFFINITY_SERVICES}"
                        for p in PROTOCOLS
                    ),
                    *(
                        f"ct status dnat meta l4proto {p} ct original {ip} daddr @{NODEPORT_IPS}"
                        f" meta l4proto . ct original proto-dst vmap @{AFFINITY_NODEPORTS}"
                        for p in PROTOCOLS
                    ),
                ],
            ),
            (Chain(name=REJECT_CHAIN), ["reject"]),
            (Chain(name=NO_LOCAL_CHAIN), ["fib saddr type local return", "drop"]),
        ]

    def shape_rules(self, shape: Shape) -> list[str]:
        ip = self.ip
        nodeport = shape.kind == "nodeport"

        def dnat(mod: int, offset: int = 0, *, when: str = "") -> list[str]:
            pick = f"numgen random mod {mod}" + (f" offset {offset}" if offset else "")
            return [
                f"{when}dnat {ip} addr . port to {'' if nodeport else f'{ip} daddr . '}{p} dport"
                f" . {pick} map @{endpoints_map(p, nodeport=nodeport)}"
                for p in PROTOCOLS
            ]

        affinity = (
            f"dnat {ip} addr . port to {ip} saddr . {ip} daddr . meta l4proto . th dport"
            f" map @{AFFINITY}"
        )
        if shape.local_policy:
            rules = [f"fib saddr type local jump {MASQ_CHAIN}", affinity]
            if self.cluster_cidrs:
                rules += dnat(shape.all_, shape.n, when=f"{ip} saddr @{CLUSTER_CIDRS} ")
            rules += dnat(shape.all_, shape.n, when="fib saddr type local ")
            if shape.n:
                rules += dnat(shape.n)
            return rules
        if shape.kind != "cluster" or self.settings.masquerade_all:
            masq = [f"jump {MASQ_CHAIN}"]
        elif self.cluster_cidrs:
            masq = [f"{ip} saddr != @{CLUSTER_CIDRS} jump {MASQ_CHAIN}"]
        else:
            masq = []
        return [*masq, affinity, *dnat(shape.n)]

    def dynamic_rules(self, name: str) -> list[str] | None:
        """The rules of a load-balancing or affinity chain, by its name (None: not ours)."""
        shape = Shape.parse(name)
        if shape is not None:
            return self.shape_rules(shape)
        m = _AFFINITY.match(name)
        return self.affinity_rules(int(m.group(1))) if m else None

    def affinity_rules(self, timeout: int) -> list[str]:
        ip = self.ip
        return [
            f"meta l4proto {p} update @{AFFINITY} {{ {ip} saddr . ct original {ip} daddr"
            f" . meta l4proto . ct original proto-dst timeout {timeout}s : {ip} daddr . th dport }}"
            for p in PROTOCOLS
        ]


def endpoints_map(protocol: str, *, nodeport: bool = False) -> str:
    """The map of one protocol's endpoints: ``addr . port . slot`` (NodePorts: ``port . slot``)
    to ``endpoint addr . port``. One map per protocol because the value's port type names the
    protocol: nft then adds the ``meta l4proto`` match to the DNAT rule itself (a protocol-less
    port type, ``th dport``, cannot be read back by nft 1.0.6)."""
    return f"{'nodeport' if nodeport else 'service'}-endpoints-{protocol}"


def affinity_chain(timeout: int) -> str:
    return f"affinity-{timeout}"


def _base(name: str, type_: str, hook: str, priority: int) -> Chain:
    return Chain(name=name, type=type_, hook=hook, priority=priority, policy="accept")
