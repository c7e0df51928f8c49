"""The exec and tcpSocket probes, each over injected I/O (the kubelet's ``pkg/probe/exec`` and
``pkg/probe/tcp``): no network or runtime is touched but through the callables given."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from nodeagent.gotext import duration_seconds, quote
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.errors import CriDeadlineExceeded, CriError
from nodeagent.prober.outcome import (
    ProbeOutcome,
    capped,
    dial_error,
    errored,
    failure,
    join_host_port,
    success,
)


class Execer(Protocol):
    async def exec_sync(
        self, container_id: str, cmd: Sequence[str], timeout_seconds: int
    ) -> cri.ExecSyncResponse: ...


async def exec_probe(
    runtime: Execer, container_id: str, command: Sequence[str], seconds: int
) -> ProbeOutcome:
    """CRI ``ExecSync`` with the probe's timeout (``seconds``): exit code 0 is success,
    anything else a failure with stdout+stderr (10 KiB at most) as the output; a timeout is a
    failure ``command timed out: "<cmd>" timed out after 1s`` (the CRI client's
    ``ErrCommandTimedOut``, which the kubelet's exec prober returns as the output); any other CRI
    error an error."""
    try:
        response = await runtime.exec_sync(container_id, command, seconds)
    except CriDeadlineExceeded:
        limit = duration_seconds(seconds)
        return failure(f"command timed out: {quote(' '.join(command))} timed out after {limit}")
    except CriError as e:
        return errored(e.status_text)
    output = capped(bytes(response.stdout) + bytes(response.stderr))
    return success(output) if response.exit_code == 0 else failure(output)


Connector = Callable[[str, int], Awaitable[tuple[Any, Any]]]


async def tcp_probe(connect: Connector, host: str, port: int, seconds: float) -> ProbeOutcome:
    """A TCP connect within ``seconds``, closed at once: success, or Go's dial error."""
    addr = join_host_port(host, port)
    try:
        async with asyncio.timeout(seconds):
            _reader, writer = await connect(host, port)
    except (OSError, TimeoutError) as e:
        return failure(dial_error(addr, e))
    writer.close()
    return success()
