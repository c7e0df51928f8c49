"""``spec.activeDeadlineSeconds``: the kubelet's active deadline handler. Pure.

A pod may be active on the node for ``activeDeadlineSeconds`` from its ``status.startTime``
(the status the agent last computed, else the API's). Once that has passed, the pod is failed
with the kubelet's reason and message and killed through its worker; until then its worker is
woken when the deadline falls (:func:`seconds_left`), so a deadline lowered on a running pod
takes effect at once, without a faster resync for every pod.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, Final

from nodeagent.gotext import parse_rfc3339
from nodeagent.podspec import Pod

REASON: Final = "DeadlineExceeded"
MESSAGE: Final = "Pod was active on the node longer than the specified deadline"


def start_time(previous: Mapping[str, Any] | None, pod: Pod) -> str | None:
    """The pod's ``startTime``: from the status the agent computed last, else the API's."""
    return (previous or {}).get("startTime") or pod.status.get("startTime") or None


def seconds_left(pod: Pod, started: str | None, now: dt.datetime) -> float | None:
    """Seconds until ``pod`` passes its active deadline (0 or less: it has, as the kubelet's
    ``duration >= allowed``); None without a deadline or before the pod has a start time."""
    allowed = pod.spec.active_deadline_seconds
    if allowed is None:
        return None
    start = parse_rfc3339(started)
    if start is None:
        return None
    return allowed - (now - start).total_seconds()


def exceeded(pod: Pod, started: str | None, now: dt.datetime) -> bool:
    left = seconds_left(pod, started, now)
    return left is not None and left <= 0
