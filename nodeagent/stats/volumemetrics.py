"""The kubelet's ``kubelet_volume_stats_*`` metrics on ``/metrics``: one series per claim
(``namespace``, ``persistentvolumeclaim``), from the ``pvcRef`` volume entries of the last
Summary the stats provider computed (the kubelet's ``volumeStatsCollector`` reads the same
pod volume stats), each claim once however many pods use it.

One collector on the default registry for the process; :func:`set_source` points it at the
running stats provider (its last pods' entries)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

from prometheus_client.core import REGISTRY, GaugeMetricFamily
from prometheus_client.registry import Collector

Json = dict[str, Any]
LABELS: Final = ("namespace", "persistentvolumeclaim")
SERIES: Final = (
    ("kubelet_volume_stats_capacity_bytes", "Capacity in bytes of the volume", "capacityBytes"),
    (
        "kubelet_volume_stats_available_bytes",
        "Number of available bytes in the volume",
        "availableBytes",
    ),
    ("kubelet_volume_stats_used_bytes", "Number of used bytes in the volume", "usedBytes"),
    ("kubelet_volume_stats_inodes", "Maximum number of inodes in the volume", "inodes"),
    ("kubelet_volume_stats_inodes_free", "Number of free inodes in the volume", "inodesFree"),
    ("kubelet_volume_stats_inodes_used", "Number of used inodes in the volume", "inodesUsed"),
)


def families(entries: Iterable[Json]) -> list[GaugeMetricFamily]:
    """The gauges of the claims among ``entries`` (Summary ``volume`` entries)."""
    out = {name: GaugeMetricFamily(name, help_text, labels=LABELS) for name, help_text, _ in SERIES}
    seen: set[tuple[str, str]] = set()
    for entry in entries:
        ref = entry.get("pvcRef")
        if not ref:
            continue
        key = (str(ref.get("namespace", "")), str(ref.get("name", "")))
        if key in seen:
            continue
        seen.add(key)
        for name, _, field in SERIES:
            if field in entry:
                out[name].add_metric(list(key), float(entry[field]))
    health = GaugeMetricFamily(
        "kubelet_volume_stats_health_status_abnormal",
        "Abnormal volume health status. The count is either 1 or 0. 1 indicates the volume "
        "is unhealthy, 0 indicates volume is healthy",
        labels=LABELS,
    )
    for key in sorted(seen):
        health.add_metric(list(key), 0.0)
    return [*out.values(), health]


class VolumeStatsCollector(Collector):
    def __init__(self) -> None:
        self.source: Callable[[], Iterable[Json]] = tuple

    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from families(self.source())


COLLECTOR: Final = VolumeStatsCollector()
REGISTRY.register(COLLECTOR)


def set_source(source: Callable[[], Iterable[Json]]) -> None:
    COLLECTOR.source = source
