"""What the volume manager asks of the writer of API-sourced volume content (configMap,
secret, downwardAPI, projected): the ``ContentSource`` boundary, and its failure."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from nodeagent.podspec import Pod, Volume


class VolumeSetupError(Exception):
    """A volume cannot be set up; ``message`` is what follows
    ``MountVolume.SetUp failed for volume "x" : `` in the ``FailedMount`` Event."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ContentSource(Protocol):
    async def set_up(self, pod: Pod, volume: Volume, target: Path) -> None:
        """Write ``volume``'s files into the existing directory ``target`` (atomically,
        idempotently: called on every pod sync); raise ``VolumeSetupError``."""
        ...

    def forget(self, pod_uid: str) -> None:
        """The pod is gone: drop what was cached for it."""
        ...


class NoContentSource:
    """A node without a content writer: API-sourced volumes fail visibly."""

    async def set_up(self, pod: Pod, volume: Volume, target: Path) -> None:
        raise VolumeSetupError(f'volume source "{volume.source}" is not supported on this node')

    def forget(self, pod_uid: str) -> None:
        return None


def failure_message(error: BaseException) -> str:
    """The ``FailedMount`` text of a content writer's failure (its ``message`` when it has
    one: the content package's own ``VolumeSetupError`` is not this class)."""
    message = getattr(error, "message", None)
    return message if isinstance(message, str) and message else str(error) or type(error).__name__
