"""What the cgroup stats housekeeping costs, on the default Prometheus registry (``/metrics``).

The kubelet has no such metric (cAdvisor's housekeeping is not instrumented); these are
nodeagent's own, so ``bench/stats_cost_vm.py`` and an operator can see the per-pass cost of
reading every pod and container cgroup without a profiler.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge, Histogram

HOUSEKEEPING_DURATION: Final = Histogram(
    "nodeagent_stats_housekeeping_duration_seconds",
    "Wall time of one cgroup stats housekeeping pass (every pod and container cgroup read).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
HOUSEKEEPING_CPU: Final = Counter(
    "nodeagent_stats_housekeeping_cpu_seconds",
    "CPU time of the sampling thread in cgroup stats housekeeping passes.",
)
HOUSEKEEPING_CGROUPS: Final = Gauge(
    "nodeagent_stats_housekeeping_cgroups",
    "Cgroups read by the last housekeeping pass (root, kubepods, pods and containers).",
)
