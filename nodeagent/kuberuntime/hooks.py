"""Container lifecycle hooks (``postStart``, ``preStop``), as the kubelet's handler runner runs
them.

- ``exec``: the command through CRI ``ExecSync`` without a timeout; a non-zero exit code fails;
- ``httpGet``: one GET to ``host`` (the pod's first IP when empty) and the port (a number or a
  named container port); only a transport error fails (the kubelet ignores the status code),
  HTTPS is not verified, and an HTTPS hook answered in plain HTTP is retried over HTTP (without
  ``Authorization``) with a ``LifecycleHTTPFallback`` warning;
- ``sleep``: waits ``seconds`` (the caller bounds it by the grace period);
- ``tcpSocket``: not a lifecycle handler (kept in the API for compatibility): always fails.

A failed hook yields the kubelet's message (``Exec lifecycle hook ([cmd]) for Container "c" in
Pod "p_ns(uid)" failed - error: ..., message: "..."``); it goes to the log and the container's
waiting message, never into an Event (the kubelet's events say ``PostStartHook failed`` /
``PreStopHook failed`` so a secret in the output does not leak). The message and grace
arithmetic are pure functions; :class:`HookRunner` is the effectful edge.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final

from nodeagent.gotext import join_list, quote
from nodeagent.kuberuntime.errors import CriError
from nodeagent.kuberuntime.metrics import LIFECYCLE_HTTP_FALLBACKS
from nodeagent.kuberuntime.service import RuntimeService
from nodeagent.podspec import Container, HTTPGetAction, LifecycleHandler, Pod, format_pod

MIN_GRACE_PERIOD: Final = 2  # minimumGracePeriodInSeconds
FAILED_POST_START_HOOK: Final = "FailedPostStartHook"
FAILED_PRE_STOP_HOOK: Final = "FailedPreStopHook"
POST_START_EVENT_MESSAGE: Final = "PostStartHook failed"
PRE_STOP_EVENT_MESSAGE: Final = "PreStopHook failed"
POST_START_HOOK_ERROR: Final = "PostStartHookError"
"""The waiting reason of a container whose postStart hook failed (``ErrPostStartHook``)."""
USER_AGENT: Final = "kube-lifecycle/1.35"
LIFECYCLE_HTTP_FALLBACK: Final = "LifecycleHTTPFallback"
HTTP_CONNECT_TIMEOUT: Final = 10.0


def exec_failure_message(
    pod: Pod, container: Container, command: Sequence[str], error: str, output: str | bytes
) -> str:
    """``output`` is quoted as Go quotes ``string(output)``: invalid UTF-8 byte by byte."""
    return (
        f"Exec lifecycle hook ({join_list(command)}) for Container {quote(container.name)} "
        f"in Pod {quote(format_pod(pod))} failed - error: {error}, message: "
        f"{quote(output)}"
    )


def http_failure_message(pod: Pod, container: Container, path: str, error: str) -> str:
    return (
        f"HTTP lifecycle hook ({path}) for Container {quote(container.name)} in Pod "
        f"{quote(format_pod(pod))} failed - error: {error}"
    )


def sleep_failure_message(pod: Pod, container: Container, seconds: int, error: str) -> str:
    return (
        f"Sleep lifecycle hook ({seconds}) for Container {quote(container.name)} in Pod "
        f"{quote(format_pod(pod))} failed - error: {error}"
    )


def exec_error(command: Sequence[str], exit_code: int, stderr: str) -> str:
    """The CRI client's error for a command that exited non-zero (``CodeExitError``)."""
    return f"command '{' '.join(command)}' exited with {exit_code}: {stderr}"


def grace_after_pre_stop(grace: int, hook_seconds: float) -> int:
    """What is left for StopContainer after a preStop hook took ``hook_seconds`` (truncated to
    whole seconds, as the kubelet's ``int64(time.Since(start).Seconds())``)."""
    return grace - int(hook_seconds)


def stop_grace(grace: int, *, override: int | None = None) -> int:
    """The StopContainer timeout: at least the kubelet's minimum, unless overridden."""
    if override is not None:
        return override
    return max(grace, MIN_GRACE_PERIOD)


class HookError(Exception):
    """A hook that cannot be set up (bad port, no pod IP): the message is the error part."""


def resolve_port(port: int | str, container: Container) -> int:
    """A port number, a numeric string, or the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    if port == "":
        return 80
    if port.isdigit():
        return int(port)
    for spec in container.ports:
        if spec.name == port:
            return spec.container_port
    raise HookError(f"couldn't find port: {port} in {container.name}")


def join_host_port(host: str, port: int) -> str:
    try:
        if isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address):
            return f"[{host}]:{port}"
    except ValueError:
        pass
    return f"{host}:{port}"


@dataclass(frozen=True, slots=True)
class HttpTarget:
    scheme: str
    host: str
    port: int
    path: str
    headers: tuple[tuple[str, str], ...]

    @property
    def url(self) -> str:
        path = self.path if self.path.startswith("/") else "/" + self.path
        return f"{self.scheme}://{join_host_port(self.host, self.port)}{path}"


def http_target(action: HTTPGetAction, container: Container, pod_ip: str) -> HttpTarget:
    """The request of an httpGet hook (``NewRequestForHTTPGetAction``): an empty host is the
    pod's IP, the scheme lower-cased, the path with a leading slash."""
    host = action.host or pod_ip
    if not host:
        raise HookError("failed to find networking container: the pod has no IP")
    headers = tuple((h.name, h.value) for h in action.http_headers)
    return HttpTarget(
        scheme=(action.scheme or "HTTP").lower(),
        host=host,
        port=resolve_port(action.port, container),
        path=action.path,
        headers=headers,
    )


