"""One family's table: turns service ports into transactions and runs them, then cleans up.

:meth:`FamilyTable.full` rebuilds what the table holds from every service port and applies it
in one transaction (see :mod:`nodeagent.proxy.render`), or, when a first sync finds a table that
holds nothing, in steps; :meth:`FamilyTable.partial` applies only the element changes of the
given service ports. After a transaction commits, stale UDP flows are deleted (a pass timed
as kube-proxy's conntrack reconciler when a UDP service port's endpoints or addresses changed,
as kube-proxy runs it only then); before it is built, affinity entries that point at endpoints
a service no longer uses are listed so the same transaction deletes them.

The nft processes of a full sync run beside the Python work (:mod:`nodeagent.proxy.overlap`):
the table is listed while the rules are built, a step is built while nft loads the one before,
and the rules are indexed for later partial syncs while nft loads the last.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from nodeagent.nft.errors import NftError
from nodeagent.nft.interface import NFTablesInterface
from nodeagent.nft.objects import Element, Family
from nodeagent.nft.transaction import Transaction
from nodeagent.proxy.conntrack import Conntrack, ConntrackError
from nodeagent.proxy.contribution import NODEPORT, Contribution, contribute
from nodeagent.proxy.fullbuild import Desired, FullBuild
from nodeagent.proxy.gcpause import paused_gc
from nodeagent.proxy.layout import AFFINITY, Layout
from nodeagent.proxy.model import ServicePortName
from nodeagent.proxy.overlap import alongside
from nodeagent.proxy.programmed import ElementDiff, Programmed
from nodeagent.proxy.render import full_sync, more_elements, partial_sync
from nodeagent.proxy.settings import ProxySettings

Target = tuple[str, int, str, int]


@dataclass(frozen=True, slots=True)
class Applied:
    operations: int
    stale_flows: int = 0
    conntrack_errors: tuple[str, ...] = ()
    conntrack_seconds: float | None = None
    """How long the stale UDP flow cleanup took; None when no UDP service port changed."""


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
        self.last_transactions: list[Transaction] = []
        """The transactions of the last sync (a first load of an empty table takes several)."""
        self.first_load_step = settings.first_load_step

    def counts(self) -> tuple[int, int, int]:
        """(chains, rules, elements) as programmed."""
        static = self.layout.chains()
        dynamic = [self.layout.dynamic_rules(c) or [] for c in self.chains_present]
        rules = sum(len(r) for _, r in static) + sum(len(r) for r in dynamic)
        elements = len(self.programmed) + len(self.layout.static_elements())
        return len(static) + len(dynamic), rules, elements

    async def full(self, desired: Iterable[tuple[ServicePortName, Desired]]) -> Applied:
        """Make the table hold exactly ``desired`` (in increasing name order)."""
        old = self.programmed
        build = FullBuild(layout=self.layout, previous=old, desired=desired)
        # a first sync may find a table that holds nothing (the node booted): load it in steps
        step = 0 if old.names() else self.first_load_step
        listings = [self.nft.list_names(k) for k in ("chains", "sets", "maps")]
        _, existing = await alongside(lambda: build.step(step), *listings)
        if not build.finished and not any(existing):
            await self._load_in_steps(build, step)
        else:
            build.step()
            await self._replace(build, existing)
        self.programmed = build.fresh
        self.chains_present = set(build.chains)
        ops = sum(map(len, self.last_transactions))
        return await self._clear_flows(ops, build.changes, initial=not old.names())

    async def _replace(self, build: FullBuild, existing: list[list[str]]) -> None:
        """Replace what the table holds with the built rules, in one transaction."""
        valid: set[Target] = set()
        for c in _contribs(build.fresh):
            valid |= c.affinity_targets
        stale_affinity = await self._affinity_entries(lambda t: t not in valid, existing[2])
        try:
            await self._run_full(build.fresh, stale_affinity, existing)
        except NftError:
            # e.g. a set of an older layout nft cannot redefine in place: replace the table
            # (still one transaction, so still no moment without rules; affinity is lost)
            await self._run_full(build.fresh, [], None)

    async def _run_full(
        self, fresh: Programmed, stale_affinity: list[Element], existing: list[list[str]] | None
    ) -> None:
        """Replace the table's contents with ``fresh`` (``existing``: the names of the chains,
        sets and maps it has; None: recreate the table, whatever it has)."""
        chains, sets, maps = existing or ([], [], [])
        tx = self.nft.new_transaction()
        with paused_gc():
            full_sync(
                tx,
                layout=self.layout,
                programmed=fresh,
                existing_chains=chains,
                existing_sets=sets,
                existing_maps=maps,
                recreate=existing is None,
            )
            tx.delete_elements(stale_affinity)
        self.last_transactions = [tx]
        # while nft loads the rules: who wants each element (for the partial syncs after it)
        await alongside(lambda: _indexed(fresh), self.nft.run(tx))

    async def _load_in_steps(self, build: FullBuild, step: int) -> None:
        """Load an empty table in steps of ``step`` service ports and then twice as many as
        the step before, building each step while nft loads the one before (nft takes about
        as long to load a step as Python to build one twice its size, so nft is kept busy
        from a small first step on, with few steps)."""
        tx = self.nft.new_transaction()
        with paused_gc():
            full_sync(tx, layout=self.layout, programmed=build.fresh)
        self.last_transactions = [tx]
        sent = set(build.chains)
        while not build.finished:
            step *= 2
            work = functools.partial(self._next_step, build, step, sent)
            tx, _ = await alongside(work, self.nft.run(tx))
            self.last_transactions.append(tx)
        await alongside(lambda: _indexed(build.fresh), self.nft.run(tx))

    def _next_step(self, build: FullBuild, step: int, sent: set[str]) -> Transaction:
        """The transaction that adds the next ``step`` service ports (``sent``: the chains
        added by the steps before, updated)."""
        mark = build.fresh.mark()
        build.step(step)
        tx = self.nft.new_transaction()
        with paused_gc():
            elements = build.fresh.by_container(since=mark)
            more_elements(tx, layout=self.layout, new_chains=build.chains - sent, elements=elements)
            str(tx)  # rendered now: the next nft starts the moment the one running is done
        sent.update(build.chains)
        return tx

    @property
    def last_transaction(self) -> Transaction | None:
        """The last transaction of the last sync."""
        return self.last_transactions[-1] if self.last_transactions else None

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
        wanted_chains = self.programmed.chains()
        new_chains = wanted_chains - self.chains_present
        unused_chains = self.chains_present - wanted_chains
        gone: set[Target] = set()
        for before, new in changes:
            if before is not None:
                gone |= before.affinity_targets - (new.affinity_targets if new else frozenset())
        stale = []
        if gone:
            stale = await self._affinity_entries(
                lambda t: t in gone, await self.nft.list_names("maps")
            )
        tx = self.nft.new_transaction()
        partial_sync(
            tx, layout=self.layout, diff=diff, new_chains=new_chains, unused_chains=unused_chains
        )
        for el in stale:
            tx.delete(el)
        self.last_transactions = [tx]
        if len(tx):
            await self.nft.run(tx)
        self.chains_present = wanted_chains
        return await self._clear_flows(len(tx), changes, initial=False)

    async def _affinity_entries(
        self, wanted: Callable[[Target], bool], maps: list[str]
    ) -> list[Element]:
        """Affinity entries (client . service -> endpoint) whose target ``wanted`` selects
        (``maps``: the table's maps)."""
        if AFFINITY not in maps:
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
        loop = asyncio.get_running_loop()
        start = loop.time()
        required = False
        calls: list[tuple[str | None, int, str | None, str | None]] = []
        for before, new in changes:
            old_targets = before.udp_targets if before else frozenset()
            new_targets = new.udp_targets if new else frozenset()
            old_served = before.udp_served if before else frozenset()
            new_served = new.udp_served if new else frozenset()
            required = required or old_targets != new_targets or old_served != new_served
            calls += [(e or None, p, ep, None) for e, p, ep in sorted(old_targets - new_targets)]
            if not initial:
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
        seconds = loop.time() - start if required else None
        return Applied(operations, deleted, tuple(errors), seconds)


def _indexed(programmed: Programmed) -> None:
    with paused_gc():
        programmed.index()


def _contribs(programmed: Programmed) -> list[Contribution]:
    return [c for n in programmed.names() if (c := programmed.get(n)) is not None]
