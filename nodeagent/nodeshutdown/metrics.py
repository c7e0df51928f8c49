"""The kubelet's graceful shutdown gauges (unix seconds; the end is 0 while one is running)."""

from __future__ import annotations

from typing import Final

import prometheus_client

START_TIME: Final = prometheus_client.Gauge(
    "kubelet_graceful_shutdown_start_time_seconds",
    "Last graceful shutdown start time since unix epoch in seconds",
)
END_TIME: Final = prometheus_client.Gauge(
    "kubelet_graceful_shutdown_end_time_seconds",
    "Last graceful shutdown end time since unix epoch in seconds",
)
