"""Per-key exponential back-off, as client-go's ``flowcontrol.Backoff`` that the kubelet uses.

Crash-loop restarts (10s doubling to 300s, keyed by pod and container) and image pulls (the
same numbers, keyed by pod and image) share it. Times are wall-clock seconds because the
events they are compared with are (a container's ``finishedAt`` from the runtime); the clock
is injected.

- ``remaining(key, event_time)``: seconds left before ``key`` may be retried after an event
  at ``event_time`` (0 when not in back-off) — ``IsInBackOffSince``.
- ``next(key, event_time)``: record a retry; the delay doubles up to the cap, or starts over at
  the initial delay when the previous retry is more than twice the cap (10 min) older than
  ``event_time``: a container that ran cleanly for 10 minutes starts again at 10s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

CONTAINER_BACKOFF_INITIAL: Final = 10.0
CONTAINER_BACKOFF_MAX: Final = 300.0
IMAGE_BACKOFF_INITIAL: Final = 10.0
IMAGE_BACKOFF_MAX: Final = 300.0


@dataclass(slots=True)
class _Entry:
    delay: float
    last_update: float


class Backoff:
    def __init__(
        self,
        *,
        now: Callable[[], float],
        initial: float = CONTAINER_BACKOFF_INITIAL,
        cap: float = CONTAINER_BACKOFF_MAX,
    ) -> None:
        self._now = now
        self._initial = initial
        self._cap = cap
        self._entries: dict[str, _Entry] = {}

    def now(self) -> float:
        return self._now()

    def _expired(self, entry: _Entry, event_time: float) -> bool:
        return event_time - entry.last_update > 2 * self._cap

    def get(self, key: str) -> float:
        """The current delay of ``key`` (0 when it has none)."""
        entry = self._entries.get(key)
        return entry.delay if entry else 0.0

    def remaining(self, key: str, event_time: float) -> float:
        entry = self._entries.get(key)
        if entry is None or self._expired(entry, event_time):
            return 0.0
        return max(0.0, entry.delay - (self._now() - event_time))

    def remaining_since_update(self, key: str) -> float:
        """Seconds left of ``key``'s delay counted from its last retry (``IsInBackOffSinceUpdate``,
        used for image pulls)."""
        entry = self._entries.get(key)
        now = self._now()
        if entry is None or self._expired(entry, now):
            return 0.0
        return max(0.0, entry.delay - (now - entry.last_update))

    def next(self, key: str, event_time: float) -> float:
        """Record a retry now; returns the delay the following retry will wait."""
        entry = self._entries.get(key)
        if entry is None or self._expired(entry, event_time):
            entry = _Entry(delay=self._initial, last_update=0.0)
        else:
            entry.delay = min(entry.delay * 2, self._cap)
        entry.last_update = self._now()
        self._entries[key] = entry
        return entry.delay

    def forget(self, key_prefix: str) -> None:
        """Drop every key starting with ``key_prefix`` (a deleted pod's)."""
        for key in [k for k in self._entries if k.startswith(key_prefix)]:
            del self._entries[key]

    def gc(self) -> None:
        """Drop entries not updated for twice the cap: they would start over anyway."""
        now = self._now()
        for key in [k for k, e in self._entries.items() if now - e.last_update > 2 * self._cap]:
            del self._entries[key]


def container_key(*, namespace: str, name: str, uid: str, container: str, hash: str) -> str:
    """The kubelet's stable key: the same container spec of the same pod."""
    return f"{uid}_{name}_{namespace}_{container}_{hash}"


def image_key(*, uid: str, image: str) -> str:
    return f"{uid}_{image}"
