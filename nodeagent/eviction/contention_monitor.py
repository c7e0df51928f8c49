"""The PSI contention monitor (KEP-5394): every housekeeping interval it reads the summary's
PSI, steps each enabled condition (:mod:`.contention`), records the events the observation
logic asks for on the Node, and pokes the node status when a condition changes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from nodeagent.events import DiscardEvents, EventSink
from nodeagent.eviction import contention
from nodeagent.eviction.contention import Condition, Reading, State
from nodeagent.kuberuntime import CriError
from nodeagent.log import Logger, get_logger

Json = Mapping[str, Any]


class ContentionMonitor:
    def __init__(
        self,
        *,
        thresholds: Mapping[str, float],
        summary: Callable[[], Awaitable[Json]],
        interval: float,
        events: EventSink | None = None,
        on_change: Callable[[], None] = lambda: None,
        log: Logger | None = None,
    ) -> None:
        # a threshold of 0 turns its condition off (as in the kubelet implementation)
        self._thresholds = {k: t for k, t in thresholds.items() if t > 0}
        self._summary = summary
        self._interval = interval
        self._events: EventSink = events or DiscardEvents()
        self._on_change = on_change
        self._log = log or get_logger("eviction")
        self._states: dict[str, State] = {}
        self.last_readings: dict[str, Reading | None] = {}

    @property
    def name(self) -> str:
        return "psi-contention"

    def conditions(self) -> tuple[Condition, ...]:
        """The enabled conditions, in the KEP's order, once observed at least once."""
        return tuple(
            contention.condition(kind, self._states[kind])
            for kind in contention.CONDITION_TYPES
            if kind in self._states
        )

    async def run(self) -> None:
        self._log.info(
            "PSI contention conditions enabled (PSINodeCondition)",
            thresholds=",".join(f"{k}={v:g}" for k, v in self._thresholds.items()) or "none",
        )
        if not self._thresholds:
            await asyncio.Event().wait()
        while True:
            try:
                await self.synchronize()
            except CriError as e:  # the runtime is down or starting: the next pass retries
                self._log.error("PSI contention: failed to get summary stats", error=str(e))
            except Exception as e:  # one bad pass must not stop the monitor
                self._log.exception("PSI contention: failed to synchronize", error=str(e))
            await asyncio.sleep(self._interval)

    async def synchronize(self) -> None:
        summary = await self._summary()
        readings = contention.readings(summary)
        self.last_readings = readings
        changed = False
        for kind, threshold in self._thresholds.items():
            reading = readings.get(kind)
            before = self._states.get(kind)
            state, notices = contention.step(kind, before, reading, threshold)
            self._states[kind] = state
            for n in notices:
                self._events.record(n.type, n.reason, n.message)
            if before is None or before.status != state.status:
                changed = True
                self._log.info(
                    "PSI contention condition changed",
                    condition=kind,
                    status=state.status,
                    avg10=None if reading is None else reading.avg10,
                    avg60=None if reading is None else reading.avg60,
                    threshold=threshold,
                )
        if changed:
            self._on_change()
