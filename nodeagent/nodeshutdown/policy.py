"""Graceful node shutdown policy, the kubelet's rules (pure).

- :func:`shutdown_groups`: the configured groups, ascending priority. The legacy pair
  ``shutdownGracePeriod`` T / ``shutdownGracePeriodCriticalPods`` C becomes two groups,
  priority 0 with T-C seconds and priority 2000000000 (system critical) with C seconds;
  ``shutdownGracePeriodByPodPriority`` is used as given, sorted;
- :func:`group_index`: the group of a pod: the largest group priority <= the pod's priority
  (no priority counts as 0); a pod below the lowest group falls into the lowest;
- :func:`effective_grace`: the group's budget, or the pod's own
  ``terminationGracePeriodSeconds`` when it is set and not larger;
- :func:`dropin_text`: the logind drop-in that raises ``InhibitDelayMaxSec``;
- :func:`plan`: what ``nodeagent shutdown plan`` prints.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from nodeagent.config.schema_kubelet import KubeletConfiguration
from nodeagent.gotext import duration_seconds, rfc3339
from nodeagent.podspec import Pod

DEFAULT_PRIORITY: Final = 0  # DefaultPriorityWhenNoDefaultClassExists
SYSTEM_CRITICAL_PRIORITY: Final = 2_000_000_000
DROPIN_DIR: Final = "/etc/systemd/logind.conf.d"
DROPIN_NAME: Final = "99-kubelet.conf"
STATE_FILE: Final = "graceful_node_shutdown_state"
INHIBIT_WHAT: Final = "shutdown"
INHIBIT_WHO: Final = "kubelet"
INHIBIT_WHY: Final = "Kubelet needs time to handle node shutdown"
INHIBIT_MODE: Final = "delay"
SHUTTING_DOWN: Final = "node is shutting down"
EVENT_REASON: Final = "NodeShutdown"
EVENT_SHUTDOWN: Final = "Shutdown manager detected shutdown event"
EVENT_CANCELLED: Final = "Shutdown manager detected shutdown cancellation"
REJECT_REASON: Final = "NodeShutdown"
REJECT_MESSAGE: Final = "Pod was rejected as the node is shutting down."
POD_REASON: Final = "Terminated"
POD_MESSAGE: Final = "Pod was terminated in response to imminent node shutdown."
DISRUPTION_TARGET: Final = "DisruptionTarget"
DISRUPTION_REASON: Final = "TerminationByKubelet"
NO_CONFIG: Final = "No graceful configuration specified, node shutdown will be immediate"


@dataclass(frozen=True, slots=True, order=True)
class ShutdownGroup:
    priority: int
    seconds: int


def shutdown_groups(k: KubeletConfiguration) -> tuple[ShutdownGroup, ...]:
    """The groups, ascending priority; empty when graceful shutdown is off."""
    if k.shutdown_grace_period_by_pod_priority:
        return tuple(
            sorted(
                ShutdownGroup(g.priority, g.shutdown_grace_period_seconds)
                for g in k.shutdown_grace_period_by_pod_priority
            )
        )
    total = int(k.shutdown_grace_period.seconds)
    critical = int(k.shutdown_grace_period_critical_pods.seconds)
    if total <= 0:
        return ()
    return (
        ShutdownGroup(DEFAULT_PRIORITY, total - critical),
        ShutdownGroup(SYSTEM_CRITICAL_PRIORITY, critical),
    )


def total_seconds(groups: Sequence[ShutdownGroup]) -> int:
    return sum(g.seconds for g in groups)


def pod_priority(pod: Pod) -> int:
    return pod.spec.priority if pod.spec.priority is not None else 0


def group_index(groups: Sequence[ShutdownGroup], priority: int) -> int:
    """The kubelet's ``groupByPriority``: the largest group priority <= ``priority``."""
    index = bisect.bisect_left([g.priority for g in groups], priority)
    if index == len(groups):
        return len(groups) - 1
    if groups[index].priority > priority and index > 0:
        return index - 1
    return index


def group_pods(groups: Sequence[ShutdownGroup], pods: Sequence[Pod]) -> list[list[Pod]]:
    """``pods`` by group, in the groups' (ascending) order."""
    out: list[list[Pod]] = [[] for _ in groups]
    if not groups:
        return out
    for pod in pods:
        out[group_index(groups, pod_priority(pod))].append(pod)
    return out


def effective_grace(pod: Pod, group: ShutdownGroup) -> int:
    own = pod.spec.termination_grace_period_seconds
    if own is not None and own <= group.seconds:
        return own
    return group.seconds


def dropin_text(seconds: float) -> str:
    return f"# Kubelet logind override\n[Login]\nInhibitDelayMaxSec={seconds:.0f}\n"


