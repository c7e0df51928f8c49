"""Which Services changed since the last sync, from the two watch caches' current contents.

The caches (``nodeagent.apiserver.WatchCache``, or anything with the same read surface: see
:class:`ObjectStore`) hold the objects; the tracker remembers each object's resourceVersion and
reports the Services whose Service object or any of whose EndpointSlices were added, modified
or deleted. It also keeps, per changed Service, the earliest EndpointSlice change trigger time
(the ``endpoints.kubernetes.io/last-change-trigger-time`` annotation the EndpointSlice
controller sets, else when the tracker first saw the change) for the network programming
latency metric.

Each new or changed object is checked once (:mod:`nodeagent.proxy.validation`): an invalid
one is skipped as if it did not exist (an invalid new version of a Service or EndpointSlice
takes the old one's rules away with it, as a deleted one would), with one error naming the
object, the field and the value; every other object is programmed as usual. The proxy posts
no Events, so the log line is the report.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from nodeagent.gotext import parse_rfc3339
from nodeagent.log import Logger, get_logger
from nodeagent.proxy.api import Obj, name_of, proxied_slice, service_of_slice
from nodeagent.proxy.model import ServiceName
from nodeagent.proxy.validation import (
    VALUE_MAX,
    Problem,
    service_problem,
    shown,
    slice_problem,
)

TRIGGER_TIME = "endpoints.kubernetes.io/last-change-trigger-time"
SliceKey = tuple[str, str]


class ObjectStore(Protocol):
    """The read side of a watch cache (``nodeagent.apiserver.WatchCache`` is one)."""

    @property
    def resource_version(self) -> str: ...

    def items(self) -> list[Obj]: ...

    async def wait_synced(self) -> None: ...

    async def wait_for(self, predicate: Callable[[Any], bool]) -> None: ...


@dataclass(slots=True)
class Changes:
    seen_at: dt.datetime
    """When the poll saw the changes (the trigger time of changes without an annotation)."""
    services: set[ServiceName] = field(default_factory=set)
    triggers: dict[ServiceName, dt.datetime] = field(default_factory=dict)
    service_changes: int = 0
    """Service objects added, changed or deleted since the last poll."""
    endpoint_changes: int = 0
    """EndpointSlices of proxied Services added, changed or deleted since the last poll."""


class ServiceTracker:
    """Objects are recognised by identity: a store replaces an object when it changes (the
    watch cache stores each event's new object), so an unchanged object is the same one, and a
    poll of 20,000 unchanged objects costs a few milliseconds."""

    def __init__(self, *, now: Callable[[], dt.datetime], log: Logger | None = None) -> None:
        self._now = now
        self._log = log or get_logger("proxy")
        self._services: dict[ServiceName, Obj] = {}
        self._service_objs: dict[int, tuple[Obj, ServiceName]] = {}
        self._slices: dict[ServiceName, dict[SliceKey, Obj]] = {}
        self._slice_objs: dict[int, tuple[Obj, SliceKey, ServiceName | None]] = {}

    def names(self) -> list[ServiceName]:
        return sorted(set(self._services) | set(self._slices))

    def service(self, name: ServiceName) -> Obj | None:
        return self._services.get(name)

    def slices(self, name: ServiceName) -> list[Obj]:
        return list(self._slices.get(name, {}).values())

    def poll(self, services: list[Obj], slices: list[Obj]) -> Changes:
        changes = Changes(seen_at=self._now())
        self._poll_services(services, changes)
        self._poll_slices(slices, changes)
        return changes

    def _poll_services(self, objs: list[Obj], changes: Changes) -> None:
        seen, current = self._service_objs, {}
        for obj in objs:
            hit = seen.get(id(obj))
            if hit is None or hit[0] is not obj:
                hit = (obj, name_of(obj))
                problem = service_problem(obj)
                if problem is None:
                    self._services[hit[1]] = obj
                else:
                    self._invalid("Service", hit[1], problem)
                    self._services.pop(hit[1], None)
                changes.services.add(hit[1])
                changes.service_changes += 1
            current[id(obj)] = hit
        for key in seen.keys() - current.keys():
            obj, name = seen[key]
            if self._services.get(name) is obj:  # deleted, not replaced by a newer object
                del self._services[name]
                changes.service_changes += 1
            changes.services.add(name)
        self._service_objs = current

    def _poll_slices(self, objs: list[Obj], changes: Changes) -> None:
        seen: dict[int, tuple[Obj, SliceKey, ServiceName | None]] = self._slice_objs
        current: dict[int, tuple[Obj, SliceKey, ServiceName | None]] = {}
        added = []
        for obj in objs:
            hit = seen.get(id(obj))
            if hit is None or hit[0] is not obj:
                name = name_of(obj)
                key = (name.namespace, name.name)
                hit = (obj, key, service_of_slice(obj) if proxied_slice(obj) else None)
                added.append(hit)
            current[id(obj)] = hit
        replaced = {k for _, k, _ in added}
        for gone in seen.keys() - current.keys():
            obj, key, service = seen[gone]
            if service is not None and self._slices.get(service, {}).get(key) is obj:
                if key not in replaced:  # deleted, not replaced by a newer version
                    changes.endpoint_changes += 1
                self._forget(key, service, changes, {})
        for obj, key, service in added:
            if service is None:
                continue
            changes.endpoint_changes += 1
            problem = slice_problem(obj)
            if problem is None:
                self._slices.setdefault(service, {})[key] = obj
                changes.services.add(service)
                self._trigger(changes, service, obj.get("metadata") or {})
            else:
                owner = _text(str(service))
                self._invalid("EndpointSlice", ServiceName(*key), problem, service=owner)
                self._forget(key, service, changes, {})
        self._slice_objs = current

    def _invalid(self, kind: str, name: ServiceName, problem: Problem, **fields: str) -> None:
        """One error for an invalid object (``name``: its namespace and name)."""
        self._log.error(
            f"Invalid {kind}; skipping it",
            **{kind.lower(): _text(str(name)), **fields},
            field=problem.field,
            value=shown(problem.value),
            error=problem.reason,
        )

    def _forget(
        self, key: SliceKey, service: ServiceName, changes: Changes, meta: dict[str, Any]
    ) -> None:
        slices = self._slices.get(service, {})
        slices.pop(key, None)
        if not slices:
            self._slices.pop(service, None)
        changes.services.add(service)
        self._trigger(changes, service, meta)

    def _trigger(self, changes: Changes, service: ServiceName, meta: dict[str, Any]) -> None:
        when = parse_rfc3339((meta.get("annotations") or {}).get(TRIGGER_TIME)) or changes.seen_at
        if service not in changes.triggers or when < changes.triggers[service]:
            changes.triggers[service] = when


def _text(name: str) -> str:
    """A name as a log field shows it (truncated: it comes from an unchecked object)."""
    return name if len(name) <= VALUE_MAX else name[: VALUE_MAX - 3] + "..."


def _rv(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
