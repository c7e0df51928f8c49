"""core/v1 Events about the Node and the Pods, posted in the background as the kubelet's
client-go recorder posts them.

:meth:`EventRecorder.record` (the Node) and :meth:`EventRecorder.record_for` (any object, by
:class:`ObjectReference`) never block and never raise: they put the event on a bounded queue
(dropping, with one log line per burst of drops, when full), so the heartbeat, status and pod
sync paths cannot be slowed by event traffic. ``run()`` posts them:

- in the object's namespace (``default`` for the Node, whose reference has none), named
  ``<object name>.<hex nanoseconds>``, source ``kubelet`` on this node;
- through a spam filter per involved object (a burst of 25, then one every 5 minutes);
- correlated: a repeat of the same object and field path, type, reason and message within
  10 minutes PATCHes ``count`` and ``lastTimestamp`` of the first Event instead of creating
  another (client-go keeps the last 4096 in an LRU; so do we);
- retried after a server or transport failure (1s, 2s); a request the server refuses (4xx:
  the namespace is terminating, the object is invalid) is dropped, as client-go does.

:func:`pod_reference` builds the kubelet's references: the Pod, or one of its containers
(``fieldPath: spec.containers{<name>}`` / ``spec.initContainers{<name>}``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final, Protocol, TypeVar

from nodeagent.apiserver import (
    EVENTS,
    Api,
    ApiError,
    NotFound,
    PatchType,
    ServerError,
    Timeout,
    TooManyRequests,
    TransportError,
)
from nodeagent.clock import Clock, TokenBucket
from nodeagent.gotext import rfc3339
from nodeagent.log import Logger, get_logger
from nodeagent.podspec import Pod

DEFAULT_NAMESPACE: Final = "default"
EVENT_NAMESPACE: Final = DEFAULT_NAMESPACE  # the Node's events
COMPONENT: Final = "kubelet"
QUEUE_SIZE: Final = 1000
SPAM_BURST: Final = 25
SPAM_REFILL_SECONDS: Final = 300.0
CORRELATION_WINDOW: Final = 600.0
LRU_ENTRIES: Final = 4096  # client-go's maxLruCacheEntries
POST_RETRIES: Final = 3
RETRYABLE: Final = (ServerError, Timeout, TooManyRequests, TransportError)


@dataclass(frozen=True, slots=True)
class ObjectReference:
    """``core/v1 ObjectReference``: the ``involvedObject`` of an Event."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = ""
    resource_version: str = ""
    field_path: str = ""

    def to_json(self) -> dict[str, str]:
        fields = {
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "apiVersion": self.api_version,
            "resourceVersion": self.resource_version,
            "fieldPath": self.field_path,
        }
        return {k: v for k, v in fields.items() if v}

    @property
    def object_key(self) -> tuple[str, ...]:
        """The object, whatever part of it: the spam filter's key."""
        return (self.kind, self.namespace, self.name, self.uid, self.api_version)

    @property
    def event_key(self) -> tuple[str, ...]:
        """The object and the part of it (not its resourceVersion): correlation's key."""
        return (*self.object_key, self.field_path)


def node_reference(node_name: str) -> ObjectReference:
    """The kubelet's node reference: kind Node, uid = name, no namespace."""
    return ObjectReference(kind="Node", name=node_name, uid=node_name)


def container_field_path(pod: Pod, container: str) -> str:
    """``spec.containers{<name>}``, ``spec.initContainers{<name>}`` or
    ``spec.ephemeralContainers{<name>}``; "" when ``container`` is not in the spec."""
    if any(c.name == container for c in pod.spec.containers):
        return f"spec.containers{{{container}}}"
    if any(c.name == container for c in pod.spec.init_containers):
        return f"spec.initContainers{{{container}}}"
    if any(c.name == container for c in pod.spec.ephemeral_containers):
        return f"spec.ephemeralContainers{{{container}}}"
    return ""


def pod_reference(pod: Pod, container: str = "") -> ObjectReference:
    """The Pod (``ref.GetReference``), or one of its containers (``GenerateContainerRef``)."""
    return ObjectReference(
        kind="Pod",
        name=pod.name,
        namespace=pod.namespace,
        uid=pod.uid,
        api_version="v1",
        resource_version=pod.metadata.resource_version,
        field_path=container_field_path(pod, container) if container else "",
    )


class EventSink(Protocol):
    """Events about this node."""

    def record(self, type: str, reason: str, message: str) -> None: ...


