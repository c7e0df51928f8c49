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
import datetime as dt
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any

from nodeagent.clock import Clock
from nodeagent.log import Logger, get_logger
from nodeagent.nft.errors import NftError
from nodeagent.nft.interface import NFTablesInterface
from nodeagent.nft.objects import Family
from nodeagent.proxy.api import (
    endpoints_by_port,
    health_check_node_port,
    service_families,
    service_ports,
)
from nodeagent.proxy.conntrack import Conntrack
from nodeagent.proxy.family import Applied, FamilyTable
from nodeagent.proxy.fullbuild import Desired
from nodeagent.proxy.gcpause import paused_gc
from nodeagent.proxy.health import ProxyHealth
from nodeagent.proxy.healthserver import ServiceHealthServers
from nodeagent.proxy.metrics import ProxyMetrics
from nodeagent.proxy.model import ServiceName, ServicePortName, family_of
from nodeagent.proxy.policy import select
from nodeagent.proxy.settings import ProxySettings
from nodeagent.proxy.tracking import ObjectStore, ServiceTracker
from nodeagent.tasks import cancel_and_wait


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
        zone: Callable[[], str] = lambda: "",
        zone_changed: Callable[[Callable[[Any], bool]], Awaitable[Any]] | None = None,
        health: ProxyHealth | None = None,
        service_health: Mapping[Family, ServiceHealthServers] | None = None,
    ) -> None:
        self._settings = settings
        self.health = health or ProxyHealth(now=clock.now)
        self._service_health = service_health or {}
        # Services with a healthCheckNodePort: (port, ready endpoints on this node by family,
        # for each family of the Service's cluster IPs: kube-proxy's proxier per family)
        self._health_checks: dict[ServiceName, tuple[int, dict[Family, int]]] = {}
        # service ports with a Local policy and no endpoint on this node: (internal, external)
        self._no_local: dict[ServicePortName, tuple[bool, bool]] = {}
        self._zone_of_node = zone
        self._zone_changed = zone_changed
        self._zone = zone()
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
        if self._zone_changed is not None:
            zone = self._zone
            waits.append(
                asyncio.ensure_future(self._zone_changed(lambda _: self._zone_of_node() != zone))
            )
        try:
            await asyncio.wait(waits, timeout=within, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await cancel_and_wait(*waits)

    async def sync(self, *, full: bool = False) -> bool:
        """One sync now: full when asked, when due or after a failure, else partial.
        Returns whether every family's transaction applied."""
        loop = asyncio.get_running_loop()
        with paused_gc():
            self._poll()
        zone = self._zone_of_node()
        if zone != self._zone:  # every service's topology choice may change: kube-proxy too
            self._log.info("Node topology changed; full sync", zone=zone, was=self._zone)
            self._zone = zone
            self._need_full = True
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
        for family in self._tables:
            self.health.updated(family)
        for family, servers in self._service_health.items():
            hcs = {n: (port, local[family]) for n, (port, local) in self._health_checks.items()
                   if family in local}  # fmt: skip
            await servers.sync(
                {n: port for n, (port, _) in hcs.items()}, {n: c for n, (_, c) in hcs.items()}
            )
        if full:
            self._need_full = False
            self._next_full = loop.time() + self._settings.full_sync_period
        return True

    def _poll(self) -> None:
        self._seen = (self._services.resource_version, self._slices.resource_version)
        changes = self._tracker.poll(self._services.items(), self._slices.items())
        m = self.metrics
        m.service_changes.inc(changes.service_changes)
        m.endpoint_changes.inc(changes.endpoint_changes)
        if changes.services:
            for family in self._tables:
                self.health.queued(family)
            m.last_queued.set(self._clock.now().timestamp())
        self._pending |= changes.services
        m.service_changes_pending.set(len(self._pending))
        m.endpoint_changes_pending.set(len(self._pending))
        for name, when in changes.triggers.items():
            self._triggers[name] = min(when, self._triggers.get(name, when))

    def _desired(self, name: ServiceName) -> dict[ServicePortName, Desired]:
        obj = self._tracker.service(name)
        if obj is None:
            self._health_checks.pop(name, None)
            return {}
        eps = endpoints_by_port(self._tracker.slices(name))
        node, zone = self._settings.node_name, self._zone
        hc = health_check_node_port(obj)
        if hc is None:
            self._health_checks.pop(name, None)
        else:
            local = dict.fromkeys(service_families(obj), 0)
            for found in eps.values():
                for e in found:
                    if e.ready and e.node_name == node and (f := family_of(e.ip)) in local:
                        local[f] += 1
            self._health_checks[name] = (hc, local)
        wanted = {}
        for p in service_ports(obj):
            found = eps.get((p.name.port, p.protocol), ())
            chosen = select(found, node_name=node, zone=zone)
            wanted[p.name] = (p, chosen)
            if chosen.cluster and not chosen.local and (p.internal_local or p.external_local):
                self._no_local[p.name] = (p.internal_local, p.external_local)
            else:
                self._no_local.pop(p.name, None)
        return wanted

    async def _full(self) -> list[Applied]:
        self._ports = {}
        self._health_checks = {}
        self._no_local = {}
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
                self._no_local.pop(gone, None)
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
        m.service_changes_pending.set(0)
        m.endpoint_changes_pending.set(0)
        m.no_local_endpoints["internal"] = sum(i for i, _ in self._no_local.values())
        m.no_local_endpoints["external"] = sum(e for _, e in self._no_local.values())
        m.chains.set(chains)
        m.rules.set(rules)
        m.elements.set(elements)
        for family, a in zip(self._tables, applied, strict=True):
            if a.conntrack_seconds is not None:
                m.conntrack_sync_duration[family].observe(a.conntrack_seconds)
                m.conntrack_deleted[family].inc(a.stale_flows)
        flows = sum(a.stale_flows for a in applied)
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
