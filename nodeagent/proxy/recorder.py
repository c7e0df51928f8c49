"""kube-proxy's Event recorder: ``events.k8s.io/v1`` Events, posted in the background as
client-go's ``tools/events`` broadcaster posts them (the kubelet's recorder,
:mod:`nodeagent.events`, writes ``core/v1`` Events instead; kube-proxy's go to the newer API).

:meth:`ProxyEventRecorder.eventf` never blocks and never raises: it puts the Event on a bounded
queue (dropping, with one log line per burst, when full). ``run()`` posts them:

- in the object's namespace (``default`` without one), named ``<object name>.<hex
  nanoseconds>``, ``reportingController`` ``kube-proxy`` and ``reportingInstance``
  ``kube-proxy-<hostname>``, ``eventTime`` in microseconds;
- as a series: a repeat of the same type, action, reason and object (the note is not compared)
  makes the first Event a series (``series.count`` 2, one PATCH); later repeats only count, and
  every 30 minutes the series still open are PATCHed with their count; a series not seen for 6
  minutes is PATCHed a last time and forgotten, a single Event is forgotten 6 minutes after it
  (those periodic writes are tried once, as client-go's);
- retried after a server or transport failure (up to 12 tries, 10 s apart with 25 % jitter); an
  Event the server refuses (4xx) is dropped; a series whose Event is gone is created again.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from nodeagent.apiserver import (
    Api,
    ApiError,
    NotFound,
    PatchType,
    ServerError,
    Timeout,
    TooManyRequests,
    TransportError,
)
from nodeagent.apiserver.resources import Resource
from nodeagent.clock import Clock
from nodeagent.events import DEFAULT_NAMESPACE, ObjectReference
from nodeagent.gotext import rfc3339_micro
from nodeagent.log import Logger, get_logger

EVENTS_V1: Final = Resource("events.k8s.io", "v1", "events", "Event", namespaced=True)
REPORTING_CONTROLLER: Final = "kube-proxy"
QUEUE_SIZE: Final = 1000
MAX_TRIES: Final = 12  # client-go's maxTriesPerEvent
RETRY_SECONDS: Final = 10.0  # client-go's defaultSleepDuration (jittered up to 25 % more)
FINISH_SECONDS: Final = 6 * 60.0  # a series not seen for this long is over
REFRESH_SECONDS: Final = 30 * 60.0  # open series are written again this often
RETRYABLE: Final = (ServerError, Timeout, TooManyRequests, TransportError)

Key = tuple[object, ...]


def reporting_instance(hostname: str) -> str:
    """client-go's ``NewRecorder``: the controller's name, a dash, the host's name."""
    return f"{REPORTING_CONTROLLER}-{hostname}"


@dataclass(slots=True)
class _Event:
    body: dict[str, Any]
    seen: dt.datetime
    series: int = 0  # 0: a single Event; else series.count

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.body["metadata"]["namespace"])


@dataclass(slots=True)
class _Queued:
    ref: ObjectReference
    type: str
    reason: str
    action: str
    note: str
    at: dt.datetime


