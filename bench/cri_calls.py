"""CRI calls per minute of a node component, read from its own ``/metrics``, and as the
runtime saw them, from containerd's.

nodeagent and the kubelet both serve ``kubelet_runtime_operations_total`` by the kubelet's
``operation_type``, so both are read the same way: the counter before and after a window, the
difference per minute. What each counts differs: nodeagent counts every CRI call it makes; the
kubelet only those of its runtime manager (its CRI stats provider, container log rotation and
container manager call the runtime through an uncounted client).

containerd counts every call it serves, whoever makes it (``grpc_server_handled_total`` by
``grpc_method``) and the time it spent on each (``grpc_server_handling_seconds_sum``, wall
time, concurrent calls summed): `runtime_scrape` reads both from its ``/v1/metrics``, the same
for both components.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping
from pathlib import Path

from harness.pki import CertPair, tls_client_context
from prometheus_client.parser import text_string_to_metric_families

METRIC = "kubelet_runtime_operations_total"
CAVEAT = (
    "CRI calls/min: each component's own kubelet_runtime_operations_total; nodeagent counts "
    "every call, the kubelet only its runtime manager's (not those of its stats provider, log "
    "rotation or container manager)"
)


def operations(text: str) -> dict[str, float]:
    """The counter's value per ``operation_type`` in a Prometheus text exposition."""
    ours = "\n".join(line for line in text.splitlines() if line.startswith(METRIC + "{"))
    return {
        sample.labels["operation_type"]: sample.value
        for family in text_string_to_metric_families(ours + "\n")
        for sample in family.samples
        if sample.name == METRIC
    }


CRI_SERVICES = ("runtime.v1.RuntimeService", "runtime.v1.ImageService")
RUNTIME_CAVEAT = (
    "runtime side: containerd's grpc_server_handled_total and grpc_server_handling_seconds_sum "
    "per CRI method, every caller counted; ms/min is wall time in the handler, concurrent "
    "calls summed"
)


def handled(text: str) -> tuple[dict[str, float], dict[str, float]]:
    """containerd's CRI calls served so far, and the seconds spent serving them, by method
    (``grpc_method``), from a Prometheus text exposition."""
    calls: dict[str, float] = {}
    seconds: dict[str, float] = {}
    names = ("grpc_server_handled_total{", "grpc_server_handling_seconds")
    ours = "\n".join(line for line in text.splitlines() if line.startswith(names))
    for family in text_string_to_metric_families(ours + "\n"):
        for sample in family.samples:
            if sample.labels.get("grpc_service") not in CRI_SERVICES:
                continue
            method = sample.labels["grpc_method"]
            if sample.name == "grpc_server_handled_total":
                calls[method] = calls.get(method, 0.0) + sample.value  # summed over grpc_code
            elif sample.name == "grpc_server_handling_seconds_sum":
                seconds[method] = seconds.get(method, 0.0) + sample.value
    return calls, seconds


def runtime_scrape(address: str) -> tuple[dict[str, float], dict[str, float]]:
    """`handled` from containerd's ``http://<address>/v1/metrics``; raises OSError."""
    with urllib.request.urlopen(f"http://{address}/v1/metrics", timeout=30) as response:
        return handled(response.read().decode())


def per_minute(
    before: Mapping[str, float], after: Mapping[str, float], seconds: float
) -> dict[str, float]:
    """Calls per minute of each operation between two readings ``seconds`` apart (one first
    seen in ``after`` started from 0); operations without a call are left out."""
    return {
        op: (count - before.get(op, 0.0)) * 60 / seconds
        for op, count in sorted(after.items())
        if count > before.get(op, 0.0)
    }


def rows(rates: Mapping[str, Mapping[str, float] | None]) -> list[list[str]]:
    """One row per operation (every component's, sorted), calls/min in each component's column
    (``-``: none, or not read), and a last row of totals."""
    ops = sorted({op for r in rates.values() if r for op in r})

    def cell(rate: float | None) -> str:
        return "-" if rate is None else f"{rate:.1f}"

    body = [[op, *(cell(r.get(op) if r else None) for r in rates.values())] for op in ops]
    totals = [cell(sum(r.values()) if r is not None else None) for r in rates.values()]
    return [*body, ["total", *totals]]


def runtime_rows(
    calls: Mapping[str, Mapping[str, float] | None], ms: Mapping[str, Mapping[str, float] | None]
) -> list[list[str]]:
    """One row per CRI method, "calls/min (ms/min)" in each component's column, then totals."""
    methods = sorted({op for r in calls.values() if r for op in r})

    def cell(component: str, method: str | None) -> str:
        c, t = calls[component], ms[component] or {}
        if c is None:
            return "-"
        n = sum(c.values()) if method is None else c.get(method)
        if n is None:
            return "-"
        spent = sum(t.values()) if method is None else t.get(method, 0.0)
        return f"{n:.1f} ({spent:.0f})"

    body = [[m, *(cell(component, m) for component in calls)] for m in methods]
    return [*body, ["total", *(cell(component, None) for component in calls)]]


def scrape(port: int, *, cert: Path, key: Path) -> dict[str, float]:
    """The component's counter from ``https://127.0.0.1:<port>/metrics`` with a client
    certificate (its serving certificate is not checked); raises OSError."""
    context = tls_client_context(CertPair(cert=cert, key=key))
    url = f"https://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, context=context, timeout=30) as response:
        return operations(response.read().decode())
