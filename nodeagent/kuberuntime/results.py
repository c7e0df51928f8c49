"""What one pod sync did: per-container start failures with the kubelet's reasons, the events
the kubelet would record (each about the pod or one of its containers), and when the pod must
be synced again (a back-off expires).

Reasons (``pkg/kubelet/container/sync_result.go`` and ``images/types.go``): ``CrashLoopBackOff``,
``ErrImagePull``, ``ImagePullBackOff``, ``ErrImageNeverPull``, ``InvalidImageName``,
``CreateContainerConfigError``, ``CreateContainerError``, ``RunContainerError``; and for the
sandbox ``CreatePodSandboxError`` / ``ConfigPodSandboxError``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

CRASH_LOOP_BACK_OFF: Final = "CrashLoopBackOff"
ERR_IMAGE_PULL: Final = "ErrImagePull"
IMAGE_PULL_BACK_OFF: Final = "ImagePullBackOff"
ERR_IMAGE_NEVER_PULL: Final = "ErrImageNeverPull"
INVALID_IMAGE_NAME: Final = "InvalidImageName"
CREATE_CONTAINER_CONFIG_ERROR: Final = "CreateContainerConfigError"
CREATE_CONTAINER_ERROR: Final = "CreateContainerError"
RUN_CONTAINER_ERROR: Final = "RunContainerError"
CREATE_POD_SANDBOX_ERROR: Final = "CreatePodSandboxError"
CONFIG_POD_SANDBOX_ERROR: Final = "ConfigPodSandboxError"


@dataclass(frozen=True, slots=True)
class ContainerFailure:
    """Why the last attempt to start a container failed (the kubelet's reason cache)."""

    reason: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class PodEvent:
    """An event the kubelet records about the pod, or about one of its containers."""

    type: str
    reason: str
    message: str
    container: str = ""
    """The container it is about (the event's ``fieldPath``); "" for the pod itself."""


@dataclass(slots=True)
class SyncResult:
    failures: dict[str, ContainerFailure] = field(default_factory=dict)
    """Container name -> why it did not start in this sync."""
    started: list[str] = field(default_factory=list)
    sandbox_error: ContainerFailure | None = None
    retry_in: float | None = None
    """Seconds until a back-off expires and the pod should be synced again."""
    events: list[PodEvent] = field(default_factory=list)
    """What the kubelet would record as events, in order."""
    on_event: Callable[[PodEvent], None] | None = field(default=None, repr=False, compare=False)
    """Called with each event as it happens (``Pulling`` before the pull, ``Killing`` before
    the grace period), so it can be recorded at once."""

    def retry_after(self, seconds: float) -> None:
        self.retry_in = seconds if self.retry_in is None else min(self.retry_in, seconds)

    def event(self, type_: str, reason: str, message: str, *, container: str = "") -> None:
        event = PodEvent(type_, reason, message, container)
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)
