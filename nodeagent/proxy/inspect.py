"""The service table as programmed, read back from a table: service -> entry -> chain ->
endpoints. Pure; works on the kernel's listing and on the fake alike (element comments carry
the service port names)."""

from __future__ import annotations

from dataclasses import dataclass

from nodeagent.nft.state import TableState
from nodeagent.proxy.layout import (
    AFFINITY_NODEPORTS,
    AFFINITY_SERVICES,
    NO_ENDPOINT_NODEPORTS,
    NO_ENDPOINT_SERVICES,
    NO_LOCAL_CHAIN,
    REJECT_CHAIN,
    SERVICE_IPS,
    SERVICE_NODEPORTS,
    Shape,
    endpoints_map,
)
from nodeagent.proxy.model import PROTOCOLS


@dataclass(frozen=True, slots=True)
class Row:
    service: str
    entry: str  # 10.96.0.10:80/tcp, [fd00::1]:80/tcp, or *:30080/tcp for a NodePort
    chain: str  # the load-balancing chain, or what happens without endpoints
    endpoints: tuple[str, ...]
    local_endpoints: tuple[str, ...] = ()  # Local policy: the endpoints external clients use
    affinity: str = ""


def service_table(state: TableState) -> list[Row]:
    rows = []
    for vmap, nodeport, none_map, aff_map in (
        (SERVICE_IPS, False, NO_ENDPOINT_SERVICES, AFFINITY_SERVICES),
        (SERVICE_NODEPORTS, True, NO_ENDPOINT_NODEPORTS, AFFINITY_NODEPORTS),
    ):
        slots: dict[tuple[str, ...], dict[int, str]] = {}
        for proto in PROTOCOLS:
            for el in state.elements(endpoints_map(proto, nodeport=nodeport)):
                *service, slot = el.key
                entry = (proto, *service) if nodeport else (service[0], proto, *service[1:])
                slots.setdefault(entry, {})[int(slot)] = _target(*el.value)
        for el in state.elements(vmap):
            chain = el.value[0].removeprefix("goto ")
            eps = [slots.get(el.key, {})[i] for i in sorted(slots.get(el.key, {}))]
            shape = Shape.parse(chain)
            local: list[str] = []
            if shape and shape.local_policy:
                local, eps = eps[: shape.n], eps[shape.n :]
            aff = state.element(aff_map, el.key)
            rows.append(
                Row(
                    service=el.comment or "?",
                    entry=_entry(el.key),
                    chain=chain,
                    endpoints=tuple(eps),
                    local_endpoints=tuple(local),
                    affinity=aff.value[0].removeprefix("goto affinity-") + "s" if aff else "",
                )
            )
        for el in state.elements(none_map):
            if state.element(vmap, el.key) is None:
                rows.append(Row(el.comment or "?", _entry(el.key), _no_endpoints(el.value[0]), ()))
    return sorted(rows, key=lambda r: (r.service, r.entry))


def render(rows: list[Row]) -> str:
    header = ("SERVICE", "ENTRY", "CHAIN", "ENDPOINTS")
    table = [header]
    for r in rows:
        eps = " ".join(r.endpoints) or "-"
        if r.local_endpoints or r.chain.startswith(("external-local", "nodeport-local")):
            eps = f"local: {' '.join(r.local_endpoints) or '-'}; pods and node: {eps}"
        chain = f"{r.chain} (affinity {r.affinity})" if r.affinity else r.chain
        table.append((r.service, r.entry, chain, eps))
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    return "".join(
        f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]:<{widths[2]}}  {row[3]}\n".rstrip()
        + "\n"
        for row in table
    )


def _entry(key: tuple[str, ...]) -> str:
    if len(key) == 2:
        proto, port = key
        return f"*:{port}/{proto} (nodeport)"
    ip, proto, port = key
    return f"{_target(ip, port)}/{proto}"


def _target(ip: str, port: str) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def _no_endpoints(verdict: str) -> str:
    if verdict == f"goto {REJECT_CHAIN}":
        return "reject (no endpoints)"
    if verdict == f"goto {NO_LOCAL_CHAIN}":
        return "drop external (no local endpoints)"
    return f"{verdict} (no local endpoints)"
