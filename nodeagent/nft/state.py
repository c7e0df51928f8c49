"""What a table holds: chains with their rules, sets and maps with their elements.

The fake keeps its tables as :class:`TableState`; :mod:`nodeagent.nft.listing` builds the same
from ``nft -j list``; the packet tracer walks either. :meth:`TableState.dump` prints the table
as an nft transaction that recreates it, sorted (chains, then sets and maps, then rules in chain
order, then elements), so two dumps compare with ``==``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from nodeagent.nft.objects import Chain, Element, Family, Map, Rule, Set, Table
from nodeagent.nft.transaction import Transaction

Key = tuple[str, ...]


@dataclass(slots=True)
class ChainState:
    chain: Chain
    rules: list[Rule] = field(default_factory=list)


@dataclass(slots=True)
class SetState:
    obj: Set | Map
    elements: dict[Key, Element] = field(default_factory=dict)

    @property
    def is_map(self) -> bool:
        return isinstance(self.obj, Map)

    @property
    def interval(self) -> bool:
        return "interval" in self.obj.flags


@dataclass(slots=True)
class TableState:
    family: Family
    name: str
    table: Table = field(default_factory=Table)
    chains: dict[str, ChainState] = field(default_factory=dict)
    sets: dict[str, SetState] = field(default_factory=dict)
    next_handle: int = 1

    def copy(self) -> TableState:
        return copy.deepcopy(self)

    def rules(self, chain: str) -> list[Rule]:
        return list(self.chains[chain].rules) if chain in self.chains else []

    def elements(self, name: str) -> list[Element]:
        return list(self.sets[name].elements.values()) if name in self.sets else []

    def element(self, name: str, key: Key) -> Element | None:
        state = self.sets.get(name)
        return state.elements.get(key) if state else None

    def base_chains(self, hook: str) -> list[Chain]:
        chains = [c.chain for c in self.chains.values() if c.chain.hook == hook]
        return sorted(chains, key=lambda c: (c.priority or 0, c.name))

    def counts(self) -> tuple[int, int, int]:
        """(chains, rules, set and map elements)."""
        rules = sum(len(c.rules) for c in self.chains.values())
        elements = sum(len(s.elements) for s in self.sets.values())
        return len(self.chains), rules, elements

    def dump(self) -> str:
        tx = Transaction(family=self.family, table=self.name)
        tx.add(self.table)
        for name in sorted(self.chains):
            tx.add(self.chains[name].chain)
        for name in sorted(self.sets):
            tx.add(self.sets[name].obj)
        for name in sorted(self.chains):
            for rule in self.chains[name].rules:
                tx.add(Rule(chain=rule.chain, rule=rule.rule, comment=rule.comment))
        for name in sorted(self.sets):
            for key in sorted(self.sets[name].elements):
                tx.add(self.sets[name].elements[key])
        return str(tx)
