"""An in-memory kube-apiserver implementing :class:`nodeagent.apiserver.Api`.

It keeps objects with resourceVersions, uids and creation timestamps, enforces optimistic
concurrency on update (409), AlreadyExists on create, applies merge / strategic / JSON patches,
and serves watches (from a resourceVersion, with bookmarks, 410 after :meth:`compact`).
Label selectors take ``key``, ``!key``, ``key=value`` (``==``) and ``key!=value`` terms; field
selectors ``path=value`` (``==``) and ``path!=value`` on any dotted path (``spec.clusterIP``). As
the apiserver's watch does, an object that stops matching a watch's selectors reaches it as
DELETED (its previous content), one that starts matching as ADDED.

Scripting, as the kubelet's fake clientset reactors do, per (verb, resource)::

    server.react("update", "leases", Delay(10, Timeout("...")), Conflict("..."))  # then OK
    server.react("get", "nodes", NotFound("..."), times=None)                    # always

Outcomes are consumed in order; when a script runs out, calls behave normally. An outcome is an
:class:`ApiError` (raised), :data:`PASS` (normal behaviour), a :class:`Delay` (sleep on the loop,
then its ``then`` outcome), or a callable taking the :class:`Call` and returning an object.
Every call is recorded in :attr:`calls` with the loop time it arrived at.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import itertools
import uuid
from collections import deque
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from nodeagent.apiserver import errors
from nodeagent.apiserver.interface import ObjectList, WatchEvent
from nodeagent.apiserver.kubeconfig import Endpoint
from nodeagent.apiserver.patch import (
    NODE_SCHEMA,
    PatchType,
    apply_json_patch,
    apply_merge_patch,
    apply_strategic_patch,
)
from nodeagent.apiserver.reachability import Reachability
from nodeagent.apiserver.resources import Obj, Resource
from nodeagent.clock import Clock
from nodeagent.gotext import rfc3339

PASS: Final = object()
EPOCH: Final = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class LoopClock:
    """Wall time that follows the event loop's (virtual, under looptime) clock from ``start``."""

    def __init__(self, start: dt.datetime = EPOCH) -> None:
        self._start = start

    def now(self) -> dt.datetime:
        return self._start + dt.timedelta(seconds=self.monotonic())

    def monotonic(self) -> float:
        try:
            return asyncio.get_running_loop().time()
        except RuntimeError:  # outside the loop (a sync fixture): the start
            return 0.0


_HAS_STATUS: Final = frozenset({"nodes", "pods", "certificatesigningrequests"})


@dataclass(frozen=True)
class Delay:
    seconds: float
    then: object = PASS


@dataclass(frozen=True)
class Call:
    verb: str
    resource: str
    namespace: str | None
    name: str | None
    at: float
    subresource: str | None = None
    body: Any = None
    patch_type: PatchType | None = None
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Watcher:
    resource: str
    namespace: str | None
    match: Callable[[Obj], bool]
    queue: asyncio.Queue[WatchEvent | None]


