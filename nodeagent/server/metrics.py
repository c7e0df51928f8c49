"""The kubelet's HTTP server metrics, in the default prometheus registry (served on
``/metrics``): ``kubelet_http_requests_total``, ``kubelet_http_requests_duration_seconds`` and
``kubelet_http_inflight_requests``, labelled by method, the path's first segment (the
kubelet's bucket: ``exec``, ``pods``, ``stats``, ...), ``server_type`` (``readwrite``: the
authenticated port) and ``long_running`` (streams and followed logs)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final

import prometheus_client
from aiohttp import web

LABELS: Final = ("method", "path", "server_type", "long_running")
# The kubelet's known buckets; anything else counts as "other" (bounded label values).
BUCKETS: Final = frozenset(
    {
        "attach", "checkpoint", "configz", "containerLogs", "debug", "exec", "healthz", "logs",
        "metrics", "pods", "portForward", "run", "runningpods", "spec", "stats",
    }
)  # fmt: skip
_STREAMS: Final = frozenset({"attach", "exec", "portForward", "run"})

REQUESTS: Final = prometheus_client.Counter(
    "kubelet_http_requests_total", "Number of the http requests received since the server started",
    LABELS,
)  # fmt: skip
DURATION: Final = prometheus_client.Histogram(
    "kubelet_http_requests_duration_seconds", "Duration in seconds to serve http requests",
    LABELS,
)  # fmt: skip
INFLIGHT: Final = prometheus_client.Gauge(
    "kubelet_http_inflight_requests", "Number of the inflight http requests", LABELS
)


def bucket(path: str) -> str:
    first = path.lstrip("/").split("/", 1)[0]
    return first if first in BUCKETS else "other"


def long_running(path_bucket: str, query: dict[str, str]) -> bool:
    return path_bucket in _STREAMS or (
        path_bucket == "containerLogs" and query.get("follow") in ("1", "true")
    )


@web.middleware
async def metrics_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    b = bucket(request.path)
    labels = (
        request.method,
        b,
        "readwrite",
        "true" if long_running(b, dict(request.query)) else "false",
    )
    REQUESTS.labels(*labels).inc()
    inflight = INFLIGHT.labels(*labels)
    inflight.inc()
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        return await handler(request)
    finally:
        inflight.dec()
        DURATION.labels(*labels).observe(loop.time() - start)
