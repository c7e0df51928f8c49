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

import itertools
from dataclasses import dataclass, field

from nodeagent.nft.objects import Element
from nodeagent.proxy.contribution import Contribution
from nodeagent.proxy.model import ServicePortName

Key = tuple[str, ...]
Slot = tuple[str, Key]  # (set or map, key)
Mark = dict[str, int]  # elements per set or map
Owner = ServicePortName | dict[ServicePortName, Element]
"""Who wants an element: its one owner (nearly always), or each owner's element."""


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
    """Per set or map: the element each key has (``_winners``) and who wants it (``_owners``).

    Both are plain dicts keyed alike. A full sync records the service ports in name order with
    :meth:`add`, which keeps only the winners (the first, smallest, owner of a key wins), so the
    transaction can be built from them at once; :meth:`index` records the owners afterwards,
    while nft loads the transaction, and :meth:`replace` (partial syncs) needs them."""

    def __init__(self) -> None:
        self._winners: dict[str, dict[Key, Element]] = {}
        self._owners: dict[str, dict[Key, Owner]] = {}
        self._contribs: dict[ServicePortName, Contribution] = {}
        self._unindexed: list[ServicePortName] = []
        self._last: ServicePortName | None = None

    def __len__(self) -> int:
        """Number of elements in the table."""
        return sum(map(len, self._winners.values()))

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

    def by_container(self, since: Mark | None = None) -> list[tuple[str, list[Element]]]:
        """The elements of each set and map, sets and maps sorted by name (``since``: only
        those :meth:`add` recorded after :meth:`mark` returned it)."""
        return [
            (name, list(itertools.islice(els.values(), (since or {}).get(name, 0), None)))
            for name, els in sorted(self._winners.items())
        ]

    def mark(self) -> Mark:
        """Where :meth:`add` is now: new elements are recorded after the ones already there."""
        return {name: len(els) for name, els in self._winners.items()}

    def add(self, name: ServicePortName, new: Contribution) -> None:
        """Record a service port that is not there yet, without computing a diff (full syncs);
        names must come in increasing order."""
        assert self._last is None or self._last < name, name
        self._contribs[name] = new
        self._unindexed.append(name)
        self._last = name
        for container, els in new.groups.items():
            winners = self._winners.get(container)
            if winners is None:
                self._winners[container] = dict(els)
            elif winners.keys().isdisjoint(els):  # no one else wants these (the usual case)
                winners.update(els)
            else:  # an earlier (smaller) owner keeps its element
                winners.update({k: el for k, el in els.items() if k not in winners})

    def index(self) -> None:
        """Record who wants each element of the service ports added since the last call."""
        for name in self._unindexed:
            for container, els in self._contribs[name].groups.items():
                owners = self._owners.get(container)
                if owners is None:
                    self._owners[container] = dict.fromkeys(els, name)
                elif owners.keys().isdisjoint(els):
                    owners.update(dict.fromkeys(els, name))
                else:
                    for el in els.values():
                        self._share(name, container, el)
        self._unindexed.clear()

    def replace(self, name: ServicePortName, new: Contribution | None) -> ElementDiff:
        self.index()
        old = self._contribs.pop(name, None)
        slots = {(c, e.key) for c, e in old.elements()} if old else set()
        slots |= {(c, e.key) for c, e in new.elements()} if new else set()
        before = {s: self._effective(s) for s in slots}
        if old is not None:
            for container, el in old.elements():
                self._disown(name, container, el.key)
        if new is not None:
            self._contribs[name] = new
            for container, el in new.elements():
                self._own(name, container, el)
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

    def _own(self, name: ServicePortName, container: str, el: Element) -> None:
        winners = self._winners.setdefault(container, {})
        owners = self._owners.setdefault(container, {})
        have = owners.get(el.key)
        if have is None or have == name:
            owners[el.key] = name
            winners[el.key] = el
        else:
            self._share(name, container, el)

    def _share(self, name: ServicePortName, container: str, el: Element) -> None:
        """``name`` wants ``el`` too (or alone, if no one has its key yet)."""
        owners, winners = self._owners.setdefault(container, {}), self._winners[container]
        have = owners.get(el.key)
        if have is None:
            owners[el.key] = name
            return
        if not isinstance(have, dict):
            have = owners[el.key] = {have: winners[el.key]}
        have[name] = el
        winners[el.key] = _winner(have)

    def _disown(self, name: ServicePortName, container: str, key: Key) -> None:
        owners = self._owners.get(container, {})
        have = owners.get(key)
        if isinstance(have, dict):
            have.pop(name, None)
            if len(have) == 1:
                ((only, el),) = have.items()
                owners[key] = only
                self._winners[container][key] = el
            else:
                self._winners[container][key] = _winner(have)
        elif have is not None and have == name:
            del owners[key]
            del self._winners[container][key]
            if not owners:
                del self._owners[container]
                del self._winners[container]

    def _effective(self, slot: Slot) -> Element | None:
        return self._winners.get(slot[0], {}).get(slot[1])


def _winner(owners: dict[ServicePortName, Element]) -> Element:
    return owners[min(owners)]
