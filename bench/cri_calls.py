"""CRI calls per minute of a node component, read from its own ``/metrics``.

nodeagent and the kubelet both serve ``kubelet_runtime_operations_total`` by the kubelet's
``operation_type``, so both are read the same way: the counter before and after a window, the
difference per minute. What each counts differs: nodeagent counts every CRI call it makes; the
kubelet only those of its runtime manager (its CRI stats provider, container log rotation and
container manager call the runtime through an uncounted client).
"""

from __future__ import annotations

import ssl
import urllib.request
from collections.abc import Mapping
from pathlib import Path

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


def scrape(port: int, *, cert: Path, key: Path) -> dict[str, float]:
    """The component's counter from ``https://127.0.0.1:<port>/metrics`` with a client
    certificate (its serving certificate is not checked); raises OSError."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.load_cert_chain(str(cert), str(key))
    url = f"https://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, context=context, timeout=30) as response:
        return operations(response.read().decode())
