"""Pod sources as stores, and the merge of the file source with the API source.

A :class:`Store` is what ``WatchCache`` offers (and what the sync loop's ``PodStore`` asks
for): ``items()``, a ``resource_version`` that moves on every change, ``synced`` and two waits.
:class:`PodSources` merges several into one for the sync loop, with the kubelet's rules for
sources (``pkg/kubelet/config``): pods of a source are used as soon as that source has listed
once (static pods run while the API server is unreachable), and ``synced`` — which gates
housekeeping, the removal of runtime pods no source knows — holds only once *every* source
has listed (the kubelet's ``sourcesReady.AllReady``), so a pod is never taken for an orphan
because its source has not spoken yet.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from nodeagent.tasks import cancel_and_wait


class Store(Protocol):
    @property
    def synced(self) -> bool: ...

    @property
    def resource_version(self) -> str: ...

    def items(self) -> list[dict[str, Any]]: ...

    async def wait_synced(self) -> None: ...

    async def wait_for(self, predicate: Callable[[Any], bool]) -> None: ...


def _moved(store: Any, *, since: str) -> bool:
    return bool(store.resource_version != since)


async def wait_any_moved(stores: Sequence[Store], since: Sequence[str]) -> None:
    """Return once one of ``stores`` has a resource version other than its ``since``."""
    waits = [
        asyncio.ensure_future(store.wait_for(functools.partial(_moved, since=rv)))
        for store, rv in zip(stores, since, strict=True)
    ]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        await cancel_and_wait(*waits)


class PodSources:
    """Several pod sources as one store (the file source and the API's watch cache)."""

    def __init__(self, *sources: Store) -> None:
        if not sources:
            raise ValueError("need at least one pod source")
        self._sources = sources

    @property
    def synced(self) -> bool:
        """Every source has listed once."""
        return all(s.synced for s in self._sources)

    @property
    def resource_version(self) -> str:
        return "/".join(s.resource_version if s.synced else "-" for s in self._sources)

    def items(self) -> list[dict[str, Any]]:
        return [obj for s in self._sources if s.synced for obj in s.items()]

    async def wait_synced(self) -> None:
        """Return once *any* source has listed: its pods can run."""
        while not any(s.synced for s in self._sources):
            await wait_any_moved(self._sources, [s.resource_version for s in self._sources])

    async def wait_for(self, predicate: Callable[[Any], bool]) -> None:
        while not predicate(self):
            await wait_any_moved(self._sources, [s.resource_version for s in self._sources])
