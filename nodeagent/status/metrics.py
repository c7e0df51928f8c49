"""``kubelet_terminated_containers_total`` (1.35+), on the default Prometheus registry.

The kubelet's status manager counts a container once, when a status it is given shows it
terminated and the previous one (its cached status, else the pod's status in the API) did not:
labelled by container type, exit code and the terminated state's reason. A restarted agent,
whose first statuses are compared with the API's, does not count old terminations again.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from prometheus_client import Counter

CONTAINER: Final = "container"
INIT_CONTAINER: Final = "init_container"
EPHEMERAL_CONTAINER: Final = "ephemeral_container"
_KINDS: Final = (
    ("initContainerStatuses", INIT_CONTAINER),
    ("containerStatuses", CONTAINER),
    ("ephemeralContainerStatuses", EPHEMERAL_CONTAINER),
)

TERMINATED_CONTAINERS: Final = Counter(
    "kubelet_terminated_containers_total",
    "Cumulative number of container terminations.",
    ["container_type", "exit_code", "reason"],
)


def _terminated(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    terminated = (status.get("state") or {}).get("terminated")
    return terminated if isinstance(terminated, Mapping) else None


def terminations(old: Mapping[str, Any], new: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(container type, exit code, reason) of each container ``new`` shows terminated and
    ``old`` did not (or did not have)."""
    for key, kind in _KINDS:
        before: Sequence[Mapping[str, Any]] = old.get(key) or ()
        previous = {str(s.get("name", "")): s for s in before}
        for status in new.get(key) or ():
            terminated = _terminated(status)
            if terminated is None:
                continue
            was = previous.get(str(status.get("name", "")))
            if was is None or _terminated(was) is None:
                yield (
                    kind,
                    str(int(terminated.get("exitCode", 0))),
                    str(terminated.get("reason", "")),
                )


def count_terminations(old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    for labels in terminations(old, new):
        TERMINATED_CONTAINERS.labels(*labels).inc()
