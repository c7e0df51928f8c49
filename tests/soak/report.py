"""The soak's report: a markdown table per run (faults by kind with their recovery p50/p99,
violations by invariant, leaks, RSS and CPU) and an SVG plot of each node's agent RSS and CPU
over the run with the faults marked, written beside docs/reliability.md."""

from __future__ import annotations

import datetime
import itertools
import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
W, H, PAD = 760, 200, 46


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank percentile (`q` in 0-100) of `values`, None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def _fmt(v: float | None, unit: str = "s") -> str:
    return "-" if v is None else f"{v:.0f} {unit}" if v >= 10 else f"{v:.1f} {unit}"


def cpu_rates(samples: Sequence[Sequence[float]]) -> list[tuple[float, float]]:
    """(time, CPU fraction of one core) between consecutive samples of one process."""
    out = []
    for a, b in itertools.pairwise(samples):
        if a[1] == b[1] and b[0] > a[0]:
            out.append((b[0], (b[3] - a[3]) / (b[0] - a[0])))
    return out


def table(run: dict[str, Any]) -> str:
    started = datetime.datetime.fromtimestamp(run["started"], datetime.UTC)
    minutes = (run["ended"] - run["started"]) / 60
    lines = [
        f"**{run['peer']}, seed {run['seed']}**: {started:%Y-%m-%d %H:%M} UTC, {minutes:.0f} min,"
        f" {len(run['nodes'])} nodes; {run['actions']} workload actions"
        f" ({run['workload_errors']} refused while a fault lasted), {run['hits']} Service"
        f" requests answered, {len(run['violations'])} violations.",
        "",
        "| fault | count | recovered | recovery p50 | recovery p99 |",
        "|---|---:|---:|---:|---:|",
    ]
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for f in run["faults"]:
        by_kind[f["kind"]].append(f)
    every = []
    for kind in sorted(by_kind):
        recov = [f["converged_at"] - f["end"] for f in by_kind[kind] if f["converged_at"]]
        every += recov
        lines.append(
            f"| {kind} | {len(by_kind[kind])} | {len(recov)} | {_fmt(percentile(recov, 50))}"
            f" | {_fmt(percentile(recov, 99))} |"
        )
    lines.append(
        f"| **all** | {len(run['faults'])} | {len(every)} | {_fmt(percentile(every, 50))}"
        f" | {_fmt(percentile(every, 99))} |"
    )
    counts = Counter(v["invariant"] for v in run["violations"])
    lines += ["", "| invariant | violations |", "|---|---:|"]
    for name in (
        "duplicate-container", "duplicate-sandbox", "no-convergence", "leak", "orphan",
        "traffic-to-unready", "restarted-by-fault", "lease-gap", "rss-growth",
    ):  # fmt: skip
        lines.append(f"| {name} | {counts.pop(name, 0)} |")
    lines += [f"| {name} | {n} |" for name, n in sorted(counts.items())]
    lines += ["", "| process | RSS first → last | RSS slope | CPU mean |", "|---|---|---|---:|"]
    for key in sorted(run["usage"]):
        samples = run["usage"][key]
        if not samples:
            continue
        slope = run["rss_slopes"].get(key, {})
        rates = [r for _, r in cpu_rates(samples)]
        mean = sum(rates) / len(rates) if rates else 0.0
        per_hour = slope.get("per_hour", 0.0) / 2**20
        lines.append(
            f"| {key} | {samples[0][2] / 2**20:.0f} → {samples[-1][2] / 2**20:.0f} MiB"
            f" | {per_hour:+.1f} MiB/h over {slope.get('span', 0) / 60:.0f} min"
            f" | {100 * mean:.1f} % |"
        )
    if run["violations"]:
        lines += ["", "Violations:", ""]
        t0 = run["started"]
        lines += [
            f"- +{(v['at'] - t0) / 60:.1f} min {v['invariant']}: {v['subject']}: {v['detail']}"
            for v in run["violations"][:40]
        ]
    return "\n".join(lines)


