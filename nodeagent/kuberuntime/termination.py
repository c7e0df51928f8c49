"""Termination messages, as the kubelet provides and reads them.

Before a container is created, an empty file ``<rootDir>/pods/<uid>/containers/<name>/<id>``
(mode 0666, a fresh random id per instance) is mounted at its ``terminationMessagePath``. When
the container has exited, the file's last 4096 bytes become ``state.terminated.message``
(after the runtime's own message and ``": "``). With ``terminationMessagePolicy:
FallbackToLogsOnError``, an empty (or missing) file and a non-zero exit code take the last 80
lines, at most 2048 bytes, of the container's log instead. Pure; the manager reads the files.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Final

from nodeagent.kuberuntime import labels
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.podsettings import PodRuntimeSettings
from nodeagent.podspec import Container, Pod

MAX_MESSAGE_BYTES: Final = 4096  # MaxContainerTerminationMessageLength
MAX_LOG_LINES: Final = 80  # MaxContainerTerminationMessageLogLines
MAX_LOG_BYTES: Final = 2048  # MaxContainerTerminationMessageLogLength
FALLBACK_TO_LOGS: Final = "FallbackToLogsOnError"
CANNOT_RUN: Final = "ContainerCannotRun"
FILE_MODE: Final = 0o666


def containers_dir(settings: PodRuntimeSettings, uid: str) -> str:
    """``<rootDir>/pods/<uid>/containers``."""
    return str(PurePosixPath(settings.pod_dir(uid)) / "containers")


def container_dir(settings: PodRuntimeSettings, uid: str, container: str) -> str:
    """``<rootDir>/pods/<uid>/containers/<container>``."""
    return str(PurePosixPath(containers_dir(settings, uid)) / container)


def new_instance_id() -> str:
    """A random id for one instance's message file (the kubelet's ``makeUID``)."""
    return secrets.token_hex(4)


@dataclass(frozen=True, slots=True)
class MessageFile:
    host_path: str
    mount: cri.Mount


def termination_message_file(
    settings: PodRuntimeSettings, pod: Pod, container: Container, instance_id: str
) -> MessageFile | None:
    """The host file and the CRI mount for ``container``'s termination message; None when
    the container has no ``terminationMessagePath``."""
    path = container.termination_message_path
    if not path:
        return None
    host = str(PurePosixPath(container_dir(settings, pod.uid, container.name)) / instance_id)
    container_path = path if path.startswith("/") else "/" + path
    return MessageFile(host, cri.Mount(container_path=container_path, host_path=host))


def termination_message_mounts(message: MessageFile | None) -> list[cri.Mount]:
    """The mounts the termination message adds to a container (merged with the volumes')."""
    return [message.mount] if message is not None else []


@dataclass(frozen=True, slots=True)
class MessageSource:
    """Where an exited container's message comes from: the host file (or None: none mounted)
    and whether an empty file falls back to the log."""

    host_path: str | None
    fallback_to_logs: bool
    log_path: str


def message_source(status: cri.ContainerStatus) -> MessageSource:
    """From an exited container's CRI status: its annotations, mounts and log path."""
    path = status.annotations.get(labels.TERMINATION_MESSAGE_PATH, "")
    policy = status.annotations.get(labels.TERMINATION_MESSAGE_POLICY, "")
    fallback = policy == FALLBACK_TO_LOGS and status.exit_code != 0 and status.reason != CANNOT_RUN
    host: str | None = None
    if path:
        wanted = path if path.startswith("/") else "/" + path
        host = next((m.host_path for m in status.mounts if m.container_path == wanted), None)
    return MessageSource(host_path=host, fallback_to_logs=fallback, log_path=status.log_path)


def log_tail_message(data: bytes) -> str:
    """The content of the last 80 lines of a CRI log file (``<time> <stream> <P|F> text``),
    at most its last 2048 bytes: a partial (``P``) line continues on the next record."""
    records = data.split(b"\n")
    content: list[bytes] = []
    for record in records:
        parts = record.split(b" ", 3)
        if len(parts) < 3:
            continue
        tag = parts[2]
        text = parts[3] if len(parts) == 4 else b""
        content.append(text if tag == b"P" else text + b"\n")
    lines = b"".join(content).splitlines(keepends=True)[-MAX_LOG_LINES:]
    return b"".join(lines)[-MAX_LOG_BYTES:].decode(errors="replace")


def with_message(runtime_message: str, termination_message: str) -> str:
    """The runtime's message, enriched with what the application wrote."""
    if not termination_message:
        return runtime_message
    if runtime_message:
        return f"{runtime_message}: {termination_message}"
    return termination_message


def read_error_message(path: str, error: str) -> str:
    return f"Error on reading termination log {path}: {error}"
