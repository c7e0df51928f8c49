"""The kubelet_volume_stats_* gauges from the Summary's claim entries."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from nodeagent.stats.volumemetrics import VolumeStatsCollector

ENTRY = {
    "name": "data",
    "capacityBytes": 1000,
    "availableBytes": 600,
    "usedBytes": 400,
    "inodes": 10,
    "inodesFree": 7,
    "inodesUsed": 3,
    "pvcRef": {"name": "data", "namespace": "ns"},
}


def test_one_series_per_claim_and_none_for_inline_volumes() -> None:
    collector = VolumeStatsCollector()
    collector.source = lambda: [ENTRY, dict(ENTRY), {"name": "inline", "usedBytes": 1}]
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    labels = '{namespace="ns",persistentvolumeclaim="data"}'
    assert lines == [
        f"kubelet_volume_stats_capacity_bytes{labels} 1000.0",
        f"kubelet_volume_stats_available_bytes{labels} 600.0",
        f"kubelet_volume_stats_used_bytes{labels} 400.0",
        f"kubelet_volume_stats_inodes{labels} 10.0",
        f"kubelet_volume_stats_inodes_free{labels} 7.0",
        f"kubelet_volume_stats_inodes_used{labels} 3.0",
        f"kubelet_volume_stats_health_status_abnormal{labels} 0.0",
    ]
