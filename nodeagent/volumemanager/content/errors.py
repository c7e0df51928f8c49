"""The error a volume's content setup ends in."""

from __future__ import annotations

from collections.abc import Sequence


class VolumeSetupError(Exception):
    """A volume whose content cannot be set up. ``message`` is the kubelet's text after
    ``MountVolume.SetUp failed for volume "x" : `` (e.g. ``configmap "y" not found``)."""

    def __init__(self, message: str) -> None:
        self.message = message
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
