"""The node status manager: register, then keep ``Node.status`` current.

- On start: records ``Starting``; registers the Node (or, with ``registerNode: false``, waits
  for someone else to create it).
- Every ``nodeStatusUpdateFrequency`` (10s) plus up to 4% jitter, or at once after
  :meth:`poke` (e.g. the runtime became ready): computes the status with the setters and PATCHes
  ``nodes/<name>/status`` (strategic merge) when it changed, or when ``nodeStatusReportFrequency``
  (5m) has passed since the last report. After a change the next forced report is moved by a
  random [-50%, +50%] of that period, as the kubelet spreads reports.
- Up to 5 tries per sync: the first from the watch cache (no GET), the others from a GET.
  Transport failures or timeouts from the second try on call ``on_repeated_failure``.
- Events of condition transitions are recorded after the patch that made them visible.
- A Node deleted by someone else is not recreated (as the kubelet, kubernetes#116485): the
  manager logs it once and keeps checking quietly; restarting the agent registers it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

from nodeagent.apiserver import (
    NODES,
    Api,
    ApiError,
    NotFound,
    Obj,
    PatchType,
    Timeout,
    TransportError,
)
from nodeagent.apiserver import jittered as jitter
from nodeagent.apiserver.patch import NODE_SCHEMA, two_way_strategic_patch
from nodeagent.events import EventSink
from nodeagent.log import Logger, get_logger
from nodeagent.nodestatus.compute import NodeFacts, compute_node, node_changed
from nodeagent.nodestatus.registration import Registrar
from nodeagent.nodestatus.settings import NodeSettings

NODE_STATUS_UPDATE_RETRY: Final = 5
JITTER_FACTOR: Final = 0.04
REQUEST_TIMEOUT: Final = 10.0
STARTING_MESSAGE: Final = "Starting nodeagent."


class NodeCache(Protocol):
    def get(self, name: str, namespace: str | None = None) -> Obj | None: ...


class NodeStatusManager:
    def __init__(
        self,
        *,
        api: Api,
        settings: NodeSettings,
        facts: Callable[[], Awaitable[NodeFacts]],
        events: EventSink,
        node_cache: NodeCache | None = None,
        rand: Callable[[], float] = random.random,
        on_repeated_failure: Callable[[], Awaitable[None]] | None = None,
        on_reported: Callable[[Obj], None] | None = None,
        version: str | None = None,
        log: Logger | None = None,
    ) -> None:
        self._api = api
        self._s = settings
        self._facts = facts
        self._events = events
        self._cache = node_cache
        self._rand = rand
        self._on_repeated_failure = on_repeated_failure
        self._on_reported = on_reported
        self._version = version
        self._log = (log or get_logger("nodestatus")).bind(node=settings.node_name)
        self._registrar = Registrar(api=api, settings=settings, facts=facts, log=self._log)
        self._last_report = -math.inf
        self._report_interval = settings.status_report_frequency
        self._poke = asyncio.Event()
        self._problems: list[str] = []
        self._node_missing = False

    @property
    def name(self) -> str:
        return "nodestatus"

    def poke(self) -> None:
        """Sync now instead of at the next period (cheap; callable from any callback)."""
        self._poke.set()

    async def run(self) -> None:
        self._events.record("Normal", "Starting", STARTING_MESSAGE)
        if self._s.register_node:
            _, events = await self._registrar.register()
            for e in events:
                self._events.record(e.type, e.reason, e.message)
        else:
            await self._wait_for_node()
        while True:
            self._poke.clear()
            await self.sync()
            period = jitter(self._s.status_update_frequency, JITTER_FACTOR, self._rand())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poke.wait(), period)

    async def _wait_for_node(self) -> None:
        self._log.info("registerNode is false: waiting for the Node to be created")
        while True:
            try:
                await self._api.get(NODES, self._s.node_name, request_timeout=REQUEST_TIMEOUT)
                self._log.info("Node exists")
                return
            except ApiError as e:
                self._log.v(2).info("Node not available yet", error=str(e))
            await asyncio.sleep(self._s.status_update_frequency)

    async def sync(self) -> None:
        facts = await self._facts()
        for attempt in range(NODE_STATUS_UPDATE_RETRY):
            try:
                await self._try_update(attempt, facts)
                self._node_missing = False
                return
            except NotFound as e:
                if attempt == 0:
                    continue  # the cache may be stale: ask the server
                if not self._node_missing:
                    self._log.error(
                        "Node not found: it was deleted; nodeagent does not register "
                        "it again until restarted (as the kubelet)",
                        error=str(e),
                    )
                self._node_missing = True
                return
            except ApiError as e:
                self._log.error(
                    "Error updating node status, will retry", error=str(e), attempt=attempt + 1
                )
                transport = isinstance(e, TransportError | Timeout)
                if attempt > 0 and transport and self._on_repeated_failure is not None:
                    await self._on_repeated_failure()
        self._log.error(
            "Unable to update node status", error="update node status exceeds retry count"
        )

    async def _try_update(self, attempt: int, facts: NodeFacts) -> None:
        old = self._cache.get(self._s.node_name) if attempt == 0 and self._cache else None
        if old is None:
            old = await self._api.get(NODES, self._s.node_name, request_timeout=REQUEST_TIMEOUT)
        computed = compute_node(old, facts, self._s, version=self._version)
        if computed.problems != self._problems:
            for problem in computed.problems:
                self._log.error("Failed to set some node status fields", error=problem)
            self._problems = computed.problems
        changed = node_changed(old, computed.node)
        now = asyncio.get_running_loop().time()
        if not changed and now - self._last_report < self._report_interval:
            return
        patch = two_way_strategic_patch(old, computed.node, schema=NODE_SCHEMA)
        updated = await self._api.patch(
            NODES,
            self._s.node_name,
            patch,
            subresource="status",
            patch_type=PatchType.STRATEGIC,
            request_timeout=REQUEST_TIMEOUT,
        )
        self._last_report = now
        freq = self._s.status_report_frequency
        self._report_interval = freq + (self._rand() - 0.5) * freq if changed else freq
        for e in computed.events:
            self._events.record(e.type, e.reason, e.message)
        if self._on_reported is not None:
            self._on_reported(updated)
