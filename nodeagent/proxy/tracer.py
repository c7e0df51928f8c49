"""A packet tracer: walk one packet through a table (the fake's, or the kernel's from
``nft -j list``) and report the path, the verdict, the DNAT target and whether it is masqueraded.

It knows the rule vocabulary the proxy writes (see :mod:`nodeagent.proxy.layout`), as
kube-proxy's test tracer does, and refuses anything else with :class:`TraceError` rather than
guess. Hooks run in the kernel's order for the first packet of a connection: from outside,
prerouting, then input (destination local) or forward and postrouting; locally generated,
output, postrouting and, for a local destination, input. Base chains of a hook run by
priority; a DNAT is visible to every later chain. ``numgen random`` forks the trace: by default
every slot is followed, so the outcomes list every endpoint a connection can reach; ``pick``
follows one slot instead, and ``record`` applies ``update @set`` statements to the table (the
kernel does that for affinity), so a second trace sees the client's affinity.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from nodeagent.nft.objects import Element
from nodeagent.nft.state import SetState, TableState

_NAME = r"[A-Za-z0-9_./-]+"
_FIELD = (
    r"(?:ct original ip6? (?:saddr|daddr)|ct original proto-dst|ip6? (?:saddr|daddr)"
    r"|meta l4proto|(?:th|tcp|udp|sctp) dport|numgen random mod \d+(?: offset \d+)?)"
)
_EXPR = rf"{_FIELD}(?: \. {_FIELD})*"
_CLAUSES: list[tuple[str, re.Pattern[str]]] = [
    (k, re.compile(p))
    for k, p in [
        ("dnat", rf"dnat ip6? addr \. port to (?P<key>{_EXPR}) map @(?P<map>{_NAME})"),
        (
            "update",
            rf"update @(?P<set>{_NAME}) \{{ (?P<key>{_EXPR})(?: timeout \S+)?"
            rf" : (?P<value>{_EXPR}) \}}",
        ),
        ("vmap", rf"(?P<key>{_EXPR}) vmap @(?P<map>{_NAME})"),
        ("member", rf"(?P<key>{_EXPR}) (?P<neg>!= )?@(?P<set>{_NAME})"),
        ("mark_test", r"meta mark and (?P<mask>0x[0-9a-f]+) == (?P<value>0x[0-9a-f]+|\d+)"),
        ("mark_set", r"meta mark set meta mark (?P<op>or|xor) (?P<bits>0x[0-9a-f]+)"),
        ("ct_new", r"ct state new"),
        ("ct_dnat", r"ct status dnat"),
        ("proto", r"meta l4proto (?P<proto>tcp|udp|sctp)"),
        ("protos", r"meta l4proto \{ (?P<protos>[a-z]+(?:, [a-z]+)*) \}"),
        ("fib_local", r"fib saddr type local"),
        ("masquerade", r"masquerade(?: fully-random)?"),
        ("reject", r"reject(?: with .*)?"),
        ("jump", rf"(?P<verb>jump|goto) (?P<target>{_NAME})"),
        ("verdict", r"(?P<verdict>return|accept|drop)"),
        ("counter", r"counter(?: packets \d+ bytes \d+)?"),
    ]
]


class TraceError(Exception):
    """The table holds something the tracer cannot follow (a rule fragment or chain)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    verdict: str  # ACCEPT, DROP or REJECT
    dnat: tuple[str, int] | None
    masquerade: bool
    path: tuple[str, ...]

    @property
    def endpoint(self) -> str | None:
        if self.dnat is None:
            return None
        ip, port = self.dnat
        return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


@dataclass(frozen=True, slots=True)
class Trace:
    outcomes: tuple[Outcome, ...]

    @property
    def verdicts(self) -> set[str]:
        return {o.verdict for o in self.outcomes}

    @property
    def endpoints(self) -> list[str]:
        """Every endpoint an accepted connection can reach, sorted."""
        return sorted({o.endpoint for o in self.outcomes if o.endpoint and o.verdict == "ACCEPT"})

    @property
    def masqueraded(self) -> bool:
        return all(o.masquerade for o in self.outcomes)

    def render(self) -> str:
        lines = [f"  {step}" for step in self.outcomes[0].path]
        for o in self.outcomes:
            to = f" -> {o.endpoint}" if o.endpoint else ""
            lines.append(f"{o.verdict}{to}{' (masqueraded)' if o.masquerade else ''}")
        return "\n".join(lines) + "\n"


@dataclass(slots=True)
class _Packet:
    src: str
    dst: str
    proto: str
    dport: int
    orig_dst: str
    orig_dport: int
    mark: int = 0
    dnat: bool = False
    masquerade: bool = False
    path: list[str] = field(default_factory=list)


