"""``nft -j list`` output to :class:`~nodeagent.nft.state.TableState` and elements.

Rules come back as JSON expression trees; :func:`rule_text` turns the expressions nodeagent
writes back into the text it wrote (``ip daddr . meta l4proto . th dport vmap @service-ips``),
so the packet tracer reads the kernel's table and the fake's alike. nft 1.0.6 has no JSON form
for some statements (``update @map { ... : ... }``): it prints them as text strings, kept as is.
Anything else unknown becomes ``unknown(<json>)``, which the tracer refuses loudly.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from nodeagent.nft.objects import Chain, Element, Family, Map, Rule, Set, Table
from nodeagent.nft.state import ChainState, SetState, TableState

_VERDICTS = ("accept", "drop", "return", "continue")


def table_state(doc: dict[str, Any], *, family: Family, table: str) -> TableState:
    state = TableState(family=family, name=table)
    rules: list[tuple[str, Rule]] = []
    for item in doc.get("nftables", []):
        for kind, body in item.items():
            if not isinstance(body, dict) or body.get("table") not in (None, table):
                continue
            if kind == "table" and body.get("name") == table:
                state.table = Table(comment=body.get("comment"))
            elif kind == "chain":
                state.chains[body["name"]] = ChainState(_chain(body))
            elif kind in ("set", "map"):
                obj = _set(body, kind=kind)
                found = SetState(obj)
                for el in elements(body, kind=kind):
                    found.elements[el.key] = el
                state.sets[obj.name] = found
            elif kind == "rule":
                rule = Rule(
                    chain=body["chain"],
                    rule=" ".join(_stmt(e) for e in body.get("expr", [])),
                    comment=body.get("comment"),
                    handle=body.get("handle"),
                )
                rules.append((rule.chain, rule))
    for chain, rule in rules:
        if chain in state.chains:
            state.chains[chain].rules.append(rule)
    return state


def _chain(body: dict[str, Any]) -> Chain:
    return Chain(
        name=body["name"],
        type=body.get("type"),
        hook=body.get("hook"),
        priority=body.get("prio"),
        policy=body.get("policy") if body.get("hook") else None,
        comment=body.get("comment"),
    )


def _set(body: dict[str, Any], *, kind: str) -> Set | Map:
    raw = body.get("type", "")
    spec = " . ".join(raw) if isinstance(raw, list) else str(raw)
    flags = tuple(body.get("flags", ()))
    common: dict[str, Any] = {
        "name": body["name"],
        "flags": flags,
        "timeout": body.get("timeout"),
        "size": body.get("size"),
        "comment": body.get("comment"),
    }
    if kind == "map":
        value = body.get("map", "")
        value = " . ".join(value) if isinstance(value, list) else str(value)
        return Map(type=f"{spec} : {value}", **common)
    return Set(type=spec, **common)


def elements(body: dict[str, Any], *, kind: Literal["set", "map"]) -> list[Element]:
    name = body["name"]
    found = []
    for item in body.get("elem", []) or []:
        value: tuple[str, ...] = ()
        raw = item
        if kind == "map":
            raw, data = item
            value = _parts(data)
        comment = None
        if isinstance(raw, dict) and "elem" in raw:
            comment = raw["elem"].get("comment")
            raw = raw["elem"]["val"]
        key = _parts(raw)
        if kind == "map":
            found.append(Element(map=name, key=key, value=value, comment=comment))
        else:
            found.append(Element(set=name, key=key, comment=comment))
    return found


def _parts(value: Any) -> tuple[str, ...]:
    if isinstance(value, dict) and "concat" in value:
        return tuple(_scalar(v) for v in value["concat"])
    return (_scalar(value),)


def _scalar(value: Any) -> str:
    if isinstance(value, dict):
        if "prefix" in value:
            return f"{value['prefix']['addr']}/{value['prefix']['len']}"
        if "range" in value:
            low, high = value["range"]
            return f"{low}-{high}"
        for verdict in ("goto", "jump"):
            if verdict in value:
                return f"{verdict} {value[verdict]['target']}"
        for verdict in _VERDICTS:
            if verdict in value:
                return verdict
    return str(value)


def rule_text(exprs: list[Any]) -> str:
    return " ".join(_stmt(e) for e in exprs)


def _stmt(e: Any) -> str:
    if isinstance(e, str):
        return e
    (kind, body), *_ = e.items()
    kind = str(kind)
    if kind == "match":
        return _match(body)
    if kind in ("jump", "goto"):
        return f"{kind} {body['target']}"
    if kind in _VERDICTS:
        return kind
    if kind == "reject":
        return "reject"
    if kind == "vmap":
        return f"{_expr(body['key'])} vmap {_expr(body['data'])}"
    if kind == "masquerade":
        flags = (body or {}).get("flags")
        return "masquerade" + (f" {flags}" if isinstance(flags, str) else "")
    if kind == "mangle":
        return f"{_expr(body['key'])} set {_expr(body['value'])}"
    if kind in ("dnat", "snat") and isinstance(body.get("addr"), dict) and "map" in body["addr"]:
        m = body["addr"]["map"]
        fam = body.get("family", "ip")
        return f"{kind} {fam} addr . port to {_expr(m['key'])} map {_expr(m['data'])}"
    if kind == "counter":
        return "counter"
    return f"unknown({json.dumps(e, sort_keys=True)})"


def _match(body: dict[str, Any]) -> str:
    left, right, op = _expr(body["left"]), _expr(body["right"]), body["op"]
    if isinstance(body["left"], dict) and "&" in body["left"]:
        return f"{left} {op} {right}"
    if op in ("==", "in"):
        return f"{left} {right}"
    return f"{left} {op} {right}"


def _expr(e: Any) -> str:
    if isinstance(e, str | int):
        return str(e)
    if isinstance(e, list):
        return ",".join(_expr(x) for x in e)
    (kind, body), *_ = e.items()
    kind = str(kind)
    if kind == "payload":
        return f"{body['protocol']} {body['field']}"
    if kind == "meta":
        return f"meta {body['key']}"
    if kind == "ct":
        where = f" {body['dir']}" if body.get("dir") else ""
        return f"ct{where} {body['key']}"
    if kind == "concat":
        return " . ".join(_expr(x) for x in body)
    if kind == "fib":
        return f"fib {' '.join(body.get('flags', []))} {body['result']}"
    if kind == "numgen":
        offset = f" offset {body['offset']}" if body.get("offset") else ""
        return f"numgen {body['mode']} mod {body['mod']}{offset}"
    if kind in ("&", "|", "^"):
        a, b = body
        word = {"&": "and", "|": "or", "^": "xor"}[kind]
        return f"{_expr(a)} {word} {_hex(b)}"
    if kind == "prefix":
        return f"{body['addr']}/{body['len']}"
    if kind == "set":
        return "{ " + ", ".join(_expr(x) for x in body) + " }"
    return f"unknown({json.dumps(e, sort_keys=True)})"


def _hex(value: Any) -> str:
    return hex(value) if isinstance(value, int) else _expr(value)