class FakeApiServer:
    def __init__(self, *, clock: Clock | None = None) -> None:
        self.clock = clock or LoopClock()
        self.calls: list[Call] = []
        self.down = False
        self._reach = Reachability()
        self._objects: dict[tuple[str, str, str], Obj] = {}
        self._rv = itertools.count(1)
        self._last_rv = 0
        self._compacted = 0
        self._history: list[tuple[str, WatchEvent, Obj | None]] = []  # (plural, event, previous)
        self._watchers: list[_Watcher] = []
        self._scripts: dict[tuple[str, str], deque[object]] = {}
        self._always: dict[tuple[str, str], object] = {}
        self._uids = itertools.count(1)
        self.endpoints: list[Endpoint] = []

    # --- test controls -------------------------------------------------------------------

    def react(self, verb: str, resource: str, *outcomes: object, times: int | None = 1) -> None:
        """Script outcomes for (verb, resource); ``times=None`` repeats the one outcome forever."""
        if times is None:
            (self._always[(verb, resource)],) = outcomes
        else:
            self._scripts.setdefault((verb, resource), deque()).extend(outcomes * times)

    def calls_to(self, verb: str, resource: str) -> list[Call]:
        return [c for c in self.calls if c.verb == verb and c.resource == resource]

    def stored(self, res: Resource, name: str, namespace: str | None = None) -> Obj | None:
        obj = self._objects.get((res.plural, namespace or "", name))
        return copy.deepcopy(obj) if obj is not None else None

    def objects(self, res: Resource) -> list[Obj]:
        return [copy.deepcopy(o) for (r, _, _), o in self._objects.items() if r == res.plural]

    def seed(self, res: Resource, body: Obj) -> Obj:
        """Store an object as if someone else created it (no reactors, no call recorded)."""
        return self._create(res, copy.deepcopy(body), body.get("metadata", {}).get("namespace"))

    def modify(
        self, res: Resource, name: str, mutate: Callable[[Obj], None], namespace: str | None = None
    ) -> Obj:
        """Change an object out of band (another client wrote it)."""
        obj = copy.deepcopy(self._must_get(res, name, namespace))  # the previous one stays
        mutate(obj)
        return self._store(res, obj, "MODIFIED")

    def remove(self, res: Resource, name: str, namespace: str | None = None) -> None:
        """Delete an object out of band (an admin ran kubectl delete)."""
        obj = self._objects.pop((res.plural, namespace or "", name))
        self._emit(res.plural, "DELETED", obj, str(next(self._rv)), None)

    def compact(self) -> None:
        """Forget history: watches from an older resourceVersion now get 410 Gone."""
        self._compacted = self._last_rv
        self._history.clear()

    def bookmark(self) -> None:
        for w in self._watchers:
            w.queue.put_nowait(
                WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": str(self._last_rv)}})
            )

    def end_watches(self) -> None:
        for w in self._watchers:
            w.queue.put_nowait(None)

    def set_down(self, down: bool) -> None:
        """Simulate an unreachable apiserver: every call fails with TransportError."""
        self.down = down
        if down:
            self.end_watches()

    # --- the ApiClient extras ------------------------------------------------------------

    def set_endpoint(self, endpoint: Endpoint) -> None:
        """Record the identity the agent switched to (TLS bootstrap, rotation)."""
        self.endpoints.append(endpoint)

    async def aclose(self) -> None:
        return None

    # --- the Api protocol ----------------------------------------------------------------

    async def get(
        self,
        res: Resource,
        name: str,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        request_timeout: float | None = None,
    ) -> Obj:
        call = self._record("get", res, namespace, name, subresource=subresource)
        return await self._serve(call, lambda: copy.deepcopy(self._must_get(res, name, namespace)))

    async def create(
        self,
        res: Resource,
        body: Obj,
        *,
        namespace: str | None = None,
        request_timeout: float | None = None,
    ) -> Obj:
        call = self._record(
            "create", res, namespace, body.get("metadata", {}).get("name"), body=copy.deepcopy(body)
        )
        return await self._serve(call, lambda: self._create(res, copy.deepcopy(body), namespace))

    async def replace(
        self,
        res: Resource,
        name: str,
        body: Obj,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        request_timeout: float | None = None,
    ) -> Obj:
        call = self._record(
            "update", res, namespace, name, subresource=subresource, body=copy.deepcopy(body)
        )
        return await self._serve(
            call, lambda: self._update(res, name, body, namespace, subresource)
        )

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: object,
        *,
        patch_type: PatchType = PatchType.STRATEGIC,
        namespace: str | None = None,
        subresource: str | None = None,
        field_manager: str | None = None,
        request_timeout: float | None = None,
    ) -> Obj:
        call = self._record(
            "patch",
            res,
            namespace,
            name,
            subresource=subresource,
            body=copy.deepcopy(patch),
            patch_type=patch_type,
        )
        return await self._serve(
            call,
            lambda: self._patch(
                res,
                name,
                patch,
                patch_type=patch_type,
                namespace=namespace,
                subresource=subresource,
            ),
        )

    async def delete(
        self,
        res: Resource,
        name: str,
        *,
        namespace: str | None = None,
        request_timeout: float | None = None,
    ) -> None:
        call = self._record("delete", res, namespace, name)

        def do() -> Obj:
            self._must_get(res, name, namespace)
            self.remove(res, name, namespace)
            return {}

        await self._serve(call, do)

    async def list(
        self,
        res: Resource,
        *,
        namespace: str | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        request_timeout: float | None = None,
    ) -> ObjectList:
        call = self._record(
            "list",
            res,
            namespace,
            None,
            params={"fieldSelector": field_selector, "labelSelector": label_selector},
        )
        match = _matcher(namespace, field_selector, label_selector)

        def do() -> Obj:
            items = [
                copy.deepcopy(o)
                for (r, _, _), o in self._objects.items()
                if r == res.plural and match(o)
            ]
            return {"items": items, "metadata": {"resourceVersion": str(self._last_rv)}}

        page = await self._serve(call, do)
        return ObjectList(items=page["items"], resource_version=page["metadata"]["resourceVersion"])

    async def watch(
        self,
        res: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncGenerator[WatchEvent, None]:
        call = self._record(
            "watch",
            res,
            namespace,
            None,
            params={
                "resourceVersion": resource_version,
                "fieldSelector": field_selector,
                "labelSelector": label_selector,
                "timeoutSeconds": timeout_seconds,
            },
        )
        await self._serve(call, lambda: {})
        start = int(resource_version or 0)
        if start and start < self._compacted:
            raise errors.Gone(
                f"too old resource version: {start} ({self._compacted})",
                reason="Expired",
                verb="WATCH",
                path=res.plural,
            )
        match = _matcher(namespace, field_selector, label_selector)
        watcher = _Watcher(res.plural, namespace, match, asyncio.Queue())
        for plural, event, previous in self._history:
            if plural == res.plural and int(event.resource_version) > start:
                seen = _as_seen(event, previous, match)
                if seen is not None:
                    watcher.queue.put_nowait(seen)
        self._watchers.append(watcher)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_seconds
        try:
            while True:
                try:  # the timeout wraps only the get, never the yield; wait_for on 3.11 can
                    # swallow a cancellation that arrives with a result and hang teardown
                    async with asyncio.timeout_at(deadline):
                        item = await watcher.queue.get()
                except TimeoutError:
                    return
                if item is None:
                    break
                yield copy.deepcopy(item)
        finally:
            self._watchers.remove(watcher)
        if self.down:
            reset = errors.TransportError("connection reset", verb="WATCH", path=res.plural)
            self._reach.saw(reset)
            raise reset

    async def answered_again(self) -> None:
        await self._reach.answered_again()

    # --- internals -----------------------------------------------------------------------

    def _record(
        self, verb: str, res: Resource, namespace: str | None, name: str | None, **kw: Any
    ) -> Call:
        call = Call(verb, res.plural, namespace, name, asyncio.get_running_loop().time(), **kw)
        self.calls.append(call)
        return call

    async def _serve(self, call: Call, normal: Callable[[], Obj]) -> Obj:
        if self.down:
            refused = errors.TransportError(
                "connection refused", verb=call.verb, path=call.resource
            )
            self._reach.saw(refused)
            raise refused
        outcome = self._next_outcome(call.verb, call.resource)
        while isinstance(outcome, Delay):
            await asyncio.sleep(outcome.seconds)
            outcome = outcome.then
        self._reach.saw(outcome if isinstance(outcome, errors.ApiError) else None)
        if isinstance(outcome, errors.ApiError):
            raise outcome
        if outcome is PASS:
            return normal()
        if callable(outcome):
            result: Obj = outcome(call)
            return result
        raise TypeError(f"unknown outcome {outcome!r}")

    def _next_outcome(self, verb: str, resource: str) -> object:
        script = self._scripts.get((verb, resource))
        if script:
            return script.popleft()
        return self._always.get((verb, resource), PASS)

    def _must_get(self, res: Resource, name: str, namespace: str | None) -> Obj:
        obj = self._objects.get((res.plural, namespace or "", name))
        if obj is None:
            raise errors.NotFound(f'{res.plural} "{name}" not found', reason="NotFound")
        return obj

    def _create(self, res: Resource, body: Obj, namespace: str | None) -> Obj:
        meta = body.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise errors.Invalid("name or generateName is required", reason="Invalid")
            meta["name"] = f"{meta['generateName']}{next(self._uids):05d}"
        ns = namespace or meta.get("namespace") or ""
        if res.namespaced:
            meta["namespace"] = ns
        if (res.plural, ns, meta["name"]) in self._objects:
            raise errors.AlreadyExists(
                f'{res.plural} "{meta["name"]}" already exists', reason="AlreadyExists"
            )
        # Unique across servers, as a real apiserver's: integration tests share one containerd,
        # and a pod of the next test with the same UID would inherit the last one's containers.
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = rfc3339(self.clock.now())
        body.setdefault("apiVersion", res.api_version)
        body.setdefault("kind", res.kind)
        return self._store(res, body, "ADDED")

    def _update(
        self, res: Resource, name: str, body: Obj, namespace: str | None, subresource: str | None
    ) -> Obj:
        current = self._must_get(res, name, namespace)
        sent_rv = (body.get("metadata") or {}).get("resourceVersion")
        if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
            raise errors.Conflict(
                f'Operation cannot be fulfilled on {res.plural} "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again",
                reason="Conflict",
            )
        new = copy.deepcopy(body)
        new["metadata"] = {
            **copy.deepcopy(body.get("metadata") or {}),
            **{
                k: current["metadata"][k]
                for k in ("uid", "creationTimestamp", "namespace")
                if k in current["metadata"]
            },
        }
        return self._store(res, self._keep_parts(res, current, new, subresource), "MODIFIED")

    def _patch(
        self,
        res: Resource,
        name: str,
        patch: object,
        *,
        patch_type: PatchType,
        namespace: str | None,
        subresource: str | None,
    ) -> Obj:
        current = self._must_get(res, name, namespace)
        if patch_type is PatchType.MERGE:
            new = apply_merge_patch(current, patch)
        elif patch_type is PatchType.STRATEGIC:
            new = apply_strategic_patch(current, patch, schema=NODE_SCHEMA)
        elif patch_type is PatchType.JSON:
            assert isinstance(patch, list)
            new = apply_json_patch(current, patch)
        else:
            raise errors.BadRequest(f"unsupported patch type {patch_type.value}")
        new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        return self._store(res, self._keep_parts(res, current, new, subresource), "MODIFIED")

    @staticmethod
    def _keep_parts(res: Resource, current: Obj, new: Obj, subresource: str | None) -> Obj:
        if subresource in ("status", "approval"):
            for key in ("spec",):
                if key in current:
                    new[key] = copy.deepcopy(current[key])
        elif res.plural in _HAS_STATUS and "status" in current:
            new["status"] = copy.deepcopy(current["status"])
        return new

    def _store(self, res: Resource, obj: Obj, event: str) -> Obj:
        rv = next(self._rv)
        self._last_rv = rv
        obj["metadata"]["resourceVersion"] = str(rv)
        ns = obj["metadata"].get("namespace") or ""
        key = (res.plural, ns, obj["metadata"]["name"])
        previous = self._objects.get(key)
        self._objects[key] = obj
        self._emit(res.plural, event, obj, str(rv), previous)
        return copy.deepcopy(obj)

    def _emit(self, plural: str, kind: str, obj: Obj, rv: str, previous: Obj | None) -> None:
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = rv
        self._last_rv = int(rv)
        event = WatchEvent(kind, obj)
        previous = copy.deepcopy(previous) if kind == "MODIFIED" else None
        self._history.append((plural, event, previous))
        for w in self._watchers:
            if w.resource == plural:
                seen = _as_seen(event, previous, w.match)
                if seen is not None:
                    w.queue.put_nowait(seen)


def _as_seen(
    event: WatchEvent, previous: Obj | None, match: Callable[[Obj], bool]
) -> WatchEvent | None:
    """The event as a watch with selectors sees it (None: not at all)."""
    now = match(event.object)
    if event.type != "MODIFIED" or previous is None:
        return event if now else None
    before = match(previous)
    if now:
        return event if before else WatchEvent("ADDED", event.object)
    if not before:
        return None
    gone = copy.deepcopy(previous)
    gone["metadata"]["resourceVersion"] = event.resource_version
    return WatchEvent("DELETED", gone)


def _matcher(
    namespace: str | None, field_selector: str | None, label_selector: str | None
) -> Callable[[Obj], bool]:
    fields = _parse_selector(field_selector)
    labels = _parse_selector(label_selector)

    def match(obj: Obj) -> bool:
        meta = obj.get("metadata") or {}
        if namespace and meta.get("namespace") != namespace:
            return False
        for path, op, value in fields:
            if (_field(obj, path) == value) != (op == "="):
                return False
        obj_labels = meta.get("labels") or {}
        for key, op, value in labels:
            if op == "exists" and key not in obj_labels:
                return False
            if op == "!" and key in obj_labels:
                return False
            if op in ("=", "!=") and (obj_labels.get(key) == value) != (op == "="):
                return False
        return True

    return match


def _parse_selector(selector: str | None) -> list[tuple[str, str, str]]:
    """(key, operator, value) of each term: operator ``=``, ``!=``, ``!`` or ``exists``."""
    out = []
    for text in (selector or "").split(","):
        term = text.strip()
        if not term:
            continue
        if term.startswith("!"):
            out.append((term[1:].strip(), "!", ""))
        elif "!=" in term:
            key, _, value = term.partition("!=")
            out.append((key.strip(), "!=", value.strip()))
        elif "=" in term:
            key, _, value = term.partition("=")
            out.append((key.strip(), "=", value.lstrip("=").strip()))
        else:
            out.append((term, "exists", ""))
    return out


def _field(obj: Obj, path: str) -> str:
    """A field's value as a field selector compares it (absent: empty)."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)
