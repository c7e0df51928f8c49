"""What one probe run says, as the kubelet's ``probe.Result`` plus its output, and the helpers
every probe kind shares: the output cap and Go's spelling of network errors and durations."""

from __future__ import annotations

import enum
import errno
from dataclasses import dataclass
from typing import Final

MAX_OUTPUT: Final = 10 * 1024  # maxReadLength / maxRespBodyLength


class Outcome(enum.Enum):
    SUCCESS = "success"
    WARNING = "warning"
    FAILURE = "failure"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class ProbeOutcome:
    """``error`` set: the probe could not run (the kubelet throws such a result away after
    an ``Unhealthy`` "probe errored" Event); else ``output`` is what the Event shows."""

    outcome: Outcome
    output: str = ""
    error: str | None = None


def success(output: str = "") -> ProbeOutcome:
    return ProbeOutcome(Outcome.SUCCESS, output)


def failure(output: str) -> ProbeOutcome:
    return ProbeOutcome(Outcome.FAILURE, output)


def errored(error: str) -> ProbeOutcome:
    return ProbeOutcome(Outcome.UNKNOWN, "", error)


def capped(data: bytes) -> str:
    return data[:MAX_OUTPUT].decode("utf-8", errors="replace")


def join_host_port(host: str, port: int) -> str:
    """``net.JoinHostPort``: IPv6 literals in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


_SYSCALL_TEXT: Final = {
    errno.ECONNREFUSED: "connection refused",
    errno.EHOSTUNREACH: "no route to host",
    errno.ENETUNREACH: "network is unreachable",
    errno.ECONNRESET: "connection reset by peer",
    errno.ETIMEDOUT: "connection timed out",
    errno.EADDRNOTAVAIL: "cannot assign requested address",
}


def dial_error(addr: str, error: BaseException) -> str:
    """A failed TCP connect as Go's dialer words it: ``dial tcp 10.1.2.3:80: connect:
    connection refused``, ``dial tcp 10.1.2.3:80: i/o timeout``."""
    if isinstance(error, TimeoutError):
        return f"dial tcp {addr}: i/o timeout"
    if isinstance(error, OSError) and error.errno in _SYSCALL_TEXT:
        return f"dial tcp {addr}: connect: {_SYSCALL_TEXT[error.errno]}"
    if isinstance(error, OSError) and error.strerror:
        return f"dial tcp {addr}: connect: {error.strerror.lower()}"
    return f"dial tcp {addr}: {error}"
