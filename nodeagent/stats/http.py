"""``GET /stats/summary`` and ``GET /metrics/resource`` for the kubelet API server.

Register ``routes`` and set ``app[STATS]`` to a :class:`StatsProvider`. A runtime error gives
``/stats/summary`` a 500 with its message (as the kubelet) and ``/metrics/resource`` only
``resource_scrape_error 1``.
"""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web

from nodeagent.kuberuntime import CriError
from nodeagent.stats import resource
from nodeagent.stats.summary import StatsProvider

STATS = web.AppKey("stats", StatsProvider)

routes = web.RouteTableDef()


def _only_cpu_and_memory(summary: dict[str, Any]) -> dict[str, Any]:
    def keep(obj: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
        return {k: v for k, v in obj.items() if k in keys}

    node = keep(summary["node"], ("nodeName", "startTime", "cpu", "memory"))
    pods = [
        {
            **keep(p, ("podRef", "startTime", "cpu", "memory")),
            "containers": [
                keep(c, ("name", "startTime", "cpu", "memory")) for c in p["containers"]
            ],
        }
        for p in summary["pods"]
    ]
    return {"node": node, "pods": pods}


@routes.get("/stats/summary")
async def stats_summary(request: web.Request) -> web.Response:
    try:
        summary = await request.app[STATS].summary()
    except CriError as e:
        return web.Response(status=500, text=f"Internal Error: {e}\n", content_type="text/plain")
    if request.query.get("only_cpu_and_memory", "").lower() == "true":
        summary = _only_cpu_and_memory(summary)
    return web.Response(body=msgspec.json.encode(summary), content_type="application/json")


@routes.get("/metrics/resource")
async def metrics_resource(request: web.Request) -> web.Response:
    provider = request.app[STATS]
    try:
        summary: dict[str, Any] | None = await provider.summary()
    except CriError:
        summary = None
    now_ms = int(provider.clock.now().timestamp() * 1000)
    text = resource.render(summary, timestamp_ms=now_ms)
    return web.Response(text=text, content_type="text/plain", charset="utf-8")


@routes.get("/metrics/cadvisor")
async def metrics_cadvisor(request: web.Request) -> web.Response:
    try:
        text = await request.app[STATS].cadvisor()
    except CriError as e:
        return web.Response(status=500, text=f"Internal Error: {e}\n", content_type="text/plain")
    return web.Response(text=text, content_type="text/plain", charset="utf-8")