def http_fallback_message(target: HttpTarget) -> str:
    return (
        f"request to HTTPS lifecycle hook {join_host_port(target.host, target.port)} got HTTP "
        "response, retry with HTTP succeeded"
    )


def as_plain_http(target: HttpTarget) -> HttpTarget:
    headers = tuple((n, v) for n, v in target.headers if n.lower() != "authorization")
    return HttpTarget("http", target.host, target.port, target.path, headers)


def http_request_bytes(target: HttpTarget) -> bytes:
    path = target.path if target.path.startswith("/") else "/" + target.path
    names = {name.lower() for name, _ in target.headers}
    lines = [f"GET {path} HTTP/1.1"]
    if "host" not in names:
        lines.append(f"Host: {join_host_port(target.host, target.port)}")
    if "user-agent" not in names:
        lines.append(f"User-Agent: {USER_AGENT}")
    if "accept" not in names:
        lines.append("Accept: */*")
    lines += [f"{name}: {value}" for name, value in target.headers]
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")


HttpGet = Callable[[HttpTarget], Awaitable[None]]
"""Sends the request; raises ``OSError`` (or ``HookError``) when it cannot."""


async def http_get(target: HttpTarget) -> None:
    """One GET over a fresh connection; a response status line is success, whatever the code."""
    context: ssl.SSLContext | None = None
    if target.scheme == "https":
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(target.host, target.port, ssl=context),
        HTTP_CONNECT_TIMEOUT,
    )
    try:
        writer.write(http_request_bytes(target))
        await writer.drain()
        status = await reader.readline()
        if not status.startswith(b"HTTP/"):
            raise HookError("malformed HTTP response")
        await reader.read(10 * 1024)  # the kubelet discards up to 10 KiB of the body
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def go_dial_error(target: HttpTarget, error: BaseException) -> str:
    """``Get "<url>": dial tcp <host:port>: connect: connection refused`` and the like."""
    hostport = join_host_port(target.host, target.port)
    if isinstance(error, ConnectionRefusedError):
        detail = f"dial tcp {hostport}: connect: connection refused"
    elif isinstance(error, TimeoutError):
        detail = f"dial tcp {hostport}: i/o timeout"
    elif isinstance(error, OSError):
        detail = f"dial tcp {hostport}: {error.strerror or error}"
    else:
        detail = str(error)
    return f'Get "{target.url}": {detail}'


class HookRunner:
    """Runs one lifecycle handler; returns None on success, else the kubelet's message."""

    def __init__(
        self,
        *,
        runtime: RuntimeService,
        http: HttpGet = http_get,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._runtime = runtime
        self._http = http
        self._sleep = sleep

    async def run(
        self,
        pod: Pod,
        container: Container,
        container_id: str,
        handler: LifecycleHandler,
        *,
        pod_ips: Sequence[str] = (),
        on_fallback: Callable[[str], None] | None = None,
    ) -> str | None:
        """``on_fallback`` gets the warning's message when an HTTPS hook succeeded over HTTP."""
        if handler.exec is not None:
            return await self._exec(pod, container, container_id, handler.exec.command)
        if handler.http_get is not None:
            return await self._http_get(pod, container, handler.http_get, pod_ips, on_fallback)
        if handler.sleep is not None:
            await self._sleep(handler.sleep.seconds)
            return None
        what = "tcpSocket" if handler.tcp_socket is not None else "no action"
        return f"Cannot run handler: invalid handler: {what} is not a lifecycle handler"

    async def _exec(
        self, pod: Pod, container: Container, container_id: str, command: Sequence[str]
    ) -> str | None:
        try:
            response = await self._runtime.exec_sync(container_id, command, 0)
        except CriError as e:
            return exec_failure_message(pod, container, command, e.status_text, "")
        if response.exit_code == 0:
            return None
        stderr = response.stderr.decode(errors="replace")
        error = exec_error(command, response.exit_code, stderr)
        output = response.stdout + response.stderr
        return exec_failure_message(pod, container, command, error, output)

    async def _http_get(
        self,
        pod: Pod,
        container: Container,
        action: HTTPGetAction,
        pod_ips: Sequence[str],
        on_fallback: Callable[[str], None] | None,
    ) -> str | None:
        try:
            target = http_target(action, container, pod_ips[0] if pod_ips else "")
        except HookError as e:
            return http_failure_message(pod, container, action.path, str(e))
        try:
            await self._http(target)
        except ssl.SSLError as e:
            if target.scheme != "https":
                return http_failure_message(pod, container, action.path, go_dial_error(target, e))
            try:
                await self._http(as_plain_http(target))
            except (OSError, TimeoutError, HookError, ValueError):
                return http_failure_message(pod, container, action.path, go_dial_error(target, e))
            LIFECYCLE_HTTP_FALLBACKS.inc()
            if on_fallback is not None:
                on_fallback(http_fallback_message(target))
        except (OSError, TimeoutError, HookError, ValueError) as e:
            # ValueError: a host getaddrinfo cannot even encode (a UnicodeError)
            return http_failure_message(pod, container, action.path, go_dial_error(target, e))
        return None
