"""The objects a transaction adds, flushes or deletes: plain frozen values, as knftables has them.

Names, comments and element parts are checked here (:func:`problem`), so a transaction can latch
the first bad object instead of handing nft a script that fails halfway through parsing. Element
keys and values are tuples of strings, one per concatenated part (``("10.96.0.10", "tcp",
"80")``); a verdict map's value is the verdict text (``("goto cluster-3",)``).
"""

from __future__ import annotations

import functools
import itertools
import operator
import re
from dataclasses import dataclass
from typing import Literal, NamedTuple

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


class Element(NamedTuple):
    """An element of the set ``set`` or the map ``map`` (exactly one of them).

    A named tuple rather than a frozen dataclass like the other objects: a full sync of
    10,000 services makes 120,000 of them, and a tuple is made in a third of the time."""

    key: tuple[str, ...]
    value: tuple[str, ...] = ()
    set: str | None = None
    map: str | None = None
    comment: str | None = None

    @property
    def kind(self) -> str:
        return "element"

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
    """The first problem of many elements: the same rules as :func:`problem` (plus "a map
    element needs a value" when adding), checked with a few passes over all of them (a full
    sync adds 120,000); only when something is wrong are they looked at one by one."""
    if _elements_ok(elements, with_values=with_values):
        return None
    for el in elements:
        if with_values and el.map is not None and not el.value:
            return f"element of map {el.map} needs a value"
        why = problem(el)
        if why:
            return why
    return "invalid element"  # pragma: no cover - _elements_ok and problem() agree


def _elements_ok(elements: list[Element], *, with_values: bool) -> bool:
    """Whether none of the elements has a problem, found with a few passes over all of them."""
    containers = set(map(_CONTAINER, elements))
    for set_, map_ in containers:
        if (set_ is None) == (map_ is None) or _name_problem("set or map", set_ or map_ or ""):
            return False
    keys = list(map(_KEY, elements))
    values = list(map(_VALUE, elements))
    if any(map_ is None for _, map_ in containers):  # set elements among them: no values
        has_value = list(map(bool, values))
        is_map = [m is not None for m in map(_MAP, elements)]
        if has_value != is_map if with_values else any(map(operator.gt, has_value, is_map)):
            return False
    elif with_values and not all(values):
        return False  # a map element without a value
    comments = list(filter(None, map(_COMMENT, elements)))
    if comments:
        text = "\x00".join(comments)
        long = max(map(len, comments)) > COMMENT_MAX or not text.isascii()
        if '"' in text or "\n" in text or (long and _any_too_long(comments)):
            return False
    return (
        all(keys) and _parts_ok(keys, _FORBIDDEN_IN_PART) and _parts_ok(values, _FORBIDDEN_IN_VALUE)
    )


def _any_too_long(comments: list[str]) -> bool:
    return any(len(c.encode()) > COMMENT_MAX for c in comments)


def _parts_ok(tuples: list[tuple[str, ...]], forbidden: re.Pattern[str]) -> bool:
    """No empty part and no forbidden character in any part (each distinct part looked at
    once: addresses, protocols and ports repeat across elements)."""
    parts = set(itertools.chain.from_iterable(tuples))
    return "" not in parts and not forbidden.search("\x00".join(parts))


_CONTAINER = operator.attrgetter("set", "map")
_KEY = operator.attrgetter("key")
_VALUE = operator.attrgetter("value")
_MAP = operator.attrgetter("map")
_COMMENT = operator.attrgetter("comment")
