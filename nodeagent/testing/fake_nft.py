"""An in-memory nftables table with nft's transaction semantics (as knftables' Fake).

``run(tx)`` copies the table, applies every operation to the copy and swaps it in only when all
of them succeeded, so a failing operation leaves the table untouched, like the kernel's atomic
commit. Errors are the real ones' classes (NotFound, Exists, Busy) for the same causes, found
by experiment with nft 1.0.6: a rule's ``@set`` lookup or ``jump``/``goto`` target and a verdict
map element's target must exist; a chain with rules, or still jumped to, and a set still looked
up are Busy on delete; ``add`` of an existing map key with another value is Exists.
:attr:`last_transaction` is the last transaction run (failed or not); :meth:`dump` prints the
table sorted; :meth:`state` is the live table for the packet tracer, which may record dynamic
set updates into it as the kernel would.
"""

from __future__ import annotations

import re
from typing import Literal

from nodeagent.nft.errors import Busy, Exists, NftError, NotFound
from nodeagent.nft.interface import ListKind
from nodeagent.nft.objects import Chain, Element, Family, Map, Rule, Set, Table
from nodeagent.nft.state import ChainState, SetState, TableState
from nodeagent.nft.transaction import Operation, Transaction, Verb

_SET_REF = re.compile(r"@([A-Za-z0-9_./-]+)")
_CHAIN_REF = re.compile(r"\b(?:jump|goto)\s+([A-Za-z0-9_./-]+)")


class FakeNFTables:
    def __init__(self, *, family: Family = "ip", table: str = "nodeagent") -> None:
        self._family: Family = family
        self._table = table
        self._state: TableState | None = None
        self.last_transaction: Transaction | None = None
        self.transactions: list[Transaction] = []
        self.fail_next: list[NftError] = []
        """Errors raised by the next runs, one each, before anything is applied."""

    @property
    def family(self) -> Family:
        return self._family

    @property
    def table(self) -> str:
        return self._table

    def new_transaction(self) -> Transaction:
        return Transaction(family=self._family, table=self._table)

    async def run(self, tx: Transaction) -> None:
        self.last_transaction = tx
        self.transactions.append(tx)
        self._state = self._apply(tx)

    async def check(self, tx: Transaction) -> None:
        self._apply(tx)

    async def list_names(self, kind: ListKind) -> list[str]:
        if self._state is None:
            return []
        if kind == "chains":
            return sorted(self._state.chains)
        want = Map if kind == "maps" else Set
        return sorted(n for n, s in self._state.sets.items() if isinstance(s.obj, want))

    async def list_elements(self, kind: Literal["set", "map"], name: str) -> list[Element]:
        found = self._state.sets.get(name) if self._state else None
        if found is None or found.obj.kind != kind:
            raise NotFound(f"{kind} {self._family} {self._table} {name}: no such {kind}")
        return list(found.elements.values())

    async def ruleset(self) -> TableState | None:
        return self._state.copy() if self._state else None

    # --- test helpers ------------------------------------------------------------------------

    def state(self) -> TableState | None:
        """The live table (not a copy)."""
        return self._state

    def dump(self) -> str:
        return self._state.dump() if self._state else ""

    # --- applying ------------------------------------------------------------------------------

    def _apply(self, tx: Transaction) -> TableState | None:
        if self.fail_next:
            raise self.fail_next.pop(0)
        if tx.err is not None:
            raise tx.err
        if (tx.family, tx.table) != (self._family, self._table):
            raise NftError(f"transaction for {tx.family} {tx.table} run on {self._family}")
        work = self._state.copy() if self._state else None
        for op in tx.operations:
            work = _Applier(work, self._family, self._table).apply(op)
        return work