def _polyline(points: Sequence[tuple[float, float]], colour: str) -> str:
    text = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    return f'<polyline fill="none" stroke="{colour}" stroke-width="1.2" points="{text}"/>'


def _panel(
    series: dict[str, list[tuple[float, float]]],
    *,
    top: float,
    t_end: float,
    label: str,
    faults: Sequence[dict[str, Any]],
    t0: float,
) -> list[str]:
    ymax = max((y for pts in series.values() for _, y in pts), default=1.0) * 1.1 or 1.0
    sx = (W - 2 * PAD) / max(t_end, 1.0)
    sy = (H - 40) / ymax

    def xy(t: float, y: float) -> tuple[float, float]:
        return PAD + t * sx, top + H - 20 - y * sy

    out = [
        f'<text x="{PAD}" y="{top + 12}" font-size="12">{label}</text>',
        f'<line x1="{PAD}" y1="{top + H - 20}" x2="{W - PAD}" y2="{top + H - 20}" stroke="#888"/>',
        f'<text x="4" y="{top + 24}" font-size="10">{ymax:.0f}</text>',
        f'<text x="4" y="{top + H - 20}" font-size="10">0</text>',
    ]
    for f in faults:
        x0, _ = xy(f["start"] - t0, 0)
        x1, _ = xy(max(f["end"], f["start"] + 1) - t0, 0)
        out.append(
            f'<rect x="{x0:.1f}" y="{top + 16}" width="{max(x1 - x0, 1):.1f}"'
            f' height="{H - 36}" fill="#ddd" opacity="0.6"><title>{f["kind"]}'
            f" {f['node'] or ''}</title></rect>"
        )
    for i, (name, pts) in enumerate(sorted(series.items())):
        colour = COLOURS[i % len(COLOURS)]
        out.append(_polyline([xy(t, y) for t, y in pts], colour))
        out.append(
            f'<text x="{W - PAD - 90}" y="{top + 24 + 12 * i}" font-size="10"'
            f' fill="{colour}">{name}</text>'
        )
    return out


def plot(run: dict[str, Any]) -> str:
    """The SVG: agent RSS (MiB) and CPU (% of a core) of each node over minutes of the run,
    the faults as grey bands."""
    t0 = run["started"]
    t_end = (run["ended"] - t0) / 60
    rss, cpu = {}, {}
    for key, samples in run["usage"].items():
        if not key.endswith("/agent"):
            continue
        node = key.split("/")[0]
        rss[node] = [((s[0] - t0) / 60, s[2] / 2**20) for s in samples]
        cpu[node] = [((t - t0) / 60, 100 * r) for t, r in cpu_rates(samples)]
    faults = [{**f, "start": t0 + (f["start"] - t0) / 60, "end": t0 + (f["end"] - t0) / 60}
              for f in run["faults"]]  # fmt: skip
    body = _panel(rss, top=0, t_end=t_end, label="agent RSS (MiB)", faults=faults, t0=t0)
    body += _panel(cpu, top=H, t_end=t_end, label="agent CPU (% of a core)", faults=faults,
                   t0=t0)  # fmt: skip
    body.append(
        f'<text x="{W / 2 - 60}" y="{2 * H + 12}" font-size="11">minutes into the run'
        " (grey: a fault)</text>"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{2 * H + 20}"'
        ' font-family="sans-serif">\n<rect width="100%" height="100%" fill="white"/>\n'
        + "\n".join(body)
        + "\n</svg>\n"
    )


def render(runs: Sequence[Path], docs: Path) -> str:
    """The tables of `runs` (soak.json files or their directories) as markdown; each run's
    plot written to `docs/soak-<peer>-<seed>.svg`."""
    parts = []
    for path in runs:
        file = path / "soak.json" if path.is_dir() else path
        run = json.loads(file.read_text())
        svg = docs / f"soak-{run['peer']}-{run['seed']}.svg"
        svg.write_text(plot(run))
        parts.append(table(run) + f"\n\n![agent RSS and CPU]({svg.name})\n")
    return "\n".join(parts)
