"""The proxy's metrics as plain objects (Prometheus exposition comes later).

Names follow kube-proxy's (``kubeproxy_`` subsystem) so existing dashboards read them; the
nftables object counts, which kube-proxy does not export, are ``nodeagent_proxy_*``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field


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


def exponential(start: float, factor: float, count: int) -> tuple[float, ...]:
    return tuple(start * factor**i for i in range(count))


SYNC_BUCKETS = exponential(0.001, 2, 15)
PROGRAMMING_BUCKETS = (
    0.25, 0.5, *range(1, 60), *range(60, 300, 5), *range(300, 610, 10)
)  # fmt: skip


class ProxyMetrics:
    def __init__(self) -> None:
        def sync(name: str, what: str) -> Histogram:
            return Histogram(name, f"{what} latency in seconds", SYNC_BUCKETS)

        self.sync_duration = sync("kubeproxy_sync_proxy_rules_duration_seconds", "Sync")
        self.full_sync_duration = sync(
            "kubeproxy_sync_full_proxy_rules_duration_seconds", "Full sync"
        )
        self.partial_sync_duration = sync(
            "kubeproxy_sync_partial_proxy_rules_duration_seconds", "Partial sync"
        )
        self.last_sync = Gauge(
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
            "The last time rules were successfully synced (Unix time)",
        )
        self.sync_failures = Counter(
            "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
            "Sync transactions nft refused",
        )
        self.network_programming = Histogram(
            "kubeproxy_network_programming_duration_seconds",
            "From an EndpointSlice change to its rules being applied",
            tuple(float(b) for b in PROGRAMMING_BUCKETS),
        )
        self.conntrack_deleted = Counter(
            "kubeproxy_conntrack_reconciler_deleted_entries_total", "Stale UDP flows deleted"
        )
        self.chains = Gauge("nodeagent_proxy_nftables_chains", "Chains in our tables")
        self.rules = Gauge("nodeagent_proxy_nftables_rules", "Rules in our tables")
        self.elements = Gauge("nodeagent_proxy_nftables_elements", "Set and map elements")

    def all(self) -> list[Counter | Gauge | Histogram]:
        return [v for v in vars(self).values() if isinstance(v, Counter | Gauge | Histogram)]
