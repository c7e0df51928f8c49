"""The order in which a pod with sidecars stops, as the kubelet's ``terminationOrdering``.

App containers stop first (in parallel); each sidecar waits until every app container and
every sidecar declared after it has stopped, so sidecars stop in reverse spec order. Waiting
uses the grace period: a container whose turn has not come when its grace runs out is stopped
anyway. Containers that are not running count as stopped from the start.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Mapping

from nodeagent.podspec import Pod


def stop_prerequisites(pod: Pod) -> dict[str, tuple[str, ...]]:
    """Container name -> the containers that must have stopped before it may stop. Pure."""
    apps = tuple(c.name for c in pod.spec.containers)
    prereqs: dict[str, tuple[str, ...]] = {}
    later: list[str] = []
    for container in reversed(pod.spec.init_containers):
        if container.restart_policy != "Always":
            continue
        prereqs[container.name] = apps + tuple(later[-1:])
        later.append(container.name)
    return prereqs


class TerminationOrdering:
    def __init__(
        self,
        pod: Pod,
        running: Iterable[str],
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        names = [c.name for c in (*pod.spec.init_containers, *pod.spec.containers)]
        self._stopped: dict[str, asyncio.Event] = {name: asyncio.Event() for name in names}
        alive = set(running)
        for name, event in self._stopped.items():
            if name not in alive:
                event.set()
        self._prereqs: Mapping[str, tuple[str, ...]] = stop_prerequisites(pod)
        self._monotonic = monotonic

    async def wait_for_turn(self, name: str, grace: float) -> float:
        """Wait until ``name`` may stop, at most ``grace`` seconds; the seconds waited."""
        started = self._monotonic()
        waits = [self._stopped[p].wait() for p in self._prereqs.get(name, ()) if p in self._stopped]
        if waits:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*waits), grace)
        return self._monotonic() - started

    def terminated(self, name: str) -> None:
        event = self._stopped.get(name)
        if event is not None:
            event.set()
