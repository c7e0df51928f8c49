"""What the volume manager asks of the writer of API-sourced volume content (configMap,
secret, downwardAPI, projected): the ``ContentSource`` boundary and its failure (both from
``content``), a stand-in for a node without one, and the Event text of any failure."""

from __future__ import annotations

from pathlib import Path

from nodeagent.podspec import Pod, Volume
from nodeagent.volumemanager.content import ContentSource
from nodeagent.volumemanager.content.errors import VolumeSetupError

__all__ = ["ContentSource", "NoContentSource", "VolumeSetupError", "failure_message"]


class NoContentSource:
    """A node without a content writer: API-sourced volumes fail visibly."""

    async def set_up(self, pod: Pod, volume: Volume, target: Path) -> None:
        raise VolumeSetupError(f'volume source "{volume.source}" is not supported on this node')

    def forget(self, pod_uid: str) -> None:
        return None


def failure_message(error: BaseException) -> str:
    """The ``FailedMount`` text of a content writer's failure: its ``message`` when it has
    one, else its text."""
    message = getattr(error, "message", None)
    return message if isinstance(message, str) and message else str(error) or type(error).__name__
