"""CRI endpoints and the gRPC channel settings the kubelet uses for them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from nodeagent.kuberuntime.errors import CriError

# The kubelet's defaults (cri-client remote_runtime.go and the KubeletConfiguration).
DEFAULT_ENDPOINT: Final = "unix:///run/containerd/containerd.sock"
RUNTIME_REQUEST_TIMEOUT: Final = 120.0  # runtimeRequestTimeout, 2m
MAX_MSG_SIZE: Final = 16 * 1024 * 1024  # maxMsgSize, 16 MiB
AUTHORITY: Final = "localhost"
RECONNECT_BACKOFF_BASE_MS: Final = 100
RECONNECT_BACKOFF_MAX_MS: Final = 3000
MIN_CONNECT_TIMEOUT_MS: Final = 5000  # C-core reads min_reconnect_backoff as this


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A runtime endpoint: ``display`` as the user wrote it (normalised), ``target`` for gRPC."""

    display: str
    path: str

    @property
    def target(self) -> str:
        return f"unix://{self.path}" if self.path.startswith("/") else f"unix:{self.path}"


def parse_endpoint(endpoint: str) -> Endpoint:
    """Accept ``unix:///abs/path``, ``unix:/abs/path`` or a bare path; refuse other schemes.

    >>> parse_endpoint("/run/containerd/containerd.sock").display
    'unix:///run/containerd/containerd.sock'
    """
    text = endpoint.strip()
    if text.startswith("unix://"):
        path = text[len("unix://") :]
    elif text.startswith("unix:"):
        path = text[len("unix:") :]
    elif "://" in text:
        scheme = text.split("://", 1)[0]
        raise CriError(
            f'CRI endpoint "{endpoint}": protocol "{scheme}" not supported, use unix:///path',
            endpoint=endpoint,
            code="InvalidArgument",
            details=f"protocol {scheme!r} not supported",
        )
    else:
        path = text
    if not path:
        raise CriError(
            f'CRI endpoint "{endpoint}": no socket path',
            endpoint=endpoint,
            code="InvalidArgument",
            details="no socket path",
        )
    display = f"unix://{path}" if path.startswith("/") else f"unix:{path}"
    return Endpoint(display=display, path=path)


def channel_options() -> list[tuple[str, int | str]]:
    """gRPC channel arguments matching the kubelet's dial options."""
    return [
        ("grpc.max_receive_message_length", MAX_MSG_SIZE),
        ("grpc.default_authority", AUTHORITY),
        ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_BASE_MS),
        ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS),
        ("grpc.min_reconnect_backoff_ms", MIN_CONNECT_TIMEOUT_MS),
    ]
