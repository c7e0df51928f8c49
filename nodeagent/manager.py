"""What a manager is, and the null manager.

A manager owns one concern (node lease, node status, pod workers, service proxy, ...). It is a
class whose constructor takes keyword-only injected collaborators and does no I/O, and whose
``async def run()`` loops until cancelled. Managers never spawn unsupervised tasks and never
install signal handlers; the agent does both.
"""

from __future__ import annotations

import asyncio
from typing import Protocol, final


class Manager(Protocol):
    @property
    def name(self) -> str:
        """Short stable name, used in logs, task names and STATUS=."""
        ...

    async def run(self) -> None:
        """Do the manager's work until cancelled. Raising means the manager crashed."""
        ...


@final
class NullManager:
    """Does nothing until cancelled: lets the agent start, report READY and stop cleanly
    before any real manager is wired in, and stands in for disabled features."""

    def __init__(self, *, name: str = "null") -> None:
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    async def run(self) -> None:
        await asyncio.Event().wait()
