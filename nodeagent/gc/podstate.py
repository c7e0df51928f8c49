"""Which pods still exist, as container GC asks it (the kubelet's ``PodStateProvider``).

A pod exists while the API has it or a pod worker still handles it (it may be terminating).
Until the pod sources have synced nothing is known to be gone, so no pod's content is removed
(``allSourcesReady``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, final

PodExists = Callable[[str], bool]


class PodsView(Protocol):
    def pod_exists(self) -> PodExists | None:
        """A predicate on pod uids for one GC run; None until the pod sources have synced."""
        ...


@final
class PodPresence:
    """``synced``: the pods watch has listed once; ``api_pods``: its objects; ``known``:
    whether a pod worker handles the uid."""

    def __init__(
        self,
        *,
        synced: Callable[[], bool],
        api_pods: Callable[[], Iterable[Mapping[str, Any]]],
        known: Callable[[str], bool],
    ) -> None:
        self._synced = synced
        self._api_pods = api_pods
        self._known = known

    def pod_exists(self) -> PodExists | None:
        if not self._synced():
            return None
        uids = {str((obj.get("metadata") or {}).get("uid", "")) for obj in self._api_pods()}
        known = self._known
        return lambda uid: uid in uids or known(uid)


def _satisfies_protocol(p: PodPresence) -> PodsView:
    return p  # mypy checks PodPresence against PodsView here
