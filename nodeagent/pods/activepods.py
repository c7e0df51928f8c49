"""Which pods count against a new one at admission: the kubelet's ``GetActivePods``. Pure.

The kubelet starts from its pod manager — the pods the sources have *now*: a pod the API no
longer has (force-deleted, or deleted once terminated) counts for nothing, whatever its worker
is still doing — and leaves out a pod that is inactive (``isPodInactive``):

- its worker has stopped its containers for good (``IsPodKnownTerminated``); a pod that was
  already terminal when it reached the node counts as that too;
- it is in a terminal phase (the API's, or the one the node last reported) and no termination
  was asked of its worker — a pod refused at admission, for one.

A pod being deleted, killed or evicted keeps counting until its containers have stopped: the
scheduler counts it too until it leaves the API or turns terminal. Admission then adds each
remaining pod's allocated resources (``getAllocatedPods``).
"""

from __future__ import annotations

import enum
from typing import Final

from nodeagent.podspec import Pod

TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})


class Termination(enum.Enum):
    """How far the pod workers are with stopping a pod."""

    NOT_REQUESTED = "not requested"
    REQUESTED = "requested"  # deleted, removed, killed, evicted or finished: being stopped
    DONE = "done"  # containers stopped for good (or terminal before the node ran it)


def is_inactive(pod: Pod, termination: Termination | None, reported_phase: str | None) -> bool:
    """``termination`` None: no worker (refused, or not admitted yet): it holds nothing."""
    if termination is None or termination is Termination.DONE:
        return True
    terminal = pod.status.get("phase") in TERMINAL_PHASES or reported_phase in TERMINAL_PHASES
    return terminal and termination is Termination.NOT_REQUESTED
