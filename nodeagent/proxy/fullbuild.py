"""The rules of a full sync, built in steps of service ports taken in name order.

A full sync usually builds everything before it sends one transaction; a table that holds
nothing yet is loaded step by step (see :mod:`nodeagent.proxy.render`), each step's elements
being those :class:`~nodeagent.proxy.programmed.Programmed` recorded since the last.
"""

from __future__ import annotations

from collections.abc import Iterable

from nodeagent.proxy.contribution import Contribution, contribute
from nodeagent.proxy.gcpause import paused_gc
from nodeagent.proxy.layout import Layout
from nodeagent.proxy.model import Selection, ServicePort, ServicePortName
from nodeagent.proxy.programmed import Programmed

Desired = tuple[ServicePort, Selection]
Changes = list[tuple[Contribution | None, Contribution | None]]
"""(before, after) of each service port a sync touched; None: not there."""


class FullBuild:
    """Builds the service ports of ``desired``, which come in increasing name order (and may
    be produced lazily: a step decodes only what it builds)."""

    def __init__(
        self,
        *,
        layout: Layout,
        previous: Programmed,
        desired: Iterable[tuple[ServicePortName, Desired]],
    ) -> None:
        self.layout = layout
        self.previous = previous
        self.fresh = Programmed()
        self.changes: Changes = []
        self.chains: set[str] = set()
        """The load-balancing and affinity chains the service ports built so far use."""
        self._desired = iter(desired)
        self._next = next(self._desired, None)
        self._built: set[ServicePortName] = set()

    @property
    def finished(self) -> bool:
        return self._next is None

    def step(self, count: int = 0) -> None:
        """Build the next ``count`` service ports (0: all the rest)."""
        if self._next is None:
            return
        with paused_gc():
            built = 0
            while self._next is not None and (count <= 0 or built < count):
                name, (sp, sel) = self._next
                before = self.previous.get(name)
                new = contribute(sp, sel, layout=self.layout, previous=before)
                self.fresh.add(name, new)
                self.changes.append((before, new))
                self.chains |= new.chains
                self._built.add(name)
                built += 1
                self._next = next(self._desired, None)
        if self._next is None:  # and the service ports that are gone
            gone = [n for n in self.previous.names() if n not in self._built]
            self.changes += [(self.previous.get(n), None) for n in gone]