class ObjectEventSink(Protocol):
    """Events about any object (pods, their containers)."""

    def record_for(self, ref: ObjectReference, type: str, reason: str, message: str) -> None: ...


class DiscardEvents:
    """The null sink: records nothing (tools and tests that do not look at events)."""

    def record(self, type: str, reason: str, message: str) -> None:
        pass

    def record_for(self, ref: ObjectReference, type: str, reason: str, message: str) -> None:
        pass


@dataclass(frozen=True, slots=True)
class _Pending:
    ref: ObjectReference
    type: str
    reason: str
    message: str
    at: dt.datetime

    @property
    def key(self) -> tuple[object, ...]:
        return (self.ref.event_key, self.type, self.reason, self.message)


@dataclass(slots=True)
class _Posted:
    name: str
    namespace: str
    count: int
    monotonic: float


K = TypeVar("K")
V = TypeVar("V")


def _lru_touch(cache: OrderedDict[K, V], key: K, value: V) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > LRU_ENTRIES:
        cache.popitem(last=False)


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
        self._node_ref = node_reference(node_name)
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(maxsize=queue_size)
        self._spam: OrderedDict[tuple[str, ...], TokenBucket] = OrderedDict()
        self._posted: OrderedDict[tuple[object, ...], _Posted] = OrderedDict()
        self._dropped = 0
        self._last_nanos = 0
        self._log = (log or get_logger("events")).bind(node=node_name)

    @property
    def name(self) -> str:
        return "events"

    def record(self, type: str, reason: str, message: str) -> None:
        """An event about this node."""
        self.record_for(self._node_ref, type, reason, message)

    def record_for(self, ref: ObjectReference, type: str, reason: str, message: str) -> None:
        """An event about ``ref`` (a Pod, one of its containers, ...)."""
        self._log.v(3).info(
            "Event occurred",
            object=f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name,
            kind=ref.kind,
            field_path=ref.field_path,
            type=type,
            reason=reason,
            message=message,
        )
        try:
            self._queue.put_nowait(_Pending(ref, type, reason, message, self._clock.now()))
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
            if not self._allowed(event.ref, loop.time()):
                self._log.v(2).info("Event rate-limited", reason=event.reason)
                continue
            for attempt in range(POST_RETRIES):
                try:
                    await self._post(event, loop.time())
                    break
                except ApiError as e:
                    retry = isinstance(e, RETRYABLE) and attempt + 1 < POST_RETRIES
                    self._log.v(2).info(
                        "Cannot post event",
                        reason=event.reason,
                        error=str(e),
                        attempt=attempt + 1,
                        will_retry=retry,
                    )
                    if not retry:
                        break
                    await asyncio.sleep(2.0**attempt)

    def _allowed(self, ref: ObjectReference, now: float) -> bool:
        bucket = self._spam.get(ref.object_key)
        if bucket is None:
            bucket = TokenBucket(burst=SPAM_BURST, refill=SPAM_REFILL_SECONDS)
        _lru_touch(self._spam, ref.object_key, bucket)
        return bucket.take(now)

    async def _post(self, event: _Pending, now: float) -> None:
        seen = self._posted.get(event.key)
        stamp = rfc3339(event.at)
        if seen is not None and now - seen.monotonic < CORRELATION_WINDOW:
            try:
                await self._api.patch(
                    EVENTS,
                    seen.name,
                    {"count": seen.count + 1, "lastTimestamp": stamp},
                    patch_type=PatchType.MERGE,
                    namespace=seen.namespace,
                )
                seen.count += 1
                seen.monotonic = now
                _lru_touch(self._posted, event.key, seen)
                return
            except NotFound:
                pass
        nanos = max(int(event.at.timestamp() * 1e9), self._last_nanos + 1)  # names stay unique
        self._last_nanos = nanos
        name = f"{event.ref.name}.{nanos:x}"
        namespace = event.ref.namespace or DEFAULT_NAMESPACE
        await self._api.create(EVENTS, self._body(event, name, stamp), namespace=namespace)
        _lru_touch(self._posted, event.key, _Posted(name, namespace, count=1, monotonic=now))

    def _body(self, event: _Pending, name: str, stamp: str) -> dict[str, object]:
        return {
            "metadata": {"name": name, "namespace": event.ref.namespace or DEFAULT_NAMESPACE},
            "involvedObject": event.ref.to_json(),
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
