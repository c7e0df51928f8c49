"""What `node_idle` measures, as small functions over /proc text and apiserver audit events.

- Memory: ``VmRSS`` (and ``VmHWM``, the peak since start) from ``/proc/<pid>/status``.
- CPU: ``utime + stime + cutime + cstime`` from ``/proc/<pid>/stat`` (own and reaped children's
  CPU, in clock ticks), as a delta over the window.
- Requests: the audit log of a control plane started with `AUDIT_POLICY`, which logs every
  request by the ``system:nodes`` group (``Request`` level for Lease writes, so the exact
  ``spec.renewTime`` the node sent is in the log, ``Metadata`` for everything else). A request is
  one ``auditID``; a watch logs ``ResponseStarted`` and later ``ResponseComplete`` under one id.
- Lease renewals: successful (200) ``update``s of ``kube-node-lease/<node>`` by the node; the
  intervals are between consecutive ``requestObject.spec.renewTime`` values.
"""

from __future__ import annotations

import datetime
import itertools
import json
import os
import statistics
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
RENEW_TARGET = 10.0
RENEW_TOLERANCE = 1.0

AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Request
    userGroups: ["system:nodes"]
    verbs: ["create", "update", "patch"]
    resources:
      - group: coordination.k8s.io
        resources: ["leases"]
  - level: Metadata
    userGroups: ["system:nodes"]
  - level: None
"""


def audit_flags(policy: Path, log: Path) -> list[str]:
    """kube-apiserver flags for an audit log of node requests (JSON lines, never rotated)."""
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={log}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",
        "--audit-log-maxsize=0",
    ]


# --- /proc ---------------------------------------------------------------------------------


def status_kib(text: str, field: str) -> int:
    """A ``kB`` field (``VmRSS``, ``VmHWM``) of a /proc/<pid>/status text, in KiB."""
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name == field:
            return int(value.split()[0])
    raise ValueError(f"no {field} in /proc/<pid>/status")


def cpu_ticks(stat_text: str) -> int:
    """utime + stime + cutime + cstime of a /proc/<pid>/stat text (fields 14-17)."""
    fields = stat_text.rpartition(")")[2].split()  # fields[0] is field 3 (state)
    return sum(int(f) for f in fields[11:15])


@dataclass(frozen=True, kw_only=True)
class Sample:
    at: float  # wall clock, seconds since the epoch
    rss_kib: int
    hwm_kib: int
    cpu_ticks: int
    load1: float


def sample(pid: int, *, now: float) -> Sample:
    """One reading of `pid`; raises OSError when it is gone."""
    status = Path(f"/proc/{pid}/status").read_text()
    return Sample(
        at=now,
        rss_kib=status_kib(status, "VmRSS"),
        hwm_kib=status_kib(status, "VmHWM"),
        cpu_ticks=cpu_ticks(Path(f"/proc/{pid}/stat").read_text()),
        load1=float(Path("/proc/loadavg").read_text().split()[0]),
    )


# --- audit log -----------------------------------------------------------------------------


def read_events(log: Path) -> Iterator[dict[str, Any]]:
    """Audit events from a JSON-lines log; a half-written last line is skipped."""
    try:
        text = log.read_text()
    except FileNotFoundError:
        return
    for line in text.splitlines():
        try:
            yield json.loads(line)
        except ValueError:
            continue


def timestamp(value: str) -> float:
    return datetime.datetime.fromisoformat(value).timestamp()


def by_user(events: Iterable[dict[str, Any]], username: str) -> list[dict[str, Any]]:
    return [e for e in events if e.get("user", {}).get("username") == username]


def requests_in(events: Iterable[dict[str, Any]], start: float, end: float) -> dict[str, str]:
    """auditID -> "verb resource[/subresource]" of the requests received in [start, end)."""
    found: dict[str, str] = {}
    for event in events:
        received = timestamp(event["requestReceivedTimestamp"])
        if start <= received < end:
            ref = event.get("objectRef", {})
            what = ref.get("resource", event.get("requestURI", "?").split("?")[0])
            if ref.get("subresource"):
                what += "/" + ref["subresource"]
            found[event["auditID"]] = f"{event['verb']} {what}"
    return found


def lease_renewals(events: Iterable[dict[str, Any]], node: str) -> list[float]:
    """``spec.renewTime`` of every successful create/update of the node's Lease, sorted."""
    times = set()
    for event in events:
        ref = event.get("objectRef", {})
        if (
            event.get("stage") == "ResponseComplete"
            and event.get("verb") in {"create", "update"}
            and ref.get("resource") == "leases"
            and ref.get("namespace") == "kube-node-lease"
            and ref.get("name") == node
            and event.get("responseStatus", {}).get("code") in {200, 201}
        ):
            renew = event.get("requestObject", {}).get("spec", {}).get("renewTime")
            if renew:
                times.add(timestamp(renew))
    return sorted(times)


