"""kube-proxy's metrics server, where a Prometheus user scrapes kube-proxy: ``/metrics`` (the
``kubeproxy_*`` metrics), ``/healthz`` (``ok``) and ``/proxyMode`` (``nftables``) on
``proxy.metricsBindAddress`` (kube-proxy's default ``127.0.0.1:10249``; set ``0.0.0.0:10249``
to scrape it from elsewhere, as with kube-proxy).

Why not the kubelet's ``/metrics`` on :10250: scrape configs, ServiceMonitors and dashboards
look for ``kubeproxy_*`` on the kube-proxy port, without the kubelet's TLS and authorization;
nodeagent replacing both daemons keeps both ports, so neither kind of scrape changes.

The metrics kube-proxy labels by ``ip_family`` carry one series per family this node proxies
(``IPv4``, ``IPv6``): one sync programs every family, so each family shows the same sync. The
conntrack reconciler's are each family's own, from its first cleanup pass on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

import prometheus_client
from aiohttp import web
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from nodeagent.log import Logger, get_logger
from nodeagent.proxy.healthserver import serve_forever
from nodeagent.proxy.metrics import ByFamily, Counter, Gauge, Histogram, ProxyMetrics
from nodeagent.proxy.model import IP_FAMILY_NAMES


class ProxyCollector(Collector):
    """The :class:`ProxyMetrics` of the running proxy (None before it starts: nothing)."""

    def __init__(self, metrics: Callable[[], ProxyMetrics | None], families: Sequence[str]):
        self._metrics = metrics
        self._families = [IP_FAMILY_NAMES.get(f, f) for f in families]

    def collect(self) -> Iterator[Metric]:
        m = self._metrics()
        if m is None:
            return
        per_family = {
            id(x)
            for x in (
                m.sync_duration, m.full_sync_duration, m.partial_sync_duration, m.last_sync,
            m.last_queued, m.sync_failures, m.cleanup_failures, m.network_programming,
            )
        }  # fmt: skip
        for metric in m.all():
            yield _family(metric, self._families if id(metric) in per_family else None)
        for vector in m.by_family():
            yield _by_family(vector)
        no_local = GaugeMetricFamily(
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
            "Number of services with a Local traffic policy and no endpoints",
            labels=["ip_family", "traffic_policy"],
        )
        for family in self._families:
            for policy, count in m.no_local_endpoints.items():
                no_local.add_metric([family, policy], count)
        yield no_local
        for path, counts in (("healthz", m.healthz), ("livez", m.livez)):
            total = CounterMetricFamily(
                f"kubeproxy_proxy_{path}", f"Cumulative proxy {path} HTTP status", labels=["code"]
            )
            for code, count in sorted(counts.items()):
                total.add_metric([code], count)
            yield total


def _buckets(metric: Histogram) -> list[tuple[str, float]]:
    cumulative, buckets = 0, []
    for bound, count in zip((*metric.buckets, float("inf")), metric.counts, strict=True):
        cumulative += count
        le = prometheus_client.utils.floatToGoString(bound)  # type: ignore[no-untyped-call]
        buckets.append((le, float(cumulative)))
    return buckets


def _by_family(vector: ByFamily[Counter] | ByFamily[Histogram]) -> Metric:
    """A metric labelled ``ip_family``, one series per family that has one."""
    series = sorted((IP_FAMILY_NAMES.get(f, f), m) for f, m in vector.series.items())
    if vector.histogram:
        h = HistogramMetricFamily(vector.name, vector.help, labels=["ip_family"])
        for family, metric in series:
            assert isinstance(metric, Histogram)
            h.add_metric([family], _buckets(metric), metric.sum)
        return h
    c = CounterMetricFamily(vector.name.removesuffix("_total"), vector.help, labels=["ip_family"])
    for family, metric in series:
        assert isinstance(metric, Counter)
        c.add_metric([family], metric.value)
    return c


def _family(metric: Counter | Gauge | Histogram, families: Iterable[str] | None) -> Metric:
    labels = ["ip_family"] if families is not None else []
    values = [[f] for f in families] if families is not None else [[]]
    if isinstance(metric, Histogram):
        h = HistogramMetricFamily(metric.name, metric.help, labels=labels)
        buckets = _buckets(metric)
        for v in values:
            h.add_metric(v, buckets, metric.sum)
        return h
    if isinstance(metric, Counter):
        c = CounterMetricFamily(metric.name.removesuffix("_total"), metric.help, labels=labels)
        for v in values:
            c.add_metric(v, metric.value)
        return c
    g = GaugeMetricFamily(metric.name, metric.help, labels=labels)
    for v in values:
        g.add_metric(v, metric.value)
    return g


async def serve_proxy_metrics(
    address: str, registry: prometheus_client.CollectorRegistry, *, log: Logger | None = None
) -> None:
    """Serve ``/metrics``, ``/healthz`` and ``/proxyMode`` on ``address`` until cancelled; a
    port that cannot be bound is retried every 5 s (kube-proxy's metrics server does so)."""
    log = log or get_logger("proxy")

    async def metrics(_request: web.Request) -> web.Response:
        body = prometheus_client.generate_latest(registry)
        return web.Response(
            body=body, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST}
        )

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def proxy_mode(_request: web.Request) -> web.Response:
        return web.Response(text="nftables")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/proxyMode", proxy_mode)
    await serve_forever(
        app,
        address,
        log=log,
        failed="Failed to start metrics server",
        serving="Serving proxy metrics",
    )
