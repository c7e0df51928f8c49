"""The prober's results caches (the kubelet's ``prober/results``): one per probe type, keyed by
container ID; a change calls ``on_update(pod_uid)`` so the pod is synced at once."""

from __future__ import annotations

import enum
from collections.abc import Callable


class Result(enum.Enum):
    UNKNOWN = "unknown"
    SUCCESS = "success"
    FAILURE = "failure"


class ResultsCache:
    def __init__(self, on_update: Callable[[str], None] = lambda _uid: None) -> None:
        self._results: dict[str, Result] = {}
        self._on_update = on_update

    def get(self, container_id: str) -> Result | None:
        return self._results.get(container_id)

    def set(self, container_id: str, result: Result, pod_uid: str) -> None:
        if self._results.get(container_id) is result:
            return
        self._results[container_id] = result
        self._on_update(pod_uid)

    def remove(self, container_id: str) -> None:
        self._results.pop(container_id, None)

    def __len__(self) -> int:
        return len(self._results)
