"""The tables `pod_startup` prints: one column per component, one row per figure; then per idle
window, one row per CRI operation (calls per minute, `cri_calls`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

import cri_calls
from node_idle import machine, versions_line
from pod_api import percentile

if TYPE_CHECKING:
    from pod_startup import Burst, Result, Window


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _mib(kib: int) -> str:
    return f"{kib / 1024:.1f}"


def burst_rows(burst: Burst, *, before: int) -> list[tuple[str, str]]:
    running = burst.batch.latencies("running")
    ready = burst.batch.latencies("ready")
    title = f"{burst.count} pods at once" + (f" (on top of {before})" if before else "")
    creates = max((t.created for t in burst.batch.pods.values()), default=burst.batch.started)
    return [
        (f"**{title}**: startup p50 / p99 / max (s)",
         f"{_s(percentile(running, 50))} / {_s(percentile(running, 99))} / "
         f"{_s(max(running, default=None))}"),
        ("  pods Running / created", f"{len(running)} / {burst.count}"),
        ("  Ready p50 / p99 (s)", f"{_s(percentile(ready, 50))} / {_s(percentile(ready, 99))}"),
        ("  all Running, from the first create (s)", _s(burst.batch.all_running_s)),
        ("  the creates took (s)", _s(creates - burst.batch.started)),
        ("  component / containerd CPU seconds meanwhile",
         f"{burst.cpu_s:.2f} / {burst.runtime_cpu_s:.2f}"),
        ("  load average (1 min) at the first create", f"{burst.load1:.2f}"),
    ]  # fmt: skip


def window_rows(w: Window) -> list[tuple[str, str]]:
    minutes = w.seconds / 60
    return [
        (f"**idle with {w.pods} pods**: RSS max / final (MiB)",
         f"{_mib(w.rss_max_kib)} / {_mib(w.rss_final_kib)}"),
        (f"  CPU seconds over {minutes:.1f} min (share of one core)",
         f"{w.cpu_s:.2f} ({100 * w.cpu_s / w.seconds:.2f}%)"),
        ("  containerd CPU seconds, same window", f"{w.runtime_cpu_s:.2f}"),
        ("  load average (1 min) mean / max", f"{w.load_mean:.2f} / {w.load_max:.2f}"),
    ]  # fmt: skip


def rows(result: Result) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    if result.singles:
        singles = sorted(result.singles)
        found.append((
            f"**quiet node, {len(singles)} single pods**: startup p50 / p99 / max (s)",
            f"{_s(percentile(singles, 50))} / {_s(percentile(singles, 99))} / {_s(singles[-1])}",
        ))  # fmt: skip
    before = 0  # the single pods are deleted before the bursts
    windows = {w.pods: w for w in result.windows}
    for burst in result.bursts:
        found += burst_rows(burst, before=before)
        before += burst.count
        if before in windows:
            found += window_rows(windows[before])
    found.append(("RSS peak since start, VmHWM (MiB)", _mib(result.hwm_kib)))
    found.append((f"all {before} pods deleted through the API after (s)", _s(result.deleted_s)))
    return found


def table(results: dict[str, Result], *, markdown: bool) -> str:
    names = list(results)
    columns = [rows(r) for r in results.values()]  # same rows in the same order for each
    longest = max(columns, key=len)
    body = [
        [label, *(c[i][1] if i < len(c) else "-" for c in columns)]
        for i, (label, _) in enumerate(longest)
    ]
    return render(["", *names], body, markdown=markdown)


def render(header: list[str], body: list[list[str]], *, markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])
    body = [[label.replace("**", ""), *rest] for label, *rest in body]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(
            zip(row, widths, strict=True)))
        for row in [header, *body]
    )  # fmt: skip


def cri_tables(results: dict[str, Result], *, markdown: bool) -> list[str]:
    """Per idle window (the n-th of each component), each component's CRI calls per minute by
    operation, from its own ``kubelet_runtime_operations_total``."""
    tables = []
    for n in range(max((len(r.windows) for r in results.values()), default=0)):
        windows = {c: r.windows[n] if n < len(r.windows) else None for c, r in results.items()}
        pods = "/".join(sorted({str(w.pods) for w in windows.values() if w}))
        rates = {c: w.cri_per_min if w else None for c, w in windows.items()}
        header = [f"CRI calls/min, idle with {pods} pods", *results]
        tables.append(render(header, cri_calls.rows(rates), markdown=markdown))
        calls = {c: w.runtime_calls_per_min if w else None for c, w in windows.items()}
        if any(calls.values()):
            ms = {c: w.runtime_ms_per_min if w else None for c, w in windows.items()}
            header = [f"containerd served, calls/min (ms/min), idle with {pods} pods", *results]
            tables.append(render(header, cri_calls.runtime_rows(calls, ms), markdown=markdown))
    return tables


def per_pod(results: dict[str, Result]) -> list[str]:
    """Every pod's startup latency, sorted, per component and burst (to see the spread)."""
    lines = []
    for name, result in results.items():
        if result.singles:
            values = " ".join(f"{v:.2f}" for v in result.singles)
            lines.append(f"{name} single pods in order, s: {values}")
        for i, burst in enumerate(result.bursts):
            values = " ".join(f"{v:.2f}" for v in burst.batch.latencies("running"))
            lines.append(f"{name} burst {i + 1} ({burst.count} pods), s: {values}")
    return lines


def report(
    results: dict[str, Result], *, args: argparse.Namespace, kubelet: Path, started: str
) -> str:
    lines = [table(results, markdown=args.markdown), ""]
    cri = cri_tables(results, markdown=args.markdown)
    for rendered in cri:
        lines += [rendered, ""]
    lines += [cri_calls.CAVEAT, cri_calls.RUNTIME_CAVEAT, ""] if cri else []
    lines += [*per_pod(results), ""]
    for component, result in results.items():
        lines += [f"{component}: {n}" for n in result.notes]
    binding = "nodeName" if args.node_name else "the scheduler (nodeSelector)"
    lines += ["", f"started {started}; pods bound through {binding}; {versions_line(kubelet)}"]
    lines += [", ".join(f"{k}: {v}" for k, v in machine().items())]
    return "\n".join(lines)
