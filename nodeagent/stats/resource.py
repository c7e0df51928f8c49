"""``/metrics/resource``: the kubelet's stable resource metrics, what metrics-server scrapes.

Rendered from a Summary (:mod:`.summary`) in the Prometheus text format, every sample stamped
with the time of the scrape in milliseconds, as the kubelet stamps them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, Final

HELP: Final = {
    "container_cpu_usage_seconds_total": (
        "counter",
        "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
    ),
    "container_memory_working_set_bytes": (
        "gauge",
        "[STABLE] Current working set of the container in bytes",
    ),
    "container_start_time_seconds": (
        "gauge",
        "[STABLE] Start time of the container since unix epoch in seconds",
    ),
    "node_cpu_usage_seconds_total": (
        "counter",
        "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
    ),
    "node_memory_working_set_bytes": ("gauge", "[STABLE] Current working set of the node in bytes"),
    "pod_cpu_usage_seconds_total": (
        "counter",
        "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
    ),
    "pod_memory_working_set_bytes": ("gauge", "[STABLE] Current working set of the pod in bytes"),
    "resource_scrape_error": (
        "gauge",
        "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
    ),
    "scrape_error": (
        "gauge",
        "[ALPHA] (Deprecated since 1.29.0) 1 if there was an error while getting container"
        " metrics, 0 otherwise",
    ),
}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: str) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items())) + "}"


def _epoch(rfc3339: str) -> float:
    return dt.datetime.fromisoformat(rfc3339).timestamp()


def render(summary: Mapping[str, Any] | None, *, timestamp_ms: int) -> str:
    """The exposition text; ``summary=None`` when it could not be had (scrape error)."""
    samples: dict[str, list[str]] = {name: [] for name in HELP}
    ts = f" {timestamp_ms}"

    def add(name: str, value: float, **labels: str) -> None:
        samples[name].append(f"{name}{_labels(**labels)} {value!r}{ts}")

    if summary is not None:
        node = summary.get("node") or {}
        if "usageCoreNanoSeconds" in (node.get("cpu") or {}):
            add("node_cpu_usage_seconds_total", node["cpu"]["usageCoreNanoSeconds"] / 1e9)
        if "workingSetBytes" in (node.get("memory") or {}):
            add("node_memory_working_set_bytes", float(node["memory"]["workingSetBytes"]))
        for pod in summary.get("pods") or []:
            ref = pod["podRef"]
            p = {"namespace": ref["namespace"], "pod": ref["name"]}
            if "usageCoreNanoSeconds" in (pod.get("cpu") or {}):
                add("pod_cpu_usage_seconds_total", pod["cpu"]["usageCoreNanoSeconds"] / 1e9, **p)
            if "workingSetBytes" in (pod.get("memory") or {}):
                add("pod_memory_working_set_bytes", float(pod["memory"]["workingSetBytes"]), **p)
            for c in pod.get("containers") or []:
                labels = {**p, "container": c["name"]}
                if "usageCoreNanoSeconds" in (c.get("cpu") or {}):
                    add(
                        "container_cpu_usage_seconds_total",
                        c["cpu"]["usageCoreNanoSeconds"] / 1e9,
                        **labels,
                    )
                if "workingSetBytes" in (c.get("memory") or {}):
                    add(
                        "container_memory_working_set_bytes",
                        float(c["memory"]["workingSetBytes"]),
                        **labels,
                    )
                if c.get("startTime"):
                    add("container_start_time_seconds", _epoch(c["startTime"]), **labels)
    error = "0" if summary is not None else "1"
    samples["resource_scrape_error"].append(f"resource_scrape_error {error}")
    samples["scrape_error"].append(f"scrape_error {error}")
    lines: list[str] = []
    for name, (kind, text) in HELP.items():
        if samples[name]:
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}", *samples[name]]
    return "\n".join(lines) + "\n"
