"""A watch-backed cache of one resource (a reflector and its store), shared by managers.

``run()`` lists, then watches from the list's resourceVersion with bookmarks, keeping the store
current. When the server ends a watch it re-watches from the last resourceVersion seen (a
bookmark's included); on 410 Gone it relists; on any other failure it waits with backoff
(0.8s doubling to 30s, as client-go's reflector) and tries again, logging each step once. The
wait ends early when the apiserver answers another call after an outage
(:mod:`.reachability`): the cache then tries again after a random part of a second
(``RECONNECT_SPREAD_S``), so the caches do not all come back at once.
Readers call :meth:`get` / :meth:`items` (cheap, synchronous) or await :meth:`wait_for`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable

from nodeagent.apiserver.backoff import Backoff
from nodeagent.apiserver.errors import ApiError, Forbidden, Gone
from nodeagent.apiserver.interface import Api, WatchEvent
from nodeagent.apiserver.reachability import sleep_or_answer
from nodeagent.apiserver.resources import Obj, Resource
from nodeagent.log import Logger, get_logger

Key = tuple[str, str]
MIN_WATCH_TIMEOUT = 300
RECONNECT_SPREAD_S = 1.0


def _key(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


class WatchCache:
    def __init__(
        self,
        *,
        api: Api,
        resource: Resource,
        namespace: str | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        name: str | None = None,
        backoff: Backoff | None = None,
        rand: Callable[[], float] = random.random,
        forbidden_hint: str = "",
        log: Logger | None = None,
    ) -> None:
        self._api = api
        self._res = resource
        self._namespace = namespace
        self._fields = field_selector
        self._labels = label_selector
        self._name = name or f"cache:{resource.plural}"
        self._backoff = backoff or Backoff(initial=0.8, cap=30.0)
        self._rand = rand
        self._forbidden_hint = forbidden_hint
        self._log = (log or get_logger("apiserver.cache")).bind(resource=resource.plural)
        self._store: dict[Key, Obj] = {}
        self._rv = ""
        self._synced = asyncio.Event()
        self._changed = asyncio.Event()

    @property
    def name(self) -> str:
        return self._name

    @property
    def resource_version(self) -> str:
        return self._rv

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def get(self, name: str, namespace: str | None = None) -> Obj | None:
        return self._store.get((namespace or "", name))

    def items(self) -> list[Obj]:
        return list(self._store.values())

    async def wait_synced(self) -> None:
        await self._synced.wait()

    async def wait_for(self, predicate: Callable[[WatchCache], bool]) -> None:
        """Return once ``predicate(self)`` holds (checked after every change)."""
        while not predicate(self):
            await self._changed.wait()

    async def run(self) -> None:
        while True:
            try:
                await self._list()
                await self._watch_until_gone()
            except ApiError as e:
                delay = self._backoff.next()
                hint = self._forbidden_hint if isinstance(e, Forbidden) else ""
                self._log.warning(
                    "List/watch failed; will retry",
                    error=str(e),
                    retry_in_s=delay,
                    **({"fix": hint} if hint else {}),
                )
                await self._pause(delay)

    async def _list(self) -> None:
        result = await self._api.list(
            self._res,
            namespace=self._namespace,
            field_selector=self._fields,
            label_selector=self._labels,
        )
        self._store = {_key(o): o for o in result.items}
        self._rv = result.resource_version
        self._backoff.reset()
        self._synced.set()
        self._notify()
        self._log.v(4).info("Listed", items=len(self._store), resource_version=self._rv)

    async def _watch_until_gone(self) -> None:
        while True:
            timeout = int(MIN_WATCH_TIMEOUT * (1.0 + self._rand()))
            try:
                events = self._api.watch(
                    self._res,
                    namespace=self._namespace,
                    resource_version=self._rv,
                    field_selector=self._fields,
                    label_selector=self._labels,
                    timeout_seconds=timeout,
                )
                async with contextlib.aclosing(events):
                    async for event in events:
                        self._apply(event)
                        self._backoff.reset()
            except Gone:
                self._log.info("Watch expired; relisting", resource_version=self._rv)
                return
            except ApiError as e:
                delay = self._backoff.next()
                self._log.warning("Watch failed; will retry", error=str(e), retry_in_s=delay)
                await self._pause(delay)

    async def _pause(self, delay: float) -> None:
        """Sleep out the back-off, or until the apiserver answers another call after an
        outage; then a random part of ``RECONNECT_SPREAD_S`` more."""
        if await sleep_or_answer(delay, self._api.answered_again):
            self._log.v(2).info("The apiserver answers again; retrying now")
            await asyncio.sleep(min(delay, RECONNECT_SPREAD_S) * self._rand())

    def _apply(self, event: WatchEvent) -> None:
        rv = event.resource_version
        if rv:
            self._rv = rv
        if event.type == "BOOKMARK":
            return
        key = _key(event.object)
        if event.type == "DELETED":
            self._store.pop(key, None)
        else:
            self._store[key] = event.object
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()
