"""The server's read endpoints: ``/healthz`` (and its checks), ``/pods``, ``/configz``,
``/metrics``.

``/healthz`` answers as the Kubernetes healthz handler does: ``ok`` when every check passes,
else 500 with one ``[+]name ok`` / ``[-]name failed: reason withheld`` line per check and
``healthz check failed``; ``/healthz/<name>`` runs one check (``ok``, else 500
``internal server error: <why>``). The checks: ``ping`` (always), ``log`` (always: records are
written synchronously) and ``syncloop``: the pod sync loop must have run an iteration within
``max(2 * syncFrequency, 5m)``, as the kubelet's ``syncLoopHealthCheck``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
import prometheus_client
from aiohttp import web

SYNC_LOOP_MIN_THRESHOLD: Final = 300.0

HealthCheck = Callable[[], str | None]
"""None when healthy, else why not."""


@dataclass(frozen=True)
class Dependencies:
    """What the read endpoints read: injected by the composition root."""

    pods: Callable[[], list[dict[str, Any]]] = list
    configz: Mapping[str, Any] = field(default_factory=dict)
    checks: Mapping[str, HealthCheck] = field(default_factory=dict)
    registry: prometheus_client.CollectorRegistry = prometheus_client.REGISTRY


DEPS: Final = web.AppKey("nodeagent.server.deps", Dependencies)

routes = web.RouteTableDef()
healthz_routes = web.RouteTableDef()


def install(app: web.Application, deps: Dependencies) -> None:
    app[DEPS] = deps


def sync_loop_check(
    heartbeat: Callable[[], float | None],
    now: Callable[[], float],
    *,
    sync_frequency: float,
    started: Callable[[], float],
) -> HealthCheck:
    """The kubelet's syncloop check: the last iteration (or the start, before the first)
    must be within ``max(2 * syncFrequency, 5m)``."""
    threshold = max(2 * sync_frequency, SYNC_LOOP_MIN_THRESHOLD)

    def check() -> str | None:
        last = heartbeat()
        since = now() - (last if last is not None else started())
        if since > threshold:
            return "sync Loop took longer than expected"
        return None

    return check


def _checks(deps: Dependencies) -> dict[str, HealthCheck]:
    return {"ping": lambda: None, "log": lambda: None, **deps.checks}


def _plain(status: int, text: str) -> web.Response:
    return web.Response(
        status=status,
        text=text,
        content_type="text/plain",
        charset="utf-8",
        headers={"X-Content-Type-Options": "nosniff"},
    )


async def healthz(request: web.Request) -> web.Response:
    checks = _checks(request.app[DEPS])
    verbose = "verbose" in request.query
    lines: list[str] = []
    failed = False
    for name, check in checks.items():
        why = check()
        if why is None:
            lines.append(f"[+]{name} ok")
        else:
            failed = True
            lines.append(f"[-]{name} failed: reason withheld")
    if failed:
        return _plain(500, "\n".join(lines) + "\nhealthz check failed\n")
    if verbose:
        return _plain(200, "\n".join(lines) + "\nhealthz check passed\n")
    return _plain(200, "ok")


async def healthz_check(request: web.Request) -> web.Response:
    checks = _checks(request.app[DEPS])
    check = checks.get(request.match_info["check"])
    if check is None:
        raise web.HTTPNotFound()
    why = check()
    if why is not None:
        return _plain(500, f"internal server error: {why}\n")
    return _plain(200, "ok")


for table in (routes, healthz_routes):
    table.get("/healthz")(healthz)
    table.get("/healthz/{check}")(healthz_check)


def _json(obj: object) -> web.Response:
    return web.Response(body=msgspec.json.encode(obj), content_type="application/json")


@routes.get("/pods")
async def pods(request: web.Request) -> web.Response:
    items = request.app[DEPS].pods()
    return _json({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})


@routes.get("/configz")
async def configz(request: web.Request) -> web.Response:
    return _json({"kubeletconfig": request.app[DEPS].configz})


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    registry = request.app[DEPS].registry
    body = prometheus_client.generate_latest(registry)
    return web.Response(body=body, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST})
