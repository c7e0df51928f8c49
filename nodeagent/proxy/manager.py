"""The service proxy manager: Services and EndpointSlices in, nftables rules out.

``run()`` waits for both watch caches to be synced, then loops: a full sync first (and after
any failure, and every ``full_sync_period``, an hour as kube-proxy's: a periodic resync of a
large table must not hold changes back for seconds), partial syncs for the Services that
changed. Syncs are
at least ``min_sync_period`` apart, start to start: a change after a quiet spell is applied at
once, changes arriving in a burst are applied together (kube-proxy's bounded-frequency runner
with a burst of one). A failed transaction changes nothing in the kernel; the next sync is a full
one, ``sync_period`` later or at the next change, whichever comes first.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import Iterable, Iterator, Mapping

from nodeagent.clock import Clock
from nodeagent.log import Logger, get_logger
from nodeagent.nft.errors import NftError
from nodeagent.nft.interface import NFTablesInterface
from nodeagent.nft.objects import Family
from nodeagent.proxy.api import endpoints_by_port, service_ports
from nodeagent.proxy.conntrack import Conntrack
from nodeagent.proxy.family import Applied, FamilyTable
from nodeagent.proxy.fullbuild import Desired
from nodeagent.proxy.gcpause import paused_gc
from nodeagent.proxy.metrics import ProxyMetrics
from nodeagent.proxy.model import ServiceName, ServicePortName
from nodeagent.proxy.policy import select
from nodeagent.proxy.settings import ProxySettings
from nodeagent.proxy.tracking import ObjectStore, ServiceTracker


class ProxyManager:
    def __init__(
        self,
        *,
        settings: ProxySettings,
        services: ObjectStore,
        slices: ObjectStore,
        nft: Mapping[Family, NFTablesInterface],
        conntrack: Conntrack,
        clock: Clock,
        metrics: ProxyMetrics | None = None,
        log: Logger | None = None,
    ) -> None:
        self._settings = settings
        self._services = services
        self._slices = slices
        self._clock = clock
        self.metrics = metrics or ProxyMetrics()
        self._log = log or get_logger("proxy")
        self._tables = {
            f: FamilyTable(family=f, settings=settings, nft=nft[f], conntrack=conntrack)
            for f in settings.families
        }
        self._tracker = ServiceTracker(now=clock.now)
        self._ports: dict[ServiceName, set[ServicePortName]] = {}
        self._pending: set[ServiceName] = set()
        self._triggers: dict[ServiceName, dt.datetime] = {}
        self._seen = ("", "")
        self._need_full = True
        self._last_start = -1e18
        self._next_full = 0.0

    @property
    def name(self) -> str:
        return "proxy"

    def table(self, family: Family) -> FamilyTable:
        return self._tables[family]

    async def run(self) -> None:
        await self._services.wait_synced()
        await self._slices.wait_synced()
        self._log.info("Caches synced; programming service rules", families=",".join(self._tables))
        loop = asyncio.get_running_loop()
        while True:
            self._last_start = loop.time()
            await self.sync()
            await self._wait_for_work(loop)

    async def _wait_for_work(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._need_full and not self._pending:
            await self._wait_change(within=self._next_full - loop.time())
        hold = self._last_start + self._settings.min_sync_period - loop.time()
        if hold > 0:
            await asyncio.sleep(hold)

    async def _wait_change(self, *, within: float) -> None:
        if within <= 0:
            return
        services_rv, slices_rv = self._seen
        waits = [
            asyncio.ensure_future(
                self._services.wait_for(lambda c: c.resource_version != services_rv)
            ),
            asyncio.ensure_future(self._slices.wait_for(lambda c: c.resource_version != slices_rv)),
        ]
        try:
            await asyncio.wait(waits, timeout=within, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            for w in waits:
                with contextlib.suppress(asyncio.CancelledError):
                    await w

    async def sync(self, *, full: bool = False) -> bool:
        """One sync now: full when asked, when due or after a failure, else partial.
        Returns whether every family's transaction applied."""
        loop = asyncio.get_running_loop()
        with paused_gc():
            self._poll()
        full = full or self._need_full or loop.time() >= self._next_full
        if not full and not self._pending:
            return True
        start = loop.time()
        try:
            applied = await (self._full() if full else self._partial())
        except NftError as e:
            self._need_full = True
            self._next_full = loop.time() + self._settings.sync_period
            self.metrics.sync_failures.inc()
            self._log.error("Sync of service rules failed; next sync is a full one",
                            full=full, error=str(e))  # fmt: skip
            return False
        duration = loop.time() - start
        self._after_success(full=full, duration=duration, applied=applied)
        if full:
            self._need_full = False
            self._next_full = loop.time() + self._settings.full_sync_period
        return True

    def _poll(self) -> None:
        self._seen = (self._services.resource_version, self._slices.resource_version)
        changes = self._tracker.poll(self._services.items(), self._slices.items())
        self._pending |= changes.services
        for name, when in changes.triggers.items():
            self._triggers[name] = min(when, self._triggers.get(name, when))

    def _desired(self, name: ServiceName) -> dict[ServicePortName, Desired]:
        obj = self._tracker.service(name)
        if obj is None:
            return {}
        eps = endpoints_by_port(self._tracker.slices(name))
        node = self._settings.node_name
        wanted = {}
        for p in service_ports(obj):
            wanted[p.name] = (p, select(eps.get((p.name.port, p.protocol), ()), node_name=node))
        return wanted

    async def _full(self) -> list[Applied]:
        self._ports = {}
        self._pending.clear()
        desired: Iterable[tuple[ServicePortName, Desired]] = self._every_port()
        if len(self._tables) > 1:  # every family's table reads them
            with paused_gc():
                desired = list(desired)
        return [await table.full(desired) for table in self._tables.values()]

    def _every_port(self) -> Iterator[tuple[ServicePortName, Desired]]:
        """Every service port in name order, decoded as it is asked for (so decoding overlaps
        nft loading a table in steps)."""
        for name in self._tracker.names():
            wanted = self._desired(name)
            if wanted:
                self._ports[name] = set(wanted)
            yield from sorted(wanted.items())

    async def _partial(self) -> list[Applied]:
        updates: dict[ServicePortName, Desired | None] = {}
        for name in sorted(self._pending):
            wanted = self._desired(name)
            for gone in self._ports.get(name, set()) - set(wanted):
                updates[gone] = None
            updates.update(wanted)
            if wanted:
                self._ports[name] = set(wanted)
            else:
                self._ports.pop(name, None)
        self._pending.clear()
        return [await table.partial(updates) for table in self._tables.values()]

    def _after_success(self, *, full: bool, duration: float, applied: list[Applied]) -> None:
        m = self.metrics
        m.sync_duration.observe(duration)
        (m.full_sync_duration if full else m.partial_sync_duration).observe(duration)
        now = self._clock.now()
        m.last_sync.set(now.timestamp())
        for when in self._triggers.values():
            m.network_programming.observe(max(0.0, (now - when).total_seconds()))
        self._triggers.clear()
        chains = rules = elements = 0
        for table in self._tables.values():
            c, r, e = table.counts()
            chains, rules, elements = chains + c, rules + r, elements + e
        m.chains.set(chains)
        m.rules.set(rules)
        m.elements.set(elements)
        flows = sum(a.stale_flows for a in applied)
        m.conntrack_deleted.inc(flows)
        for error in (e for a in applied for e in a.conntrack_errors):
            self._log.warning("Cannot delete stale UDP flows", error=error)
        self._log.v(2).info(
            "Synced service rules",
            full=full,
            duration_ms=round(duration * 1000, 1),
            operations=sum(a.operations for a in applied),
            elements=elements,
            stale_udp_flows=flows,
        )
