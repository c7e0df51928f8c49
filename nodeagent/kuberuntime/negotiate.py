"""Version negotiation: the runtime must serve CRI runtime.v1 before the node can be Ready."""

from __future__ import annotations

from typing import Final

from nodeagent.kuberuntime.endpoint import DEFAULT_ENDPOINT, RUNTIME_REQUEST_TIMEOUT
from nodeagent.kuberuntime.errors import CriError, CriUnimplemented, CriVersionError
from nodeagent.kuberuntime.remote import CriClient
from nodeagent.kuberuntime.service import RuntimeService
from nodeagent.kuberuntime.types import VersionResponse

REQUIRED_VERSION_FIELDS: Final = (
    "version",
    "runtime_name",
    "runtime_version",
    "runtime_api_version",
)
_NOT_V1_HINT: Final = (
    "the runtime does not serve CRI runtime.v1"
    ' (containerd: make sure the "cri" plugin is not listed in disabled_plugins)'
)


async def validate_v1(runtime: RuntimeService, *, endpoint: str) -> VersionResponse:
    """Call Version("v1") and check the answer, as the kubelet does before anything else.

    Raises CriVersionError when runtime.v1 is not served or the answer lacks a field; other
    failures (runtime unreachable, deadline) keep their own type with the same message prefix.
    """
    prefix = f'validate CRI v1 runtime API for endpoint "{endpoint}"'
    try:
        response = await runtime.version("v1")
    except CriUnimplemented as exc:
        raise CriVersionError(
            f"{prefix}: {exc.status_text}: {_NOT_V1_HINT}",
            rpc="Version",
            endpoint=endpoint,
            code=exc.code,
            details=exc.details,
        ) from exc
    except CriError as exc:
        raise type(exc)(
            f"{prefix}: {exc.status_text}",
            rpc="Version",
            endpoint=endpoint,
            code=exc.code,
            details=exc.details,
        ) from exc
    missing = [name for name in REQUIRED_VERSION_FIELDS if not getattr(response, name)]
    if missing:
        details = f"Version response lacks {', '.join(missing)}"
        raise CriVersionError(
            f"{prefix}: {details}", rpc="Version", endpoint=endpoint, code="OK", details=details
        )
    return response


async def connect(
    endpoint: str = DEFAULT_ENDPOINT,
    *,
    runtime_request_timeout: float = RUNTIME_REQUEST_TIMEOUT,
) -> CriClient:
    """Open a CRI client on ``endpoint`` (``unix:///path`` or a bare path) and validate v1.

    The caller owns the client: ``async with await connect(...) as cri:`` or ``await
    cri.close()``. Raises CriVersionError, CriUnavailable, CriDeadlineExceeded, ...
    """
    client = CriClient.open(endpoint, runtime_request_timeout=runtime_request_timeout)
    try:
        client.version_info = await validate_v1(client, endpoint=client.endpoint)
    except BaseException:
        await client.close()
        raise
    return client