# --- figures -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Figures:
    """One component's numbers over one idle window."""

    window_s: float
    rss_max_kib: int
    rss_final_kib: int
    hwm_kib: int
    cpu_s: float
    cpu_total_s: float  # since the process started, startup included
    runtime_cpu_s: float  # containerd's CPU over the same window
    renew_count: int
    renew_min_s: float
    renew_median_s: float
    renew_max_s: float
    renew_outside: int
    requests_per_min: float
    request_kinds: dict[str, int]
    load1_mean: float
    load1_max: float


def intervals(times: Sequence[float], start: float, end: float) -> list[float]:
    """Gaps between consecutive renewals that end inside [start, end]; the renewal just
    before `start` counts as the first one's predecessor, so the window is fully covered."""
    gaps = []
    for before, after in itertools.pairwise(times):
        if start <= after <= end:
            gaps.append(after - before)
    return gaps


def figures(
    *,
    samples: Sequence[Sample],
    runtime_cpu_ticks: tuple[int, int],
    renewals: Sequence[float],
    requests: dict[str, str],
) -> Figures:
    if len(samples) < 2:
        raise ValueError("need at least two samples")
    first, last = samples[0], samples[-1]
    window = last.at - first.at
    gaps = intervals(renewals, first.at, last.at)
    if not gaps:
        raise ValueError("no lease renewal in the window")
    outside = sum(1 for g in gaps if abs(g - RENEW_TARGET) > RENEW_TOLERANCE)
    loads = [s.load1 for s in samples]
    return Figures(
        window_s=window,
        rss_max_kib=max(s.rss_kib for s in samples),
        rss_final_kib=last.rss_kib,
        hwm_kib=last.hwm_kib,
        cpu_s=(last.cpu_ticks - first.cpu_ticks) / CLOCK_TICKS,
        cpu_total_s=last.cpu_ticks / CLOCK_TICKS,
        runtime_cpu_s=(runtime_cpu_ticks[1] - runtime_cpu_ticks[0]) / CLOCK_TICKS,
        renew_count=len(gaps),
        renew_min_s=min(gaps),
        renew_median_s=statistics.median(gaps),
        renew_max_s=max(gaps),
        renew_outside=outside,
        requests_per_min=len(requests) / (window / 60),
        request_kinds=dict(Counter(requests.values()).most_common()),
        load1_mean=statistics.fmean(loads),
        load1_max=max(loads),
    )


def _mib(kib: int) -> str:
    return f"{kib / 1024:.1f}"


def rows(f: Figures) -> list[tuple[str, str]]:
    minutes = f.window_s / 60
    return [
        ("RSS max / final (MiB)", f"{_mib(f.rss_max_kib)} / {_mib(f.rss_final_kib)}"),
        ("RSS peak since start, VmHWM (MiB)", _mib(f.hwm_kib)),
        (f"CPU seconds over {minutes:.1f} idle min", f"{f.cpu_s:.2f}"),
        ("  = average share of one core", f"{100 * f.cpu_s / f.window_s:.2f}%"),
        ("CPU seconds since start (startup included)", f"{f.cpu_total_s:.2f}"),
        ("containerd CPU seconds, same window", f"{f.runtime_cpu_s:.2f}"),
        (
            "Lease renewal interval min/median/max (s)",
            f"{f.renew_min_s:.2f} / {f.renew_median_s:.2f} / {f.renew_max_s:.2f}",
        ),
        ("Lease renewals in window / outside 10s±1s", f"{f.renew_count} / {f.renew_outside}"),
        ("Requests per minute to the apiserver", f"{f.requests_per_min:.1f}"),
        ("Load average (1 min) mean / max", f"{f.load1_mean:.2f} / {f.load1_max:.2f}"),
    ]


def table(results: dict[str, Figures], *, markdown: bool = False) -> str:
    """The figures side by side, one column per component."""
    names = list(results)
    labels = [label for label, _ in rows(results[names[0]])]
    columns = [[value for _, value in rows(results[n])] for n in names]
    body = [[label, *(column[i] for column in columns)] for i, label in enumerate(labels)]
    header = ["", *names]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(
            zip(row, widths, strict=True)))
        for row in [header, *body]
    )  # fmt: skip


def request_breakdown(results: dict[str, Figures]) -> str:
    """Requests in the window by verb and resource, per component."""
    lines = []
    for name, f in results.items():
        kinds = ", ".join(f"{what} x{n}" for what, n in f.request_kinds.items())
        lines.append(f"{name} ({f.window_s / 60:.1f} min): {kinds}")
    return "\n".join(lines)