class Tracer:
    def __init__(
        self,
        table: TableState,
        *,
        local_ips: Iterable[str] = (),
        pick: int | None = None,
        record: bool = False,
    ) -> None:
        self._table = table
        self._local = {_norm(ip) for ip in local_ips}
        self._pick = pick
        self._record = record
        self._index: dict[str, tuple[int, dict[tuple[str, ...], Element]]] = {}

    def trace(self, *, src: str, dst: str, proto: str, dport: int, local: bool = False) -> Trace:
        """Trace a new connection ``src -> dst:dport``; ``local``: sent by the node itself."""
        start = _Packet(_norm(src), _norm(dst), proto, dport, _norm(dst), dport)
        outcomes: list[Outcome] = []
        pending: list[list[int]] = [[]]
        while pending:
            chooser = _Chooser(pending.pop(), self._pick)
            pkt = replace(start, path=[])
            outcomes.append(self._walk(pkt, local, chooser.choose))
            pending.extend(chooser.alternatives())
        return Trace(tuple(outcomes))

    def _walk(self, pkt: _Packet, local: bool, choose: Callable[[int], int]) -> Outcome:
        hooks = ["output"] if local else ["prerouting"]
        verdict = self._hooks(pkt, hooks, choose)
        if verdict == "ACCEPT":
            after = (
                ["postrouting", "input"]
                if local and self._is_local(pkt.dst)
                else ["input"]
                if self._is_local(pkt.dst)
                else (["postrouting"] if local else ["forward", "postrouting"])
            )
            verdict = self._hooks(pkt, after, choose)
        dnat = (pkt.dst, pkt.dport) if pkt.dnat else None
        return Outcome(verdict, dnat, pkt.masquerade, tuple(pkt.path))

    def _is_local(self, ip: str) -> bool:
        return ip in self._local or ipaddress.ip_address(ip).is_loopback

    def _hooks(self, pkt: _Packet, hooks: list[str], choose: Callable[[int], int]) -> str:
        for hook in hooks:
            for chain in self._table.base_chains(hook):
                result = self._chain(chain.name, pkt, choose)
                if result in ("drop", "reject"):
                    return result.upper()
        return "ACCEPT"

    def _chain(self, name: str, pkt: _Packet, choose: Callable[[int], int]) -> str:
        stack: list[tuple[str, int]] = []
        chain, index = name, 0
        while True:
            rules = self._rules(chain)
            result: tuple[str, str] | None = None
            while index < len(rules):
                result = self._rule(chain, rules[index], pkt, choose)
                index += 1
                if result is not None:
                    break
            if result is None or result[0] == "return":
                if not stack:
                    return "accept"
                chain, index = stack.pop()
                continue
            kind, target = result
            if kind == "jump":
                stack.append((chain, index))
            if kind in ("jump", "goto"):
                chain, index = target, 0
                continue
            return kind

    def _rules(self, chain: str) -> list[str]:
        found = self._table.chains.get(chain)
        if found is None:
            raise TraceError(f"jump to missing chain {chain}")
        return [r.rule for r in found.rules]

    def _rule(
        self, chain: str, rule: str, pkt: _Packet, choose: Callable[[int], int]
    ) -> tuple[str, str] | None:
        rest = rule
        while rest:
            kind, m = _clause(rest, chain, rule)
            rest = rest[m.end() :].lstrip()
            outcome = self._clause(kind, m, pkt, choose)
            if outcome is False:
                return None
            if isinstance(outcome, tuple):
                note = _note(outcome, pkt)
                pkt.path.append(f"{chain}: {rule}{'' if rule.endswith(note[4:]) else note}")
                return outcome
        pkt.path.append(f"{chain}: {rule}")
        return None

    def _clause(
        self, kind: str, m: re.Match[str], pkt: _Packet, choose: Callable[[int], int]
    ) -> bool | tuple[str, str]:
        g = m.groupdict()
        match kind:
            case "ct_new" | "counter":
                return True
            case "ct_dnat":
                return pkt.dnat
            case "proto":
                return pkt.proto == g["proto"]
            case "protos":
                return pkt.proto in g["protos"].split(", ")
            case "fib_local":
                return self._is_local(pkt.src)
            case "mark_test":
                return pkt.mark & int(g["mask"], 16) == int(g["value"], 0)
            case "mark_set":
                bits = int(g["bits"], 16)
                pkt.mark = pkt.mark | bits if g["op"] == "or" else pkt.mark ^ bits
                return True
            case "member":
                key = _values(g["key"], pkt, choose)
                if key is None:
                    return False
                return (self._lookup(g["set"], key) is not None) != bool(g["neg"])
            case "vmap":
                key = _values(g["key"], pkt, choose)
                hit = self._lookup(g["map"], key) if key else None
                return _verdict(hit.value[0]) if hit else False
            case "dnat":
                key = _values(g["key"], pkt, choose)
                hit = self._lookup(g["map"], key) if key else None
                if hit is None:
                    return False
                pkt.dst, pkt.dport, pkt.dnat = _norm(hit.value[0]), int(hit.value[1]), True
                return ("accept", "dnat")
            case "update":
                key, value = _values(g["key"], pkt, choose), _values(g["value"], pkt, choose)
                if key is None or value is None:
                    return False
                if self._record:
                    self._table.sets[g["set"]].elements[key] = Element(
                        map=g["set"], key=key, value=value
                    )
                return True
            case "masquerade":
                pkt.masquerade = True
                return ("accept", "masquerade")
            case "reject":
                return ("reject", "")
            case "jump":
                return (g["verb"], g["target"])
            case "verdict":
                return (g["verdict"], "")
        raise AssertionError(kind)  # pragma: no cover

    def _lookup(self, name: str, key: tuple[str, ...]) -> Element | None:
        found = self._table.sets.get(name)
        if found is None:
            raise TraceError(f"lookup in missing set or map {name}")
        if found.interval:
            return _find(found, key)
        size, index = self._index.get(name, (-1, {}))
        if size != len(found.elements):
            index = {tuple(_norm(p) for p in el.key): el for el in found.elements.values()}
            self._index[name] = (len(found.elements), index)
        return index.get(key)


