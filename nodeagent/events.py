"""Events about the node (``Starting``, ``NodeReady``, ``Rebooted``, ...), posted in the background.

:meth:`EventRecorder.record` never blocks and never raises: it puts the event on a bounded queue
(dropping, with one log line per burst of drops, when full), so the heartbeat and status paths
cannot be slowed by event traffic. ``run()`` posts them as ``core/v1`` Events in ``default``,
as the kubelet does for its node reference (involvedObject kind Node, uid = node name), with
client-go's per-object spam filter (a burst of 25, then one every 5 minutes) and its correlation
(a repeat of the same type/reason/message within 10 minutes PATCHes ``count`` and
``lastTimestamp`` of the first Event instead of creating another).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import dataclass
from typing import Final, Protocol

from nodeagent.apiserver import EVENTS, Api, ApiError, NotFound, PatchType
from nodeagent.clock import Clock
from nodeagent.log import Logger, get_logger

EVENT_NAMESPACE: Final = "default"
COMPONENT: Final = "kubelet"
QUEUE_SIZE: Final = 1000
SPAM_BURST: Final = 25
SPAM_REFILL_SECONDS: Final = 300.0
CORRELATION_WINDOW: Final = 600.0
POST_RETRIES: Final = 3


class EventSink(Protocol):
    def record(self, type: str, reason: str, message: str) -> None: ...


@dataclass(frozen=True)
class _Pending:
    type: str
    reason: str
    message: str
    at: dt.datetime


@dataclass
class _Posted:
    name: str
    count: int
    monotonic: float


def _time(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class TokenBucket:
    """``burst`` tokens, one more every ``refill`` seconds of loop time."""

    def __init__(self, *, burst: int, refill: float) -> None:
        self._burst = burst
        self._refill = refill
        self._tokens = float(burst)
        self._at: float | None = None

    def take(self, now: float) -> bool:
        if self._at is not None:
            self._tokens = min(self._burst, self._tokens + (now - self._at) / self._refill)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False


class EventRecorder:
    def __init__(
        self,
        *,
        api: Api,
        clock: Clock,
        node_name: str,
        queue_size: int = QUEUE_SIZE,
        log: Logger | None = None,
    ) -> None:
        self._api = api
        self._clock = clock
        self._node = node_name
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(maxsize=queue_size)
        self._spam = TokenBucket(burst=SPAM_BURST, refill=SPAM_REFILL_SECONDS)
        self._posted: dict[tuple[str, str, str], _Posted] = {}
        self._dropped = 0
        self._last_nanos = 0
        self._log = (log or get_logger("events")).bind(node=node_name)

    @property
    def name(self) -> str:
        return "events"

    def record(self, type: str, reason: str, message: str) -> None:
        self._log.v(2).info("Event", type=type, reason=reason, message=message)
        try:
            self._queue.put_nowait(_Pending(type, reason, message, self._clock.now()))
        except asyncio.QueueFull:
            if self._dropped == 0:
                self._log.warning("Event queue full; dropping events", reason=reason)
            self._dropped += 1

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            event = await self._queue.get()
            if self._dropped:
                self._log.warning("Dropped events", count=self._dropped)
                self._dropped = 0
            if not self._spam.take(loop.time()):
                self._log.v(2).info("Event rate-limited", reason=event.reason)
                continue
            for attempt in range(POST_RETRIES):
                try:
                    await self._post(event, loop.time())
                    break
                except ApiError as e:
                    self._log.v(2).info(
                        "Cannot post event", reason=event.reason, error=str(e), attempt=attempt + 1
                    )
                    await asyncio.sleep(2.0**attempt)

    async def _post(self, event: _Pending, now: float) -> None:
        key = (event.type, event.reason, event.message)
        seen = self._posted.get(key)
        stamp = _time(event.at)
        if seen is not None and now - seen.monotonic < CORRELATION_WINDOW:
            try:
                await self._api.patch(
                    EVENTS,
                    seen.name,
                    {"count": seen.count + 1, "lastTimestamp": stamp},
                    patch_type=PatchType.MERGE,
                    namespace=EVENT_NAMESPACE,
                )
                seen.count += 1
                seen.monotonic = now
                return
            except NotFound:
                pass
        nanos = max(int(event.at.timestamp() * 1e9), self._last_nanos + 1)  # names stay unique
        self._last_nanos = nanos
        name = f"{self._node}.{nanos:x}"
        await self._api.create(EVENTS, self._body(event, name, stamp), namespace=EVENT_NAMESPACE)
        self._posted[key] = _Posted(name=name, count=1, monotonic=now)

    def _body(self, event: _Pending, name: str, stamp: str) -> dict[str, object]:
        return {
            "metadata": {"name": name, "namespace": EVENT_NAMESPACE},
            "involvedObject": {"kind": "Node", "name": self._node, "uid": self._node},
            "reason": event.reason,
            "message": event.message,
            "type": event.type,
            "source": {"component": COMPONENT, "host": self._node},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "reportingComponent": COMPONENT,
            "reportingInstance": self._node,
        }
