"""``/exec``, ``/attach``, ``/portForward`` and ``/run``: find the container (or the pod's
sandbox), ask the runtime for a streaming URL over CRI, then hand the client's upgraded
connection to the upgrade-aware proxy (:mod:`nodeagent.server.upgradeaware`), as the kubelet's
``server.go`` routes do before its ``upgradeaware`` proxy takes over.

Query parameters, as the kubelet reads them: ``command`` (repeated), ``input``/``stdin``,
``output``/``stdout``, ``error``/``stderr``, ``tty`` (``1`` or ``true``); ``port`` (repeated)
for port forwarding. At least one of stdin, stdout and stderr must be asked for; a TTY merges
stderr into stdout.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from aiohttp import web

from nodeagent.kuberuntime import CriError
from nodeagent.kuberuntime.labels import CONTAINER_NAME, POD_UID
from nodeagent.kuberuntime.types import (
    CONTAINER_RUNNING,
    SANDBOX_READY,
    Container,
    ContainerFilter,
    ExecSyncResponse,
    PodSandbox,
    PodSandboxFilter,
)
from nodeagent.server.upgradeaware import StreamOptions, error_response, proxy_upgrade


class StreamingRuntime(Protocol):
    async def exec(
        self,
        container_id: str,
        cmd: Sequence[str],
        *,
        tty: bool,
        stdin: bool,
        stdout: bool,
        stderr: bool,
    ) -> str: ...

    async def attach(
        self, container_id: str, *, tty: bool, stdin: bool, stdout: bool, stderr: bool
    ) -> str: ...

    async def port_forward(self, pod_sandbox_id: str, ports: Sequence[int]) -> str: ...

    async def exec_sync(
        self, container_id: str, cmd: Sequence[str], timeout_seconds: int
    ) -> ExecSyncResponse: ...

    async def list_containers(self, filter: ContainerFilter | None = None) -> list[Container]: ...

    async def list_pod_sandbox(
        self, filter: PodSandboxFilter | None = None
    ) -> list[PodSandbox]: ...


@dataclass(frozen=True)
class StreamingDeps:
    runtime: StreamingRuntime
    find_pod: Callable[[str, str], dict[str, Any] | None]
    """(namespace, name) -> the pod as the agent sees it, or None."""
    websockets: bool = True
    """``ExtendWebSocketsToKubelet``: translate ``v5`` and tunneling WebSockets (else splice
    every request to the runtime as it comes)."""


STREAMING: Final = web.AppKey("nodeagent.server.streaming", StreamingDeps)


class BadOptions(ValueError):
    pass


def _flag(query: Mapping[str, str], *names: str) -> bool:
    return any(query.get(n, "") in ("1", "true", "True") for n in names)


def stream_options(query: Mapping[str, str]) -> StreamOptions:
    """The kubelet's remotecommand options from a request's query (pure)."""
    stdin = _flag(query, "input", "stdin")
    stdout = _flag(query, "output", "stdout")
    stderr = _flag(query, "error", "stderr")
    tty = _flag(query, "tty")
    if not (stdin or stdout or stderr):
        raise BadOptions("you must specify at least 1 of stdin, stdout, stderr")
    if tty and stderr:
        stderr = False  # a TTY has one output stream, as the kubelet does
    return StreamOptions(stdin=stdin, stdout=stdout, stderr=stderr, tty=tty)


def forward_ports(values: Sequence[str]) -> list[int]:
    ports: list[int] = []
    for raw in values:
        for part in raw.split(","):
            if not part:
                continue
            try:
                port = int(part)
            except ValueError:
                raise BadOptions(f"invalid port {part!r}") from None
            if not 0 < port < 65536:
                raise BadOptions(f"port {port} must be > 0 and < 65536")
            ports.append(port)
    return ports


@dataclass(frozen=True, slots=True)
class _Target:
    """The pod a request names, as the agent sees it, and the runtime to ask."""

    pod: dict[str, Any]
    uid: str
    runtime: StreamingRuntime


def _target(request: web.Request) -> _Target | None:
    """The pod of the request's ``{ns}/{pod}`` (and ``{uid}`` when given), None if the agent
    has no such pod."""
    deps = request.app[STREAMING]
    ns, name = request.match_info["ns"], request.match_info["pod"]
    pod: dict[str, Any] | None = deps.find_pod(ns, name)
    if pod is None:
        return None
    uid = str((pod.get("metadata") or {}).get("uid", ""))
    wanted = request.match_info.get("uid")
    if wanted and uid != wanted:
        return None
    return _Target(pod=pod, uid=uid, runtime=deps.runtime)


def _no_pod() -> web.Response:
    return error_response(404, "pod does not exist")


def _no_container(container: str) -> web.Response:
    return error_response(500, f"container not found ({container!r})".replace("'", '"'))


def _status_container_id(pod: Mapping[str, Any], container: str) -> str | None:
    """The running container's ID as the pod's status (the agent's newest) says, without its
    ``<runtime>://`` prefix; None if the status does not say it runs."""
    status = pod.get("status") or {}
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for cs in status.get(key) or ():
            if cs.get("name") == container and "running" in (cs.get("state") or {}):
                cid = str(cs.get("containerID") or "").partition("://")[2]
                return cid or None
    return None


async def _container_id(runtime: StreamingRuntime, pod_uid: str, container: str) -> str | None:
    found = await runtime.list_containers(
        ContainerFilter(label_selector={POD_UID: pod_uid, CONTAINER_NAME: container})
    )
    running = [c for c in found if c.state == CONTAINER_RUNNING]
    if not running:
        return None
    return max(running, key=lambda c: c.created_at).id


async def _exec_or_attach(request: web.Request, *, attach: bool) -> web.StreamResponse:
    try:
        opts = stream_options(request.query)
    except BadOptions as e:
        return error_response(400, str(e))
    target = _target(request)
    if target is None:
        return _no_pod()
    runtime = target.runtime
    container = request.match_info["container"]

    async def stream_url(cid: str) -> str:
        if attach:
            return await runtime.attach(
                cid, tty=opts.tty, stdin=opts.stdin, stdout=opts.stdout, stderr=opts.stderr
            )
        return await runtime.exec(
            cid,
            request.query.getall("command", []),
            tty=opts.tty,
            stdin=opts.stdin,
            stdout=opts.stdout,
            stderr=opts.stderr,
        )

    # The pod's status names the running container: one CRI call instead of two. It may be
    # a moment old (the container just restarted): the runtime refuses a container that is
    # not running, and then the runtime's own list decides, as it always does for the kubelet.
    hinted = _status_container_id(target.pod, container)
    url = None
    try:
        if hinted is not None:
            with contextlib.suppress(CriError):
                url = await stream_url(hinted)
        if url is None:
            cid = await _container_id(runtime, target.uid, container)
            if cid is None:
                return _no_container(container)
            url = await stream_url(cid)
    except CriError as e:
        return error_response(500, str(e))
    return await proxy_upgrade(request, url, opts, websockets=request.app[STREAMING].websockets)


async def exec_handler(request: web.Request) -> web.StreamResponse:
    return await _exec_or_attach(request, attach=False)


async def attach_handler(request: web.Request) -> web.StreamResponse:
    return await _exec_or_attach(request, attach=True)


async def port_forward_handler(request: web.Request) -> web.StreamResponse:
    try:
        ports = forward_ports(request.query.getall("port", []))
    except BadOptions as e:
        return error_response(400, str(e))
    target = _target(request)
    if target is None:
        return _no_pod()
    uid = target.uid
    try:
        sandboxes = await target.runtime.list_pod_sandbox(
            PodSandboxFilter(label_selector={POD_UID: uid})
        )
        ready = [s for s in sandboxes if s.state == SANDBOX_READY]
        if not ready:
            return error_response(500, f"pod not found ({uid!r})".replace("'", '"'))
        sandbox = max(ready, key=lambda s: s.created_at)
        url = await target.runtime.port_forward(sandbox.id, ports)
    except CriError as e:
        return error_response(500, str(e))
    return await proxy_upgrade(request, url, websockets=request.app[STREAMING].websockets)


async def run_handler(request: web.Request) -> web.StreamResponse:
    """``POST /run/...?cmd=<command>``: run the command (split on spaces, as the kubelet
    does for this legacy endpoint) and answer its stdout then stderr; a non-zero exit is a
    500 naming the command and the code."""
    target = _target(request)
    if target is None:
        return _no_pod()
    container = request.match_info["container"]
    cmd = request.query.get("cmd", "").split(" ")
    try:
        cid = await _container_id(target.runtime, target.uid, container)
        if cid is None:
            return _no_container(container)
        result = await target.runtime.exec_sync(cid, cmd, 0)
    except CriError as e:
        return error_response(500, str(e))
    output = bytes(result.stdout) + bytes(result.stderr)
    if result.exit_code != 0:
        printed = output.decode(errors="replace")
        return error_response(
            500, f"command '{' '.join(cmd)}' exited with {result.exit_code}: {printed}"
        )
    return web.Response(body=output, content_type="application/json")


routes = web.RouteTableDef()
for _method in ("GET", "POST"):
    routes.route(_method, "/exec/{ns}/{pod}/{container}")(exec_handler)
    routes.route(_method, "/exec/{ns}/{pod}/{uid}/{container}")(exec_handler)
    routes.route(_method, "/attach/{ns}/{pod}/{container}")(attach_handler)
    routes.route(_method, "/attach/{ns}/{pod}/{uid}/{container}")(attach_handler)
    routes.route(_method, "/portForward/{ns}/{pod}")(port_forward_handler)
    routes.route(_method, "/portForward/{ns}/{pod}/{uid}")(port_forward_handler)
routes.post("/run/{ns}/{pod}/{container}")(run_handler)
routes.post("/run/{ns}/{pod}/{uid}/{container}")(run_handler)
