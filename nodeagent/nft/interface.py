"""The nftables boundary managers depend on: one table of one family, as knftables' Interface.

``nodeagent.nft.runner.NFTables`` drives the ``nft`` binary;
``nodeagent.testing.fake_nft.FakeNFTables`` keeps the table in memory with the same atomicity.
"""

from __future__ import annotations

from typing import Literal, Protocol

from nodeagent.nft.objects import Element, Family
from nodeagent.nft.state import TableState
from nodeagent.nft.transaction import Transaction

ListKind = Literal["chains", "sets", "maps"]


class NFTablesInterface(Protocol):
    @property
    def family(self) -> Family: ...

    @property
    def table(self) -> str: ...

    def new_transaction(self) -> Transaction:
        """An empty transaction on this table."""
        ...

    async def run(self, tx: Transaction) -> None:
        """Apply ``tx`` atomically: all of it or, on any error (raised), nothing."""
        ...

    async def check(self, tx: Transaction) -> None:
        """Validate ``tx`` as :meth:`run` would, applying nothing."""
        ...

    async def list_names(self, kind: ListKind) -> list[str]:
        """Names of this table's chains, sets or maps (empty when the table is absent)."""
        ...

    async def list_elements(self, kind: Literal["set", "map"], name: str) -> list[Element]:
        """The elements of one set or map (NotFound when absent)."""
        ...

    async def ruleset(self) -> TableState | None:
        """The whole table, or None when it does not exist (costly on big tables)."""
        ...