class _Applier:
    def __init__(self, state: TableState | None, family: Family, table: str) -> None:
        self.state = state
        self.family = family
        self.table = table

    def apply(self, op: Operation) -> TableState | None:
        obj = op.obj
        if isinstance(obj, Table):
            self._table_op(op.verb)
            return self.state
        if self.state is None:
            raise NotFound(f"{op.verb.value} {obj.kind}: table {self.family} {self.table} missing")
        match obj:
            case Chain():
                self._chain_op(self.state, op.verb, obj)
            case Rule():
                self._rule_op(self.state, op.verb, obj)
            case Set() | Map():
                self._set_op(self.state, op.verb, obj)
            case Element():
                self._element_op(self.state, op.verb, obj)
        return self.state

    def _table_op(self, verb: Verb) -> None:
        exists = self.state is not None
        if verb is Verb.CREATE and exists:
            raise Exists(f"table {self.family} {self.table} exists")
        if verb is Verb.DELETE and not exists:
            raise NotFound(f"table {self.family} {self.table} missing")
        if verb in (Verb.ADD, Verb.CREATE) and not exists:
            self.state = TableState(family=self.family, name=self.table)
        elif verb in (Verb.DELETE, Verb.DESTROY):
            self.state = None
        elif verb is Verb.FLUSH and self.state is not None:
            for chain in self.state.chains.values():
                chain.rules.clear()

    def _chain_op(self, st: TableState, verb: Verb, chain: Chain) -> None:
        have = st.chains.get(chain.name)
        if verb in (Verb.ADD, Verb.CREATE):
            if have and verb is Verb.CREATE:
                raise Exists(f"chain {chain.name} exists")
            if not have:
                st.chains[chain.name] = ChainState(chain)
            return
        if have is None:
            if verb is Verb.DESTROY:
                return
            raise NotFound(f"chain {chain.name} missing")
        if verb in (Verb.FLUSH, Verb.DESTROY):
            have.rules.clear()
        if verb in (Verb.DELETE, Verb.DESTROY):
            if have.rules or _chain_referenced(st, chain.name):
                raise Busy(f"chain {chain.name} is not empty or still referenced")
            del st.chains[chain.name]

    def _rule_op(self, st: TableState, verb: Verb, rule: Rule) -> None:
        chain = st.chains.get(rule.chain)
        if chain is None:
            raise NotFound(f"chain {rule.chain} missing")
        index = None
        if rule.handle is not None:
            index = next((i for i, r in enumerate(chain.rules) if r.handle == rule.handle), None)
            if index is None:
                raise NotFound(f"rule handle {rule.handle} in {rule.chain} missing")
        if verb is Verb.DELETE:
            assert index is not None
            del chain.rules[index]
            return
        _check_refs(st, rule.rule)
        new = Rule(chain=rule.chain, rule=rule.rule, comment=rule.comment, handle=st.next_handle)
        st.next_handle += 1
        if verb is Verb.REPLACE:
            assert index is not None
            chain.rules[index] = new
        elif verb is Verb.INSERT:
            chain.rules.insert(index or 0, new)
        else:
            chain.rules.insert(len(chain.rules) if index is None else index + 1, new)

    def _set_op(self, st: TableState, verb: Verb, obj: Set | Map) -> None:
        have = st.sets.get(obj.name)
        if have is not None and have.obj.kind != obj.kind:
            raise Exists(f"{obj.name} exists as a {have.obj.kind}")
        if verb in (Verb.ADD, Verb.CREATE):
            if have is None:
                st.sets[obj.name] = SetState(obj)
            elif verb is Verb.CREATE or _definition(have.obj) != _definition(obj):
                raise Exists(f"{obj.kind} {obj.name} exists")
            return
        if have is None:
            raise NotFound(f"{obj.kind} {obj.name} missing")
        if verb is Verb.FLUSH:
            have.elements.clear()
        elif verb is Verb.DELETE:
            if any(
                obj.name in _SET_REF.findall(r.rule) for c in st.chains.values() for r in c.rules
            ):
                raise Busy(f"{obj.kind} {obj.name} is still used by a rule")
            del st.sets[obj.name]

    def _element_op(self, st: TableState, verb: Verb, el: Element) -> None:
        target = st.sets.get(el.container)
        want = "map" if el.map else "set"
        if target is None or target.obj.kind != want:
            raise NotFound(f"{want} {el.container} missing")
        have = target.elements.get(el.key)
        if verb is Verb.DELETE:
            if have is None:
                raise NotFound(f"element {' . '.join(el.key)} of {el.container} missing")
            del target.elements[el.key]
            return
        if have is not None and (verb is Verb.CREATE or have.value != el.value):
            raise Exists(f"element {' . '.join(el.key)} of {el.container} exists")
        for part in el.value:
            _check_refs(st, part)
        if have is None:
            target.elements[el.key] = el


def _definition(obj: Set | Map) -> tuple[object, ...]:
    return (obj.type, obj.typeof, tuple(sorted(obj.flags)), obj.timeout, obj.size)


def _check_refs(st: TableState, text: str) -> None:
    for name in _SET_REF.findall(text):
        if name not in st.sets:
            raise NotFound(f"set or map {name} missing (used by {text!r})")
    for name in _CHAIN_REF.findall(text):
        if name not in st.chains:
            raise NotFound(f"chain {name} missing (used by {text!r})")


def _chain_referenced(st: TableState, name: str) -> bool:
    for chain in st.chains.values():
        for rule in chain.rules:
            if name in _CHAIN_REF.findall(rule.rule):
                return True
    for s in st.sets.values():
        for el in s.elements.values():
            if any(name in _CHAIN_REF.findall(v) for v in el.value):
                return True
    return False
