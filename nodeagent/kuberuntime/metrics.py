"""The kubelet's pod and container start counters and sandbox timings, on the default
Prometheus registry, counted where the kubelet's ``SyncPod`` counts them:

- ``kubelet_started_pods_total`` before each sandbox is created, ``..._errors_total`` when
  that fails (not for a pod already being deleted);
- ``kubelet_run_podsandbox_duration_seconds`` / ``kubelet_run_podsandbox_errors_total`` around
  the CRI ``RunPodSandbox`` call, by RuntimeClass handler;
- ``kubelet_started_containers_total`` for each container start attempted past its restart
  back-off (labelled ``container``, ``init_container`` — sidecars too — or
  ``ephemeral_container``), ``..._errors_total`` with the failure's reason as ``code``
  (``ErrImagePull``, ``CreateContainerConfigError``, ``CreateContainerError``,
  ``RunContainerError``, ``PostStartHookError``, ...);
- ``kubelet_lifecycle_handler_http_fallbacks_total`` for each HTTPS hook that answered in
  plain HTTP and succeeded that way.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Histogram

from nodeagent.kuberuntime.results import CRASH_LOOP_BACK_OFF

DEF_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Go's ``prometheus.DefBuckets`` (prometheus_client's default buckets differ)."""

CONTAINER: Final = "container"
INIT_CONTAINER: Final = "init_container"
EPHEMERAL_CONTAINER: Final = "ephemeral_container"

STARTED_PODS: Final = Counter("kubelet_started_pods_total", "Cumulative number of pods started")
STARTED_PODS_ERRORS: Final = Counter(
    "kubelet_started_pods_errors_total", "Cumulative number of errors when starting pods"
)
STARTED_CONTAINERS: Final = Counter(
    "kubelet_started_containers_total",
    "Cumulative number of containers started",
    ["container_type"],
)
STARTED_CONTAINERS_ERRORS: Final = Counter(
    "kubelet_started_containers_errors_total",
    "Cumulative number of errors when starting containers",
    ["container_type", "code"],
)
RUN_PODSANDBOX_DURATION: Final = Histogram(
    "kubelet_run_podsandbox_duration_seconds",
    "Duration in seconds of the run_podsandbox operations. Broken down by RuntimeClass.Handler.",
    ["runtime_handler"],
    buckets=DEF_BUCKETS,
)
RUN_PODSANDBOX_ERRORS: Final = Counter(
    "kubelet_run_podsandbox_errors_total",
    "Cumulative number of the run_podsandbox operation errors by RuntimeClass.Handler.",
    ["runtime_handler"],
)

LIFECYCLE_HTTP_FALLBACKS: Final = Counter(
    "kubelet_lifecycle_handler_http_fallbacks_total",
    "The number of times lifecycle handlers successfully fell back to http from https.",
)


def count_start(container_type: str, failure: str | None) -> None:
    """One container start as the sync ended it: ``failure`` is its waiting reason, None when
    it started; a container still backing off was not attempted and counts nothing."""
    if failure == CRASH_LOOP_BACK_OFF:
        return
    STARTED_CONTAINERS.labels(container_type).inc()
    if failure is not None:
        STARTED_CONTAINERS_ERRORS.labels(container_type, failure).inc()
