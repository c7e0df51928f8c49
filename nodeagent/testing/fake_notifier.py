"""A Notifier that records what it would have told systemd."""

from __future__ import annotations

from typing import final

from nodeagent.systemd.notify import Notifier


@final
class RecordingNotifier(Notifier):
    def __init__(self) -> None:
        super().__init__(socket_path=None)
        self.messages: list[str] = []

    @property
    def enabled(self) -> bool:
        return True

    def send(self, *assignments: str) -> bool:
        self.messages.append("\n".join(assignments))
        return True
