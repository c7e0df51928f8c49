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
  plain HTTP and succeeded that way;
- ``kubelet_runtime_operations_total``, ``..._duration_seconds`` and ``..._errors_total`` for
  every CRI call, by the kubelet's ``operation_type`` (``operations.py``), counted by
  :class:`RuntimeOperation` in the CRI client.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType
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


RUNTIME_OPERATIONS_BUCKETS: Final = tuple(0.005 * 2.5**i for i in range(14))
"""The kubelet's ``metrics.ExponentialBuckets(.005, 2.5, 14)``: 5 ms to 745 s."""

RUNTIME_OPERATIONS: Final = Counter(
    "kubelet_runtime_operations_total",
    "Cumulative number of runtime operations by operation type.",
    ["operation_type"],
)
RUNTIME_OPERATIONS_DURATION: Final = Histogram(
    "kubelet_runtime_operations_duration_seconds",
    "Duration in seconds of runtime operations. Broken down by operation type.",
    ["operation_type"],
    buckets=RUNTIME_OPERATIONS_BUCKETS,
)
RUNTIME_OPERATIONS_ERRORS: Final = Counter(
    "kubelet_runtime_operations_errors_total",
    "Cumulative number of runtime operation errors by operation type.",
    ["operation_type"],
)


class RuntimeOperation:
    """One CRI call, counted as the kubelet's instrumented services count it: on leaving the
    block, one operation and its duration; one error too when the block raised (any
    exception, a cancellation included: the kubelet's client returns the context's error) or
    the caller set ``failed`` (an answer the kubelet's client turns into an error)."""

    __slots__ = ("_clock", "_started", "failed", "operation_type")

    def __init__(self, operation_type: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.operation_type = operation_type
        self.failed = False
        self._clock = clock
        self._started = 0.0

    def __enter__(self) -> RuntimeOperation:
        self._started = self._clock()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None or self.failed:
            RUNTIME_OPERATIONS_ERRORS.labels(self.operation_type).inc()
        RUNTIME_OPERATIONS.labels(self.operation_type).inc()
        RUNTIME_OPERATIONS_DURATION.labels(self.operation_type).observe(
            self._clock() - self._started
        )
