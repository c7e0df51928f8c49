"""One family's table: turns service ports into transactions and runs them, then cleans up.

:meth:`FamilyTable.full` rebuilds what the table holds from every service port and applies it
in one transaction (see :mod:`nodeagent.proxy.render`); :meth:`FamilyTable.partial` applies only
the element changes of the given service ports. After a transaction commits, stale UDP flows
are deleted; before it is built, affinity entries that point at endpoints a service no longer
uses are listed so the same transaction deletes them.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from nodeagent.nft.errors import NftError
from nodeagent.nft.interface import NFTablesInterface
from nodeagent.nft.objects import Element, Family
from nodeagent.nft.transaction import Transaction
from nodeagent.proxy.conntrack import Conntrack, ConntrackError
from nodeagent.proxy.contribution import NODEPORT, Contribution, contribute
from nodeagent.proxy.layout import AFFINITY, Layout
from nodeagent.proxy.model import Selection, ServicePort, ServicePortName
from nodeagent.proxy.programmed import ElementDiff, Programmed
from nodeagent.proxy.render import full_sync, partial_sync
from nodeagent.proxy.settings import ProxySettings

Desired = tuple[ServicePort, Selection]
Target = tuple[str, int, str, int]


@dataclass(frozen=True, slots=True)
class Applied:
    operations: int
    stale_flows: int = 0
    conntrack_errors: tuple[str, ...] = ()


class FamilyTable:
    def __init__(
        self,
        *,
        family: Family,
        settings: ProxySettings,
        nft: NFTablesInterface,
        conntrack: Conntrack,
    ) -> None:
        self.family = family
        self.layout = Layout(family=family, settings=settings)
        self.nft = nft
        self.conntrack = conntrack
        self.programmed = Programmed()
        self.chains_present: set[str] = set()
        self.last_transaction: Transaction | None = None

    def counts(self) -> tuple[int, int, int]:
        """(chains, rules, elements) as programmed."""
        static = self.layout.chains()
        dynamic = [self.layout.dynamic_rules(c) or [] for c in self.chains_present]
        rules = sum(len(r) for _, r in static) + sum(len(r) for r in dynamic)
        elements = len(self.programmed) + len(self.layout.static_elements())
        return len(static) + len(dynamic), rules, elements

    async def full(self, desired: Mapping[ServicePortName, Desired]) -> Applied:
        old = self.programmed
        fresh = Programmed()
        changes: list[tuple[Contribution | None, Contribution | None]] = []
        with paused_gc():
            for name in sorted(desired):
                sp, sel = desired[name]
                before = old.get(name)
                new = contribute(sp, sel, layout=self.layout, previous=before)
                fresh.add(name, new)
                changes.append((before, new))
        changes += [(old.get(n), None) for n in old.names() if n not in desired]
        valid: set[Target] = set()
        for c in _contribs(fresh):
            valid |= c.affinity_targets
        stale_affinity = await self._affinity_entries(lambda t: t not in valid)
        try:
            await self._run_full(fresh, stale_affinity, recreate=False)
        except NftError:
            # e.g. a set of an older layout nft cannot redefine in place: replace the table
            # (still one transaction, so still no moment without rules; affinity is lost)
            await self._run_full(fresh, [], recreate=True)
        self.programmed = fresh
        self.chains_present = fresh.chains()
        ops = len(self.last_transaction or ())
        return await self._clear_flows(ops, changes, initial=not old.names())

    async def _run_full(
        self, fresh: Programmed, stale_affinity: list[Element], *, recreate: bool
    ) -> None:
        chains = await self.nft.list_names("chains")
        sets = await self.nft.list_names("sets")
        maps = await self.nft.list_names("maps")
        tx = self.nft.new_transaction()
        with paused_gc():
            full_sync(
                tx,
                layout=self.layout,
                programmed=fresh,
                existing_chains=chains,
                existing_sets=sets,
                existing_maps=maps,
                recreate=recreate,
            )
            tx.delete_elements(stale_affinity)
        self.last_transaction = tx
        await self.nft.run(tx)

    async def partial(self, updates: Mapping[ServicePortName, Desired | None]) -> Applied:
        """Apply the changes of these service ports (None: the port is gone).

        On failure the in-memory state is ahead of the table; the caller must run :meth:`full`.
        """
        diff = ElementDiff()
        changes: list[tuple[Contribution | None, Contribution | None]] = []
        for name, want in updates.items():
            before = self.programmed.get(name)
            new = None
            if want is not None:
                new = contribute(want[0], want[1], layout=self.layout, previous=before)
            diff.extend(self.programmed.replace(name, new))
            changes.append((before, new))
        new_chains = self.programmed.chains() - self.chains_present
        gone: set[Target] = set()
        for before, new in changes:
            if before is not None:
                gone |= before.affinity_targets - (new.affinity_targets if new else frozenset())
        stale = await self._affinity_entries(lambda t: t in gone) if gone else []
        tx = self.nft.new_transaction()
        partial_sync(tx, layout=self.layout, diff=diff, new_chains=new_chains)
        for el in stale:
            tx.delete(el)
        self.last_transaction = tx
        if tx.operations:
            await self.nft.run(tx)
        self.chains_present |= new_chains
        return await self._clear_flows(len(tx), changes, initial=False)

    async def _affinity_entries(self, wanted: Callable[[Target], bool]) -> list[Element]:
        """Affinity entries (client . service -> endpoint) whose target ``wanted`` selects."""
        if AFFINITY not in await self.nft.list_names("maps"):
            return []
        nodeport_ips = set(self.layout.nodeport_ips)
        found = []
        for el in await self.nft.list_elements("map", AFFINITY):
            _client, daddr, _proto, dport = el.key
            ip, port = el.value
            entry = NODEPORT if daddr in nodeport_ips else daddr
            if wanted((entry, int(dport), ip, int(port))):
                found.append(Element(map=AFFINITY, key=el.key))
        return found

    async def _clear_flows(
        self,
        operations: int,
        changes: Iterable[tuple[Contribution | None, Contribution | None]],
        *,
        initial: bool,
    ) -> Applied:
        """Delete UDP flows to endpoints no longer used, and the flows that were not DNATed to
        entries that had no endpoints (skipped after a restart: the targets before it are
        unknown). Only un-NATed flows are chosen for the latter, so a flow load-balanced in the
        moment between the commit and this cleanup is kept."""
        calls: list[tuple[str | None, int, str | None, str | None]] = []
        for before, new in changes:
            old_targets = before.udp_targets if before else frozenset()
            new_targets = new.udp_targets if new else frozenset()
            calls += [(e or None, p, ep, None) for e, p, ep in sorted(old_targets - new_targets)]
            if not initial:
                old_served = before.udp_served if before else frozenset()
                new_served = new.udp_served if new else frozenset()
                calls += [
                    (ip, p, None, ip)
                    for e, p in sorted(new_served - old_served)
                    for ip in ((e,) if e else self.layout.nodeport_ips)
                ]
        deleted, errors = 0, []
        for entry, port, endpoint, unnated in calls:
            try:
                deleted += await self.conntrack.clear_udp(
                    family=self.family,
                    orig_dst=entry,
                    orig_port=port,
                    nat_dst=endpoint,
                    reply_src=unnated,
                )
            except ConntrackError as e:
                errors.append(str(e))
        return Applied(operations, deleted, tuple(errors))


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection inside a synchronous burst of allocations.

    A full sync allocates about a million short-lived, acyclic objects (freed by reference
    counting); each gen-2 collection they trigger scans the whole heap, which was 0.4 s of the
    1.0 s it took to build 10,000 services' rules. Nothing else runs meanwhile (no await)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _contribs(programmed: Programmed) -> list[Contribution]:
    return [c for n in programmed.names() if (c := programmed.get(n)) is not None]
