"""The error a volume's content setup ends in."""

from __future__ import annotations

from collections.abc import Sequence

SETUP_FAILED = "MountVolume.SetUp failed"


class VolumeSetupError(Exception):
    """A volume that cannot be set up. ``message`` is the kubelet's text after
    ``MountVolume.SetUp failed for volume "x" : `` (e.g. ``configmap "y" not found``).

    ``operation`` is the Event's prefix (the kubelet's ``GenerateError``: ``MountVolume.SetUp
    failed``, ``MountVolume.NodeAffinity check failed``, ``MountVolume.MountDevice failed``),
    None when the kubelet posts no Event (a claim that is not bound yet: only a log line);
    ``spec_name`` the volume the Event names when it is not the pod's volume (a
    PersistentVolume's name)."""

    def __init__(
        self,
        message: str,
        *,
        operation: str | None = SETUP_FAILED,
        spec_name: str | None = None,
    ) -> None:
        self.message = message
        self.operation = operation
        self.spec_name = spec_name
        super().__init__(message)


def aggregate(messages: Sequence[str]) -> str:
    """Several errors as one message, as apimachinery's ``utilerrors.NewAggregate`` prints
    them: one error alone, else ``[a, b]`` with duplicates dropped."""
    seen: list[str] = []
    for message in messages:
        if message not in seen:
            seen.append(message)
    if len(seen) == 1:
        return seen[0]
    return "[" + ", ".join(seen) + "]"
