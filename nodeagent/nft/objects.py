"""The objects a transaction adds, flushes or deletes: plain frozen values, as knftables has them.

Names, comments and element parts are checked here (:func:`problem`), so a transaction can latch
the first bad object instead of handing nft a script that fails halfway through parsing. Element
keys and values are tuples of strings, one per concatenated part (``("10.96.0.10", "tcp",
"80")``); a verdict map's value is the verdict text (``("goto cluster-3",)``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Literal

Family = Literal["ip", "ip6", "inet"]
FAMILIES: tuple[Family, ...] = ("ip", "ip6", "inet")
COMMENT_MAX = 128  # NFT_USERDATA_MAXLEN for object and element comments

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]{0,255}$")
_FORBIDDEN_IN_PART = re.compile(r'[\s,{};"#\\]')
_FORBIDDEN_IN_RULE = re.compile(r"[\n\r;#]")
_FORBIDDEN_IN_VALUE = re.compile(r'[\n\r;#,{}"]')


@dataclass(frozen=True, slots=True)
class Table:
    comment: str | None = None

    kind = "table"


@dataclass(frozen=True, slots=True)
class Chain:
    """A chain; ``type``, ``hook`` and ``priority`` together make it a base chain."""

    name: str
    type: str | None = None
    hook: str | None = None
    priority: int | None = None
    policy: str | None = None
    comment: str | None = None

    kind = "chain"

    @property
    def base(self) -> bool:
        return self.hook is not None


@dataclass(frozen=True, slots=True)
class Rule:
    """``rule`` is nft rule syntax without the comment; ``handle`` names a rule in the kernel."""

    chain: str
    rule: str = ""
    comment: str | None = None
    handle: int | None = None

    kind = "rule"


@dataclass(frozen=True, slots=True)
class Set:
    """A named set. Give ``type`` (``ipv4_addr . inet_service``) or ``typeof`` (``ip daddr``)."""

    name: str
    type: str | None = None
    typeof: str | None = None
    flags: tuple[str, ...] = ()
    timeout: int | None = None  # seconds
    size: int | None = None
    comment: str | None = None

    kind = "set"


@dataclass(frozen=True, slots=True)
class Map:
    """A named map; ``type``/``typeof`` include the value after `` : ``."""

    name: str
    type: str | None = None
    typeof: str | None = None
    flags: tuple[str, ...] = ()
    timeout: int | None = None
    size: int | None = None
    comment: str | None = None

    kind = "map"


@dataclass(frozen=True, slots=True)
class Element:
    """An element of the set ``set`` or the map ``map`` (exactly one of them)."""

    key: tuple[str, ...]
    value: tuple[str, ...] = ()
    set: str | None = None
    map: str | None = None
    comment: str | None = None

    kind = "element"

    @property
    def container(self) -> str:
        return self.set or self.map or ""


Object = Table | Chain | Rule | Set | Map | Element


def problem(obj: Object) -> str | None:
    """What is wrong with ``obj`` regardless of the verb, or None."""
    comment = obj.comment
    if comment is not None and (
        '"' in comment or "\n" in comment or len(comment.encode()) > COMMENT_MAX
    ):
        return f"invalid comment {comment!r} (no quotes or newlines, at most {COMMENT_MAX} bytes)"
    match obj:
        case Table():
            return None
        case Chain():
            return _chain_problem(obj)
        case Rule():
            return _name_problem("chain", obj.chain) or _rule_problem(obj.rule)
        case Set() | Map():
            return _set_problem(obj)
        case Element():
            return _element_problem(obj)


@functools.lru_cache(maxsize=4096)
def _name_problem(what: str, name: str) -> str | None:
    if not _NAME.match(name):
        return f"invalid {what} name {name!r}"
    return None


def _chain_problem(chain: Chain) -> str | None:
    base = (chain.type, chain.hook, chain.priority)
    if any(p is not None for p in base) and any(p is None for p in base):
        return f"chain {chain.name}: type, hook and priority go together"
    if chain.policy is not None and chain.hook is None:
        return f"chain {chain.name}: only base chains have a policy"
    return _name_problem("chain", chain.name)


def _rule_problem(rule: str) -> str | None:
    if _FORBIDDEN_IN_RULE.search(rule):
        return f"invalid rule text {rule!r} (one rule, no ';', '#' or newlines)"
    return None


def _set_problem(obj: Set | Map) -> str | None:
    if obj.type is not None and obj.typeof is not None:
        return f"{obj.kind} {obj.name}: give type or typeof, not both"
    spec = obj.type or obj.typeof or ""
    if isinstance(obj, Map) and spec and ":" not in spec:
        return f"map {obj.name}: its type needs a value type after ' : '"
    if isinstance(obj, Set) and ":" in spec:
        return f"set {obj.name}: a set's type has no value (use a Map)"
    if _FORBIDDEN_IN_RULE.search(spec) or any(not re.match(r"^[a-z-]+$", f) for f in obj.flags):
        return f"{obj.kind} {obj.name}: invalid type or flags"
    return _name_problem(obj.kind, obj.name)


def _element_problem(el: Element) -> str | None:
    if (el.set is None) == (el.map is None):
        return "an element belongs to exactly one set or map"
    if not el.key:
        return f"element of {el.container}: empty key"
    if el.set is not None and el.value:
        return f"element of set {el.set}: a set element has no value"
    # one regex over all parts (an element is validated 120,000 times in a big full sync)
    joined = "\x00".join(el.key)
    if "\x00\x00" in f"\x00{joined}\x00" or _FORBIDDEN_IN_PART.search(joined):
        bad = next(p for p in el.key if not p or _FORBIDDEN_IN_PART.search(p))
        return f"element of {el.container}: invalid key part {bad!r}"
    if el.value:
        joined = "\x00".join(el.value)
        if "\x00\x00" in f"\x00{joined}\x00" or _FORBIDDEN_IN_VALUE.search(joined):
            bad = next(p for p in el.value if not p or _FORBIDDEN_IN_VALUE.search(p))
            return f"element of {el.container}: invalid value part {bad!r}"
    return _name_problem("set" if el.set else "map", el.container)


def elements_problem(elements: list[Element], *, with_values: bool) -> str | None:
    """The first problem of many elements, checked in bulk: the same rules as :func:`problem`
    (plus "a map element needs a value" when adding), with one regex over all of their parts."""
    keys: list[str] = []
    values: list[str] = []
    for el in elements:
        if with_values and el.map is not None and not el.value:
            return f"element of map {el.map} needs a value"
        if (el.set is None) == (el.map is None) or el.comment is not None:
            why = problem(el)
            if why:
                return why
        if el.set is not None and el.value:
            return f"element of set {el.set}: a set element has no value"
        keys.extend(el.key)
        values.extend(el.value)
    if (
        "" in keys
        or "" in values
        or any(not e.key for e in elements)
        or _FORBIDDEN_IN_PART.search("\x00".join(keys))
        or _FORBIDDEN_IN_VALUE.search("\x00".join(values))
        or any(_name_problem("set or map", n) for n in {e.container for e in elements})
    ):
        return next(filter(None, (problem(e) for e in elements)), "invalid element")
    return None
