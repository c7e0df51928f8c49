"""The elements one family's table holds, and which service ports want each of them.

Several service ports can want the same element (a Service's ClusterIP in ``cluster-ips`` for
each of its ports, a pod in ``hairpin`` for each Service it backs; two Services claiming one
external IP:port). The element stays while anyone wants it; when owners disagree on a value the
smallest owner name wins, so the outcome does not depend on event order. :meth:`replace`
returns exactly the element deletes and adds that turn the table from before into after,
which is what a partial sync sends (kube-proxy keeps the same kind of copy, its
``nftElementStorage``, for the same reason: never list the table to diff it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from nodeagent.nft.objects import Element
from nodeagent.proxy.contribution import Contribution
from nodeagent.proxy.model import ServicePortName

Slot = tuple[str, tuple[str, ...]]  # (set or map, key)


@dataclass(slots=True)
class ElementDiff:
    deleted: list[Element] = field(default_factory=list)
    added: list[Element] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.deleted or self.added)

    def extend(self, other: ElementDiff) -> None:
        self.deleted.extend(other.deleted)
        self.added.extend(other.added)


class Programmed:
    def __init__(self) -> None:
        self._owners: dict[Slot, dict[ServicePortName, Element]] = {}
        self._contribs: dict[ServicePortName, Contribution] = {}

    def __len__(self) -> int:
        """Number of elements in the table."""
        return len(self._owners)

    def get(self, name: ServicePortName) -> Contribution | None:
        return self._contribs.get(name)

    def names(self) -> list[ServicePortName]:
        return list(self._contribs)

    def chains(self) -> set[str]:
        """The load-balancing and affinity chains some service port uses."""
        wanted: set[str] = set()
        for c in self._contribs.values():
            wanted |= c.chains
        return wanted

    def elements(self) -> Iterator[Element]:
        for owners in self._owners.values():
            yield _winner(owners)

    def add(self, name: ServicePortName, new: Contribution) -> None:
        """Record a service port that is not there yet, without computing a diff (full syncs)."""
        assert name not in self._contribs, name
        self._contribs[name] = new
        owners = self._owners
        for el in new.elements:
            slot = (el.container, el.key)
            if slot in owners:
                owners[slot][name] = el
            else:
                owners[slot] = {name: el}

    def replace(self, name: ServicePortName, new: Contribution | None) -> ElementDiff:
        old = self._contribs.pop(name, None)
        slots = {(e.container, e.key) for e in (old.elements if old else ())}
        slots |= {(e.container, e.key) for e in (new.elements if new else ())}
        before = {s: self._effective(s) for s in slots}
        if old is not None:
            for el in old.elements:
                owners = self._owners[(el.container, el.key)]
                owners.pop(name, None)
                if not owners:
                    del self._owners[(el.container, el.key)]
        if new is not None:
            self._contribs[name] = new
            for el in new.elements:
                self._owners.setdefault((el.container, el.key), {})[name] = el
        diff = ElementDiff()
        for slot in slots:
            was, now = before[slot], self._effective(slot)
            if was is not None and now is not None and was.value == now.value:
                continue
            if was is not None:
                diff.deleted.append(was)
            if now is not None:
                diff.added.append(now)
        return diff

    def _effective(self, slot: Slot) -> Element | None:
        owners = self._owners.get(slot)
        return _winner(owners) if owners else None


def _winner(owners: dict[ServicePortName, Element]) -> Element:
    return owners[min(owners)]