@dataclass
class ProxyEventRecorder:
    api: Api
    clock: Clock
    instance: str
    """``reportingInstance``: :func:`reporting_instance` of the host's name."""
    queue_size: int = QUEUE_SIZE
    log: Logger = field(default_factory=lambda: get_logger("proxy"))
    jitter: Callable[[], float] = random.random
    _queue: asyncio.Queue[_Queued] = field(init=False)
    _cache: dict[Key, _Event] = field(default_factory=dict, init=False)
    _dropped: int = field(default=0, init=False)
    _last_nanos: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self._queue = asyncio.Queue(maxsize=self.queue_size)

    @property
    def name(self) -> str:
        return "proxy-events"

    def eventf(self, ref: ObjectReference, type: str, reason: str, action: str, note: str) -> None:
        """An Event about ``ref`` (``regarding``); never blocks."""
        self.log.v(3).info(
            "Event occurred",
            object=f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name,
            kind=ref.kind,
            type=type,
            reason=reason,
            action=action,
            note=note,
        )
        try:
            self._queue.put_nowait(_Queued(ref, type, reason, action, note, self.clock.now()))
        except asyncio.QueueFull:
            if self._dropped == 0:
                self.log.warning("Event queue full; dropping events", reason=reason)
            self._dropped += 1

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        next_finish = loop.time() + FINISH_SECONDS
        next_refresh = loop.time() + REFRESH_SECONDS
        while True:
            wait = min(next_finish, next_refresh) - loop.time()
            queued = None
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    queued = await asyncio.wait_for(self._queue.get(), wait)
            if queued is not None:
                await self._record(queued)
                continue
            if loop.time() >= next_refresh:
                await self._refresh()
                next_refresh = loop.time() + REFRESH_SECONDS
            if loop.time() >= next_finish:
                await self._finish()
                next_finish = loop.time() + FINISH_SECONDS

    async def _record(self, queued: _Queued) -> None:
        if self._dropped:
            self.log.warning("Dropped events", count=self._dropped)
            self._dropped = 0
        key = (queued.type, queued.action, queued.reason, queued.ref.event_key)
        known = self._cache.get(key)
        if known is None:
            event = _Event(self._body(queued), queued.at)
            self._cache[key] = event
            await self._write(event)
            return
        known.seen = queued.at
        known.series = max(known.series + 1, 2)
        if known.series == 2:  # became a series: written now; later repeats only count
            await self._write(known)

    def _body(self, queued: _Queued) -> dict[str, Any]:
        nanos = max(int(queued.at.timestamp() * 1e9), self._last_nanos + 1)  # names stay unique
        self._last_nanos = nanos
        namespace = queued.ref.namespace or DEFAULT_NAMESPACE
        return {
            "apiVersion": EVENTS_V1.api_version,
            "kind": EVENTS_V1.kind,
            "metadata": {"name": f"{queued.ref.name}.{nanos:x}", "namespace": namespace},
            "eventTime": rfc3339_micro(queued.at),
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self.instance,
            "action": queued.action,
            "reason": queued.reason,
            "regarding": queued.ref.to_json(),
            "note": queued.note,
            "type": queued.type,
        }

    async def _write(self, event: _Event, *, tries: int = MAX_TRIES) -> bool:
        """Post (or PATCH the series of) ``event``, retrying as client-go; whether it is done
        with (written, or refused for good)."""
        for attempt in range(tries):
            try:
                await self._write_once(event)
                return True
            except ApiError as e:
                retry = isinstance(e, RETRYABLE) and attempt + 1 < tries
                self.log.v(2).info(
                    "Cannot write event",
                    reason=event.body["reason"],
                    error=str(e),
                    attempt=attempt + 1,
                    will_retry=retry,
                )
                if not retry:
                    return not isinstance(e, RETRYABLE)
                await asyncio.sleep(RETRY_SECONDS * (1 + 0.25 * self.jitter()))
        return False

    async def _write_once(self, event: _Event) -> None:
        body = event.body
        if event.series:
            series = {"count": event.series, "lastObservedTime": rfc3339_micro(event.seen)}
            try:
                await self.api.patch(
                    EVENTS_V1,
                    event.name,
                    {"series": series},
                    patch_type=PatchType.STRATEGIC,
                    namespace=event.namespace,
                )
                return
            except NotFound:
                body = {**body, "series": series}
        await self.api.create(EVENTS_V1, body, namespace=event.namespace)

    async def _refresh(self) -> None:
        for event in [e for e in self._cache.values() if e.series]:
            await self._write(event, tries=1)

    async def _finish(self) -> None:
        cutoff = self.clock.now() - dt.timedelta(seconds=FINISH_SECONDS)
        for key, event in list(self._cache.items()):
            if event.seen >= cutoff:
                continue
            if not event.series or await self._write(event, tries=1):
                del self._cache[key]
