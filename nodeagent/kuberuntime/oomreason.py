"""Whether a container's exit may still turn out to be an OOM kill (pure).

containerd marks a container ``OOMKilled`` when its shim's OOM event reaches it. The shim sends
that event and the exit by separate paths, and containerd records whichever comes first
(containerd#8180, #12260; its #12714 of December 2025 sends the OOM event first): a container
the kernel OOM-killed can read ``Error`` with exit code 137 for a moment, then ``OOMKilled``.
The kubelet reports what it read first, for good; the runtime manager reads such an exit once
more when :data:`OOM_EVENT_SETTLE` seconds have passed since it (:func:`oom_report_may_lag`,
:func:`settle_left`), so the pod's status names the OOM kill the runtime learned of; a read
after that moment takes the answer as it is. An exit that stays ``Error`` after that (an
outside SIGKILL, or an OOM event the shim lost because the cgroup was gone before it read
``memory.events``) is reported as it is; so is at once a container the agent stopped itself.
"""

from __future__ import annotations

from typing import Final

from nodeagent.kuberuntime import types as cri

SIGKILL_EXIT_CODE: Final = 137
ERROR_REASON: Final = "Error"
"""containerd's reason for a non-zero exit it has no other reason for."""
OOM_EVENT_SETTLE: Final = 2.0
"""Seconds after a SIGKILL exit by which its OOM event, if any, has reached the runtime."""


def settle_left(status: cri.ContainerStatus, now_ns: int) -> float:
    """Seconds from ``now_ns`` until :data:`OOM_EVENT_SETTLE` has passed since the exit."""
    return OOM_EVENT_SETTLE - (now_ns - status.finished_at) / 1e9


def oom_report_may_lag(status: cri.ContainerStatus, now_ns: int) -> bool:
    """The container exited from SIGKILL less than :data:`OOM_EVENT_SETTLE` ago and the
    runtime gives no reason of its own yet."""
    return (
        status.state == cri.CONTAINER_EXITED
        and status.exit_code == SIGKILL_EXIT_CODE
        and status.reason == ERROR_REASON
        and now_ns >= status.finished_at
        and settle_left(status, now_ns) > 0
    )
