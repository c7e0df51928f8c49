"""Reading an exited container's termination message, once per container instance (the
policy and the paths are :mod:`.termination`'s; the files are read here)."""

from __future__ import annotations

from typing import Final

from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.podfiles import Files
from nodeagent.kuberuntime.termination import (
    MAX_LOG_BYTES,
    MAX_MESSAGE_BYTES,
    log_tail_message,
    message_source,
    read_error_message,
)

LOG_TAIL_READ: Final = 64 * 1024
"""How much of a container log is read for ``FallbackToLogsOnError`` (80 lines' worth)."""


class TerminationMessages:
    def __init__(self, *, files: Files) -> None:
        self._files = files
        self._messages: dict[str, dict[str, str]] = {}
        """Pod uid -> exited container id -> its termination message (read once)."""

    def forget(self, uid: str) -> None:
        """Drop a deleted pod's messages."""
        self._messages.pop(uid, None)

    async def read(self, uid: str, status: cri.ContainerStatus) -> str:
        """What an exited container wrote to its termination message file (or its log's
        tail under ``FallbackToLogsOnError``); read once per container."""
        cache = self._messages.setdefault(uid, {})
        if status.id in cache:
            return cache[status.id]
        source = message_source(status)
        message = ""
        fallback = source.fallback_to_logs
        if source.host_path is not None:
            try:
                data = await self._files.read_tail(source.host_path, MAX_MESSAGE_BYTES)
            except OSError as e:
                data, fallback = None, False
                message = read_error_message(source.host_path, str(e))
            if data:
                message, fallback = data.decode(errors="replace"), False
        if fallback and source.log_path:
            try:
                log = await self._files.read_tail(source.log_path, LOG_TAIL_READ)
            except OSError:
                log = None
            message = log_tail_message(log or b"")[-MAX_LOG_BYTES:]
        cache[status.id] = message
        return message