def update_failed_message(attempts: int, wanted: float, current: float) -> str:
    return (
        f"node shutdown manager was timed out after {attempts} attempts waiting for logind "
        f"InhibitDelayMaxSec to update to {duration_seconds(wanted)} (ShutdownGracePeriod), "
        f"current value is {duration_seconds(current)}"
    )


def seconds_text(seconds: float) -> str:
    """The plan's own unit, seconds as ``InhibitDelayMaxSec=`` is written: ``90s``, ``1.5s``."""
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    return f"{seconds:g}s"


def disrupted_status(
    status: dict[str, Any], *, now: str, succeeded: bool, generation: int = 0
) -> dict[str, Any]:
    """The kubelet's status mutation for a pod killed by node shutdown: Failed (unless it
    had ``succeeded`` when the kill began), reason ``Terminated``, and the
    ``DisruptionTarget`` condition, observing the pod's ``generation``."""
    out = dict(status)
    out["phase"] = "Succeeded" if succeeded else "Failed"
    out["reason"] = POD_REASON
    out["message"] = POD_MESSAGE
    conditions = [c for c in out.get("conditions") or [] if c.get("type") != DISRUPTION_TARGET]
    old = next(
        (c for c in status.get("conditions") or [] if c.get("type") == DISRUPTION_TARGET), None
    )
    condition: dict[str, Any] = {
        "type": DISRUPTION_TARGET,
        "status": "True",
        "reason": DISRUPTION_REASON,
        "message": POD_MESSAGE,
        "lastTransitionTime": (old or {}).get("lastTransitionTime") or now,
    }
    if generation:
        condition["observedGeneration"] = generation
    conditions.append(condition)
    out["conditions"] = conditions
    return out


# --- state file -----------------------------------------------------------------------------


def encode_state(start: datetime | None, end: datetime | None) -> bytes:
    zero = "0001-01-01T00:00:00Z"
    return json.dumps(
        {
            "startTime": rfc3339(start) if start else zero,
            "endTime": rfc3339(end) if end else zero,
        }
    ).encode()


def decode_state(data: bytes) -> tuple[datetime | None, datetime | None]:
    """``(start, end)``; the zero time is None. Raises ValueError on a bad file."""
    obj = json.loads(data)
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")

    def parse(key: str) -> datetime | None:
        text = obj.get(key)
        if not isinstance(text, str) or text.startswith("0001-01-01"):
            return None
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    return parse("startTime"), parse("endTime")


# --- plan (nodeagent shutdown plan) ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlannedPod:
    namespace: str
    name: str
    priority: int
    own_grace: int | None
    grace: int

    @property
    def cut(self) -> bool:
        return self.own_grace is not None and self.own_grace > self.grace


@dataclass(frozen=True, slots=True)
class PlannedGroup:
    group: ShutdownGroup
    pods: tuple[PlannedPod, ...]


def plan(groups: Sequence[ShutdownGroup], pods: Sequence[Pod]) -> list[PlannedGroup]:
    out = []
    for group, members in zip(groups, group_pods(groups, pods), strict=True):
        planned = tuple(
            PlannedPod(
                namespace=p.namespace,
                name=p.name,
                priority=pod_priority(p),
                own_grace=p.spec.termination_grace_period_seconds,
                grace=effective_grace(p, group),
            )
            for p in sorted(members, key=lambda p: (p.namespace, p.name))
        )
        out.append(PlannedGroup(group=group, pods=planned))
    return out


def render_plan(planned: Sequence[PlannedGroup], *, inhibit_delay_max: float | None) -> str:
    if not planned:
        return NO_CONFIG + "\n"
    lines = []
    total = total_seconds([p.group for p in planned])
    for i, pg in enumerate(planned):
        g = pg.group
        lines.append(
            f"group {i + 1}: priority >= {g.priority}, budget {g.seconds}s, "
            f"{len(pg.pods)} pod(s)" + (" (skipped: no pods)" if not pg.pods else "")
        )
        for p in pg.pods:
            own = "unset" if p.own_grace is None else f"{p.own_grace}s"
            line = f"  {p.namespace}/{p.name}: priority {p.priority}, grace {p.grace}s (own {own})"
            if p.cut:
                line += f"  WARNING: its own grace {own} is cut to the group's {g.seconds}s"
            lines.append(line)
    lines.append(f"total: {total}s")
    if inhibit_delay_max is None:
        lines.append("logind InhibitDelayMaxSec: unknown (logind not reachable)")
    else:
        verdict = (
            "fits"
            if total <= inhibit_delay_max
            else "too short: the agent raises it with a drop-in when it starts"
        )
        lines.append(f"logind InhibitDelayMaxSec: {seconds_text(inhibit_delay_max)} ({verdict})")
    return "\n".join(lines) + "\n"
