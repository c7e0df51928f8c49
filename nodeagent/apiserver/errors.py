"""Typed errors for kube-apiserver calls.

Every failed call raises one of these (never an ``httpx2`` exception)::

    ApiError                     root; ``code`` (HTTP status, 0 without a response), ``reason``
    ├── BadRequest               400
    ├── Unauthorized             401 (credentials rejected or expired)
    ├── Forbidden                403 (RBAC, Node authorizer, NodeRestriction admission)
    ├── NotFound                 404
    ├── Conflict                 409 optimistic-concurrency failure (stale resourceVersion)
    │   └── AlreadyExists        409 with reason AlreadyExists (create of an existing name)
    ├── Gone                     410 resourceVersion too old (watch/list must start over)
    ├── Invalid                  422 validation failed
    ├── TooManyRequests          429; ``retry_after`` seconds from Retry-After, if given
    ├── ServerError              5xx; ``retry_after`` for 503 with Retry-After
    ├── Timeout                  the per-request deadline passed, or 504 / reason Timeout
    └── TransportError           no HTTP answer: connection refused/reset, TLS failure

``retryable(e)`` says whether retrying the same request later can help.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeagent.errors import AgentError


class ApiError(AgentError):
    """A kube-apiserver call failed. ``str()`` names the verb, the path and the server's words."""

    default_code = 0

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        reason: str = "",
        verb: str = "",
        path: str = "",
        retry_after: float | None = None,
    ) -> None:
        self.message = message
        self.code = self.default_code if code is None else code
        self.reason = reason
        self.verb = verb
        self.path = path
        self.retry_after = retry_after
        super().__init__(message)

    def __str__(self) -> str:
        where = f"{self.verb} {self.path}: " if self.verb else ""
        code = f" ({self.code} {self.reason})" if self.code else ""
        return f"{where}{self.message}{code}"


class BadRequest(ApiError):
    default_code = 400


class Unauthorized(ApiError):
    default_code = 401


class Forbidden(ApiError):
    default_code = 403


class NotFound(ApiError):
    default_code = 404


class Conflict(ApiError):
    default_code = 409


class AlreadyExists(Conflict):
    pass


class Gone(ApiError):
    default_code = 410


class Invalid(ApiError):
    default_code = 422


class TooManyRequests(ApiError):
    default_code = 429


class ServerError(ApiError):
    default_code = 500


class Timeout(ApiError):
    pass


class TransportError(ApiError):
    pass


_BY_CODE: Mapping[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
    504: Timeout,
}


def error_for_status(
    code: int,
    status: Mapping[str, Any] | None,
    *,
    verb: str = "",
    path: str = "",
    retry_after: float | None = None,
) -> ApiError:
    """Map an HTTP status code and the server's ``Status`` body (if any) to a typed error."""
    status = status or {}
    reason = str(status.get("reason") or "")
    message = str(status.get("message") or f"HTTP {code}")
    details = status.get("details")
    if retry_after is None and isinstance(details, Mapping):
        seconds = details.get("retryAfterSeconds")
        if isinstance(seconds, int) and seconds > 0:
            retry_after = float(seconds)
    cls: type[ApiError]
    if code == 409 and reason == "AlreadyExists":
        cls = AlreadyExists
    elif reason == "Timeout" and code >= 500:
        cls = Timeout
    elif code in _BY_CODE:
        cls = _BY_CODE[code]
    elif code >= 500:
        cls = ServerError
    else:
        cls = ApiError
    return cls(message, code=code, reason=reason, verb=verb, path=path, retry_after=retry_after)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (the apiserver only sends delta-seconds)."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def retryable(error: ApiError) -> bool:
    """True when the same request may succeed later without changing it."""
    return isinstance(error, TooManyRequests | ServerError | Timeout | TransportError)
