"""A transaction: a list of (verb, object) operations on one table, rendered as an ``nft -f -``.

Every call "succeeds": the object is checked at once and the first problem is latched in
:attr:`Transaction.err`; running the transaction then raises it instead of starting nft. The
script (``str(tx)``) is plain nft text, one command per line, with runs of element operations
on the same set coalesced into one ``{ ... }`` (nft parses that much faster than one line per
element). ``destroy`` is rendered as ``add`` + ``delete`` (nft 1.0.6 has no ``destroy``), so it
is offered for tables and chains only.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator
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


class Operation(NamedTuple):  # a tuple: a full sync makes 120,000 of them
    verb: Verb
    obj: Object


class Transaction:
    def __init__(self, *, family: Family, table: str) -> None:
        self.family: Family = family
        self.table = table
        self.operations: list[Operation] = []
        self.err: InvalidTransaction | None = None

    def __len__(self) -> int:
        return len(self.operations)

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
        batch = [Operation(verb, e) for e in elements]
        if self.err is None:
            why = elements_problem([op.obj for op in batch], with_values=verb is Verb.ADD)  # type: ignore[misc]
            if why:
                self.err = InvalidTransaction(f"{verb.value} element: {why}")
        self.operations.extend(batch)

    def _op(self, verb: Verb, obj: Object) -> None:
        if self.err is None:
            why = _verb_problem(verb, obj) or problem(obj)
            if why:
                self.err = InvalidTransaction(f"{verb.value} {obj.kind}: {why}")
        self.operations.append(Operation(verb, obj))

    def __str__(self) -> str:
        lines = list(render(self))
        if self.err is not None:
            lines.append(f"# error: {self.err}")
        return "".join(line + "\n" for line in lines)


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
    ops = tx.operations
    i = 0
    while i < len(ops):
        op = ops[i]
        if isinstance(op.obj, Element):
            j = i + 1
            while (
                j < len(ops)
                and j - i < ELEMENTS_PER_LINE
                and ops[j].verb is op.verb
                and isinstance(ops[j].obj, Element)
                and ops[j].obj.container == op.obj.container  # type: ignore[union-attr]
            ):
                j += 1
            batch = [o.obj for o in ops[i:j] if isinstance(o.obj, Element)]
            body = ", ".join(_element(e, with_value=op.verb is not Verb.DELETE) for e in batch)
            yield f"{op.verb.value} element {where} {op.obj.container} {{ {body} }}"
            i = j
            continue
        yield from _line(op, where)
        i += 1


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


def _element(el: Element, *, with_value: bool) -> str:
    text = " . ".join(el.key)
    if el.comment and with_value:
        text += f' comment "{el.comment}"'
    if with_value and el.value:
        text += " : " + " . ".join(el.value)
    return text
