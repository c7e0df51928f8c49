"""The proxy's metrics as plain objects; :mod:`.metricsserver` exposes them to Prometheus.

Names, help texts and buckets follow kube-proxy's (``kubeproxy_`` subsystem) so existing
dashboards and alerts read them; the nftables object counts, which kube-proxy does not export,
are ``nodeagent_proxy_*``. Change counters count the Service and EndpointSlice changes the
proxy saw between two syncs (several updates of one object between two syncs count once).
The conntrack reconciler's metrics are kept per IP family (:class:`ByFamily`): each family's
cleanup pass deletes its own flows, and, as kube-proxy's vectors, a family shows no series
before its first pass.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar


@dataclass(slots=True)
class Counter:
    name: str
    help: str
    value: float = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


@dataclass(slots=True)
class Gauge:
    name: str
    help: str
    value: float = 0.0

    def set(self, value: float) -> None:
        self.value = value


@dataclass(slots=True)
class Histogram:
    name: str
    help: str
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)  # per bucket, not cumulative; +Inf last
    sum: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1


M = TypeVar("M", Counter, Histogram)


@dataclass(slots=True)
class ByFamily(Generic[M]):
    """One metric per IP family (``ip``, ``ip6``), each made at its first use."""

    name: str
    help: str
    make: Callable[[str, str], M]
    histogram: bool = False
    series: dict[str, M] = field(default_factory=dict)

    def __getitem__(self, family: str) -> M:
        metric = self.series.get(family)
        if metric is None:
            metric = self.series[family] = self.make(self.name, self.help)
        return metric


def exponential(start: float, factor: float, count: int) -> tuple[float, ...]:
    return tuple(start * factor**i for i in range(count))


SYNC_BUCKETS = exponential(0.001, 2, 15)
PROGRAMMING_BUCKETS = (
    0,
    0.25,
    0.5,
    *range(1, 60),
    *range(60, 120, 5),
    *range(120, 301, 30),
)  # fmt: skip  (kube-proxy's: 0, 0.25 s, 0.5 s, 1-59 s, 60-115 s by 5, 2-5 min by 30 s)


class ProxyMetrics:
    def __init__(self) -> None:
        def sync(name: str, what: str) -> Histogram:
            return Histogram(name, f"{what} latency in seconds", SYNC_BUCKETS)

        self.sync_duration = Histogram(
            "kubeproxy_sync_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds",
            SYNC_BUCKETS,
        )
        self.full_sync_duration = Histogram(
            "kubeproxy_sync_full_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds for full resyncs",
            SYNC_BUCKETS,
        )
        self.partial_sync_duration = Histogram(
            "kubeproxy_sync_partial_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds for partial resyncs",
            SYNC_BUCKETS,
        )
        self.last_sync = Gauge(
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
            "The last time proxy rules were successfully synced",
        )
        self.last_queued = Gauge(
            "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
            "The last time a sync of proxy rules was queued",
        )
        self.sync_failures = Counter(
            "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
            "Cumulative proxy nftables sync failures",
        )
        self.cleanup_failures = Counter(
            "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total",
            "Cumulative proxy nftables cleanup failures",
        )
        self.network_programming = Histogram(
            "kubeproxy_network_programming_duration_seconds",
            "In Cluster Network Programming Latency in seconds",
            tuple(float(b) for b in PROGRAMMING_BUCKETS),
        )
        self.conntrack_sync_duration: ByFamily[Histogram] = ByFamily(
            "kubeproxy_conntrack_reconciler_sync_duration_seconds",
            "ReconcileConntrackFlowsLatency latency in seconds",
            lambda name, help: Histogram(name, help, SYNC_BUCKETS),
            histogram=True,
        )
        """One cleanup pass of stale UDP flows, after a sync that changed a UDP service
        port's endpoints."""
        self.conntrack_deleted: ByFamily[Counter] = ByFamily(
            "kubeproxy_conntrack_reconciler_deleted_entries_total",
            "Cumulative conntrack flows deleted by conntrack reconciler",
            Counter,
        )
        self.endpoint_changes = Counter(
            "kubeproxy_sync_proxy_rules_endpoint_changes_total",
            "Cumulative proxy rules Endpoint changes",
        )
        self.service_changes = Counter(
            "kubeproxy_sync_proxy_rules_service_changes_total",
            "Cumulative proxy rules Service changes",
        )
        self.endpoint_changes_pending = Gauge(
            "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
            "Pending proxy rules Endpoint changes",
        )
        self.service_changes_pending = Gauge(
            "kubeproxy_sync_proxy_rules_service_changes_pending",
            "Pending proxy rules Service changes",
        )
        self.no_local_endpoints: dict[str, int] = {"internal": 0, "external": 0}
        """Services with a Local traffic policy and no local endpoint, by policy
        (``kubeproxy_sync_proxy_rules_no_local_endpoints_total{traffic_policy}``)."""
        self.chains = Gauge("nodeagent_proxy_nftables_chains", "Chains in our tables")
        self.rules = Gauge("nodeagent_proxy_nftables_rules", "Rules in our tables")
        self.elements = Gauge("nodeagent_proxy_nftables_elements", "Set and map elements")
        self.healthz: dict[str, int] = {}  # status code -> answers of /healthz
        self.livez: dict[str, int] = {}

    def count_health(self, path: str, code: int) -> None:
        """One answer of the health server (``kubeproxy_proxy_healthz_total{code}``, ...)."""
        counts = self.healthz if path == "healthz" else self.livez
        counts[str(code)] = counts.get(str(code), 0) + 1

    def all(self) -> list[Counter | Gauge | Histogram]:
        return [v for v in vars(self).values() if isinstance(v, Counter | Gauge | Histogram)]

    def by_family(self) -> list[ByFamily[Counter] | ByFamily[Histogram]]:
        return [self.conntrack_sync_duration, self.conntrack_deleted]
