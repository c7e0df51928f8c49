"""A transaction: a list of (verb, object) operations on one table, rendered as an ``nft -f -``.

Every call "succeeds": the object is checked at once and the first problem is latched in
:attr:`Transaction.err`; running the transaction then raises it instead of starting nft. The
script (``str(tx)``) is plain nft text, one command per line, with runs of element operations
on the same set coalesced into one ``{ ... }`` (nft parses that much faster than one line per
element). ``destroy`` is rendered as ``add`` + ``delete`` (nft 1.0.6 has no ``destroy``), so it
is offered for tables and chains only.

Elements added in bulk (:meth:`Transaction.add_elements`, 120,000 of them in a big full sync)
are kept as one run, checked and rendered with a few passes over the whole run; the per-element
:attr:`Transaction.operations` view is built only when someone asks for it (the fake, tests).
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable, Iterator
from operator import attrgetter
from typing import NamedTuple

from nodeagent.nft.errors import InvalidTransaction
from nodeagent.nft.objects import (
    Chain,
    Element,
    Family,
    Map,
    Object,
    Rule,
    Set,
    Table,
    elements_problem,
    problem,
)

ELEMENTS_PER_LINE = 1000


class Verb(enum.Enum):
    ADD = "add"
    CREATE = "create"
    INSERT = "insert"
    REPLACE = "replace"
    FLUSH = "flush"
    DELETE = "delete"
    DESTROY = "destroy"


_ALLOWED: dict[Verb, tuple[type, ...]] = {
    Verb.ADD: (Table, Chain, Rule, Set, Map, Element),
    Verb.CREATE: (Table, Chain, Set, Map, Element),
    Verb.INSERT: (Rule,),
    Verb.REPLACE: (Rule,),
    Verb.FLUSH: (Table, Chain, Set, Map),
    Verb.DELETE: (Table, Chain, Rule, Set, Map, Element),
    Verb.DESTROY: (Table, Chain),
}


class Operation(NamedTuple):
    verb: Verb
    obj: Object


class _Run(NamedTuple):
    """Element operations added in bulk: one verb, many elements."""

    verb: Verb
    elements: list[Element]


class Transaction:
    def __init__(self, *, family: Family, table: str) -> None:
        self.family: Family = family
        self.table = table
        self.err: InvalidTransaction | None = None
        self._items: list[Operation | _Run] = []
        self._count = 0
        self._operations: list[Operation] | None = None
        self._script: str | None = None

    def __len__(self) -> int:
        return self._count

    @property
    def operations(self) -> list[Operation]:
        """Every operation in order, one per object (elements of a bulk add one each)."""
        if self._operations is None:
            ops: list[Operation] = []
            for item in self._items:
                if isinstance(item, _Run):
                    ops += [Operation(item.verb, el) for el in item.elements]
                else:
                    ops.append(item)
            self._operations = ops
        return self._operations

    def add(self, obj: Object) -> None:
        """Create if absent (rules are appended; elements must not change value)."""
        self._op(Verb.ADD, obj)

    def create(self, obj: Object) -> None:
        """Create; fails with Exists if present."""
        self._op(Verb.CREATE, obj)

    def insert(self, obj: Rule) -> None:
        """Prepend a rule (or insert it before ``obj.handle``)."""
        self._op(Verb.INSERT, obj)

    def replace(self, obj: Rule) -> None:
        self._op(Verb.REPLACE, obj)

    def flush(self, obj: Table | Chain | Set | Map) -> None:
        """Remove a chain's rules or a set's elements (a table: all its chains' rules)."""
        self._op(Verb.FLUSH, obj)

    def delete(self, obj: Object) -> None:
        self._op(Verb.DELETE, obj)

    def destroy(self, obj: Table | Chain) -> None:
        """Delete if present (emulated: add, flush, delete)."""
        self._op(Verb.DESTROY, obj)

    def add_elements(self, elements: Iterable[Element]) -> None:
        """``add`` of many elements, validated in one pass (full syncs add 100,000s)."""
        self._elements(Verb.ADD, elements)

    def delete_elements(self, elements: Iterable[Element]) -> None:
        self._elements(Verb.DELETE, elements)

    def _elements(self, verb: Verb, elements: Iterable[Element]) -> None:
        batch = list(elements)
        if not batch:
            return
        if self.err is None:
            why = elements_problem(batch, with_values=verb is Verb.ADD)
            if why:
                self.err = InvalidTransaction(f"{verb.value} element: {why}")
        self._items.append(_Run(verb, batch))
        self._count += len(batch)
        self._operations = self._script = None

    def _op(self, verb: Verb, obj: Object) -> None:
        if self.err is None:
            why = _verb_problem(verb, obj) or problem(obj)
            if why:
                self.err = InvalidTransaction(f"{verb.value} {obj.kind}: {why}")
        self._items.append(Operation(verb, obj))
        self._count += 1
        self._operations = self._script = None

    def __str__(self) -> str:
        """The script, rendered once until the transaction changes (so it can be rendered
        ahead of the run, while nft is busy with the transaction before)."""
        if self._script is None:
            lines = list(render(self))
            if self.err is not None:
                lines.append(f"# error: {self.err}")
            self._script = "".join(line + "\n" for line in lines)
        return self._script


def _verb_problem(verb: Verb, obj: Object) -> str | None:
    if not isinstance(obj, _ALLOWED[verb]):
        return f"cannot {verb.value} a {obj.kind}"
    match obj:
        case Rule(rule=text, handle=handle):
            if verb in (Verb.REPLACE, Verb.DELETE) and handle is None:
                return f"{verb.value} needs the rule's handle"
            if verb is not Verb.DELETE and not text:
                return "empty rule"
        case Set() | Map() if verb in (Verb.ADD, Verb.CREATE):
            if obj.type is None and obj.typeof is None:
                return f"{obj.kind} {obj.name} needs a type or typeof"
        case Element(map=m, value=value) if verb in (Verb.ADD, Verb.CREATE):
            if m is not None and not value:
                return f"element of map {m} needs a value"
    return None


def render(tx: Transaction) -> Iterator[str]:
    """The nft script lines of ``tx``."""
    where = f"{tx.family} {tx.table}"
    pending: list[Element] = []
    verb, container = Verb.ADD, ""
    for item in tx._items:
        if isinstance(item, _Run):
            batch, item_verb = item.elements, item.verb
        elif isinstance(item.obj, Element):
            batch, item_verb = [item.obj], item.verb
        else:
            yield from _element_lines(verb, where, container, pending)
            pending = []
            yield from _line(item, where)
            continue
        for (set_, map_), group in itertools.groupby(batch, key=_CONTAINER):
            name = set_ or map_ or ""
            if (item_verb, name) != (verb, container):
                yield from _element_lines(verb, where, container, pending)
                pending, verb, container = [], item_verb, name
            pending.extend(group)
    yield from _element_lines(verb, where, container, pending)


_CONTAINER = attrgetter("set", "map")
_KEY = attrgetter("key")


def _element_lines(verb: Verb, where: str, container: str, els: list[Element]) -> Iterator[str]:
    """One command per ELEMENTS_PER_LINE elements of one set or map."""
    head = f"{verb.value} element {where} {container} {{ "
    with_value = verb is not Verb.DELETE
    for i in range(0, len(els), ELEMENTS_PER_LINE):
        yield head + _body(els[i : i + ELEMENTS_PER_LINE], with_value=with_value) + " }"


def _body(els: list[Element], *, with_value: bool) -> str:
    keys = map(" . ".join, map(_KEY, els))
    if not with_value:
        return ", ".join(keys)
    texts = []
    for key, el in zip(keys, els, strict=True):
        text = f'{key} comment "{el.comment}"' if el.comment else key
        texts.append(f"{text} : {' . '.join(el.value)}" if el.value else text)
    return ", ".join(texts)


def _line(op: Operation, where: str) -> Iterator[str]:
    obj, verb = op.obj, op.verb.value
    match obj:
        case Table():
            if op.verb is Verb.DESTROY:
                yield f"add table {where}"
                yield f"delete table {where}"
            elif op.verb in (Verb.ADD, Verb.CREATE) and obj.comment:
                yield f'{verb} table {where} {{ comment "{obj.comment}" ; }}'
            else:
                yield f"{verb} table {where}"
        case Chain():
            name = f"{where} {obj.name}"
            if op.verb is Verb.DESTROY:
                yield f"add chain {name}"
                yield f"flush chain {name}"
                yield f"delete chain {name}"
            elif op.verb in (Verb.ADD, Verb.CREATE):
                yield f"{verb} chain {name}{_chain_spec(obj)}"
            else:
                yield f"{verb} chain {name}"
        case Rule():
            yield _rule(verb, where, obj)
        case Set() | Map():
            if op.verb in (Verb.ADD, Verb.CREATE):
                yield f"{verb} {obj.kind} {where} {obj.name} {_set_spec(obj)}"
            else:
                yield f"{verb} {obj.kind} {where} {obj.name}"
        case Element():  # pragma: no cover - batched by render()
            raise AssertionError("elements are rendered in batches")


def _chain_spec(chain: Chain) -> str:
    parts = []
    if chain.base:
        parts.append(f"type {chain.type} hook {chain.hook} priority {chain.priority} ;")
        if chain.policy:
            parts.append(f"policy {chain.policy} ;")
    if chain.comment:
        parts.append(f'comment "{chain.comment}" ;')
    return f" {{ {' '.join(parts)} }}" if parts else ""


def _rule(verb: str, where: str, rule: Rule) -> str:
    head = f"{verb} rule {where} {rule.chain}"
    if rule.handle is not None:
        head += f" handle {rule.handle}"
    if verb == "delete":
        return head
    text = f"{head} {rule.rule}"
    return f'{text} comment "{rule.comment}"' if rule.comment else text


def _set_spec(obj: Set | Map) -> str:
    parts = [f"type {obj.type} ;" if obj.type else f"typeof {obj.typeof} ;"]
    if obj.flags:
        parts.append(f"flags {','.join(obj.flags)} ;")
    if obj.timeout is not None:
        parts.append(f"timeout {obj.timeout}s ;")
    if obj.size is not None:
        parts.append(f"size {obj.size} ;")
    if obj.comment:
        parts.append(f'comment "{obj.comment}" ;')
    return f"{{ {' '.join(parts)} }}"