class _Chooser:
    """Replays a prefix of numgen choices and records how many each point had, so every
    combination is explored once (or follows ``pick`` only)."""

    def __init__(self, prefix: list[int], pick: int | None) -> None:
        self._prefix = prefix
        self._pick = pick
        self._made: list[int] = []
        self._arity: list[int] = []

    def choose(self, n: int) -> int:
        i = len(self._made)
        if self._pick is not None:
            value = self._pick % n
        else:
            value = self._prefix[i] if i < len(self._prefix) else 0
        self._made.append(value)
        self._arity.append(n if self._pick is None else 1)
        return value

    def alternatives(self) -> list[list[int]]:
        found: list[list[int]] = []
        for i in range(len(self._prefix), len(self._made)):
            found.extend([*self._made[:i], alt] for alt in range(1, self._arity[i]))
        return found


def _clause(rest: str, chain: str, rule: str) -> tuple[str, re.Match[str]]:
    for kind, pattern in _CLAUSES:
        m = pattern.match(rest)
        if m and (m.end() == len(rest) or rest[m.end()] == " "):
            return kind, m
    raise TraceError(f"cannot follow {rest!r} in chain {chain} rule {rule!r}")


def _values(expr: str, pkt: _Packet, choose: Callable[[int], int]) -> tuple[str, ...] | None:
    """The key ``expr`` builds for ``pkt``; None when a protocol's field (``udp dport``) does
    not apply to its protocol (nft matches the protocol first)."""
    values = []
    for part in expr.split(" . "):
        proto = part.split(" ", 1)[0]
        if proto in ("tcp", "udp", "sctp") and proto != pkt.proto:
            return None
        if part.startswith("numgen"):
            nums = [int(n) for n in re.findall(r"\d+", part)]
            mod, offset = nums[0], nums[1] if len(nums) > 1 else 0
            values.append(str(offset + choose(mod)))
        elif part == "ct original proto-dst":
            values.append(str(pkt.orig_dport))
        elif part.startswith("ct original"):
            values.append(pkt.orig_dst)
        elif part.endswith("saddr"):
            values.append(pkt.src)
        elif part.endswith("daddr"):
            values.append(pkt.dst)
        elif part == "meta l4proto":
            values.append(pkt.proto)
        else:
            values.append(str(pkt.dport))
    return tuple(values)


def _find(found: SetState, key: tuple[str, ...]) -> Element | None:
    for el in found.elements.values():
        parts = tuple(_norm(p) for p in el.key)
        if len(parts) != len(key):
            continue
        if all(_part_matches(p, k) for p, k in zip(parts, key, strict=True)):
            return el
    return None


def _part_matches(part: str, value: str) -> bool:
    if part == value:
        return True
    if "/" in part:
        try:
            return ipaddress.ip_address(value) in ipaddress.ip_network(part, strict=False)
        except ValueError:
            return False
    return False


def _norm(part: str) -> str:
    try:
        return str(ipaddress.ip_address(part))
    except ValueError:
        pass
    if part.isdigit():
        return str(int(part))
    if "/" in part:
        try:
            return str(ipaddress.ip_network(part, strict=False))
        except ValueError:
            return part
    return part.lower()


def _verdict(text: str) -> tuple[str, str]:
    verb, _, target = text.partition(" ")
    return (verb, target)


def _note(outcome: tuple[str, str], pkt: _Packet) -> str:
    if outcome == ("accept", "dnat"):
        return f" => dnat to {pkt.dst}:{pkt.dport}"
    if outcome == ("accept", "masquerade"):
        return " => masquerade"
    return f" => {' '.join(p for p in outcome if p)}"
