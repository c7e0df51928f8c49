"""Pure decisions: which endpoints a service port uses, and which slot each endpoint keeps.

:func:`select` is kube-proxy's endpoint categorisation (``CategorizeEndpoints``): ready
endpoints, or, only when none is ready, the ones that are serving and terminating (so
connections drain to them instead of failing); the same again restricted to this node for
``Local`` policies. Topology hints (``trafficDistribution``, set by the EndpointSlice
controller) narrow the cluster endpoints: when every ready endpoint has a node hint and one is
hinted for this node, only those (PreferSameNode); else when every ready endpoint has a zone
hint and one is hinted for this node's zone (its ``topology.kubernetes.io/zone`` label), only
those (PreferClose, PreferSameZone); else all of them.

:func:`assign_slots` keeps load-balancing slots stable: the endpoints map is keyed by
``service . slot``, so an endpoint that survives a change keeps its slot and a change of one
endpoint rewrites one element, not all of them. New endpoints fill holes first; then the last
slots move into the remaining holes so slots stay ``0..n-1``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import itemgetter

from nodeagent.proxy.model import Endpoint, Selection


def select(endpoints: Iterable[Endpoint], *, node_name: str, zone: str = "") -> Selection:
    eps = list(endpoints)
    ready = [e for e in eps if e.ready]
    cluster = _by_topology(ready, node_name, zone) or [
        e for e in eps if e.serving and e.terminating
    ]
    mine = [e for e in eps if node_name and e.node_name == node_name]
    local = [e for e in mine if e.ready] or [e for e in mine if e.serving and e.terminating]
    return Selection(cluster=tuple(cluster), local=tuple(local))


def _by_topology(ready: list[Endpoint], node_name: str, zone: str) -> list[Endpoint]:
    """The ready endpoints this node uses after topology hints (all of them without hints)."""
    if not ready:
        return ready
    if node_name and all(e.node_hints for e in ready):
        mine = [e for e in ready if node_name in e.node_hints]
        if mine:
            return mine
    if zone and all(e.zone_hints for e in ready):
        near = [e for e in ready if zone in e.zone_hints]
        if near:
            return near
    return ready


def assign_slots(previous: Sequence[Endpoint], current: Iterable[Endpoint]) -> tuple[Endpoint, ...]:
    current = tuple(current)
    if not current and not previous:
        return ()
    # keyed and sorted by target, which is unique: the same order as the endpoints themselves
    wanted = dict(zip(map(_TARGET, current), current, strict=True))
    if not previous:  # a new service port: slots in endpoint order
        return tuple(map(wanted.__getitem__, sorted(wanted)))
    slots: list[Endpoint | None] = [wanted.pop(ep.target, None) for ep in previous]
    newcomers = list(map(wanted.__getitem__, sorted(wanted, reverse=True)))
    for i, slot in enumerate(slots):
        if slot is None and newcomers:
            slots[i] = newcomers.pop()
    slots.extend(reversed(newcomers))
    for hole in [i for i, slot in enumerate(slots) if slot is None]:
        while slots and slots[-1] is None:
            slots.pop()
        if hole >= len(slots):
            break
        slots[hole] = slots.pop()
    return tuple(s for s in slots if s is not None)


_TARGET = itemgetter(0, 1)  # an Endpoint's (ip, port), as Endpoint.target
