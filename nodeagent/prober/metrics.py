"""``prober_probe_total`` and ``prober_probe_duration_seconds`` on the default Prometheus
registry, with the kubelet's names and labels."""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Histogram

PROBE_TOTAL: Final = Counter(
    "prober_probe_total",
    "Cumulative number of a liveness, readiness or startup probe for a container by result.",
    ["probe_type", "result", "container", "pod", "namespace", "pod_uid"],
)
PROBE_DURATION: Final = Histogram(
    "prober_probe_duration_seconds",
    "Duration in seconds for a probe response.",
    ["probe_type", "container", "pod", "namespace"],
)
RESULTS: Final = ("successful", "failed", "unknown")
