"""Errors raised by the CRI client and by the fake runtime.

::

    AgentError
    └── CriError                 any failed CRI call; carries rpc, endpoint, code, details
        ├── CriNotFound          the sandbox, container or image does not exist
        ├── CriUnavailable       the runtime cannot be reached (socket missing, runtime restarting)
        ├── CriDeadlineExceeded  the per-RPC deadline passed
        ├── CriUnimplemented     the runtime does not implement this RPC
        ├── CriUnknown           the runtime failed without a more specific code
        └── CriVersionError      the runtime does not serve CRI runtime.v1 (node must not be Ready)

``code`` is the gRPC status name as Go spells it (``NotFound``, ``DeadlineExceeded``), so the
message reads like the kubelet's (``rpc error: code = NotFound desc = ...``). Callers never need
to import grpc to branch on an error.
"""

from __future__ import annotations

from nodeagent.errors import AgentError


class CriError(AgentError):
    """A CRI call failed. ``str()`` names the RPC and the endpoint."""

    def __init__(
        self,
        message: str,
        *,
        rpc: str = "",
        endpoint: str = "",
        code: str = "Unknown",
        details: str = "",
    ) -> None:
        super().__init__(message)
        self.rpc = rpc
        self.endpoint = endpoint
        self.code = code
        self.details = details

    @property
    def status_text(self) -> str:
        """The gRPC status as Go formats it, as it appears in kubelet events and conditions."""
        return f"rpc error: code = {self.code} desc = {self.details}"


class CriNotFound(CriError):
    """The sandbox, container or image named in the request does not exist."""


class CriUnavailable(CriError):
    """The runtime is unreachable: no socket, connection refused, or shutting down."""


class CriDeadlineExceeded(CriError):
    """The call did not finish within its deadline."""


class CriUnimplemented(CriError):
    """The runtime does not implement the RPC (or the whole service)."""


class CriUnknown(CriError):
    """The runtime reported a failure without a more specific status code."""


class CriVersionError(CriError):
    """The runtime does not serve a usable CRI runtime.v1 API; the node must not be Ready."""


BY_CODE: dict[str, type[CriError]] = {
    "NotFound": CriNotFound,
    "Unavailable": CriUnavailable,
    "DeadlineExceeded": CriDeadlineExceeded,
    "Unimplemented": CriUnimplemented,
    "Unknown": CriUnknown,
}


def cri_error(*, rpc: str, endpoint: str, code: str, details: str) -> CriError:
    """The typed error for a failed call of ``rpc`` with gRPC status ``code`` (Go spelling)."""
    cls = BY_CODE.get(code, CriError)
    message = f'CRI {rpc} on endpoint "{endpoint}": rpc error: code = {code} desc = {details}'
    return cls(message, rpc=rpc, endpoint=endpoint, code=code, details=details)


def runtime_errors(e: BaseException) -> str | None:
    """The runtime's error text when ``e`` is only CRI errors (one, or a group of them such as
    ``kill_pod`` raises), else None: callers log those as one line (they are retried), anything
    else with its traceback."""
    if isinstance(e, CriError):
        return str(e)
    if isinstance(e, BaseExceptionGroup) and all(isinstance(x, CriError) for x in e.exceptions):
        return "; ".join(str(x) for x in e.exceptions)
    return None
