"""The table `proxy_compare.py` prints (``--markdown``: as `docs/benchmarks.md` holds it)."""

from __future__ import annotations

from typing import Any

HEAD = (
    "services x eps",
    "component",
    "(a) start → first sync applied",
    "start → caches synced",
    "its own sync duration",
    "CPU s to first sync",
    "(b) endpoint change → in nft, median / max (n)",
    "its own programming latency, median",
    "(c) RSS / peak MiB",
    "load 1-min start / end",
)


def _s(value: float | None, unit: str = "s", digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f} {unit}"


def cells(row: dict[str, Any]) -> list[str]:
    size = f"{row['services']:,} x {row.get('endpoints', 5)}"
    if row["component"] == "floor":
        floor = f"{row['floor_s']:.2f} s ({row['floor_min_s']:.2f})"
        return [size, "floor: `nft -f` of nodeagent's scripts, median (min)", floor,
                "", "", "", "", "", "", ""]  # fmt: skip
    n = len(row["change_ms"])
    return [
        size,
        row["component"] + (f" #{row['run']}" if row.get("run", 1) > 1 else ""),
        _s(row["start_to_sync_s"]),
        _s(row.get("start_to_caches_s")),
        _s(row["first_sync_s"]),
        f"{row['cpu_to_sync_s']:.1f}",
        f"{row['change_median_ms']:.0f} / {row['change_max_ms']:.0f} ms ({n})",
        _s(row["own_programming_median_ms"], "ms", 0),
        f"{row['rss_mib']:.0f} / {row['hwm_mib']:.0f}",
        f"{row['load_start']:.2f} / {row['load_end']:.2f}",
    ]


def progress_line(row: dict[str, Any]) -> str:
    return " | ".join(f"{h}: {c}" for h, c in zip(HEAD, cells(row), strict=True) if c)


def render(env: dict[str, Any], rows: list[dict[str, Any]], *, markdown: bool) -> str:
    lines = [
        f"{env['date']}, {env['host']}, {env['nft']}, Python {env['python']}, "
        f"commit {env['commit']}, proxy sources {env['proxy_tree']}, "
        f"load {' '.join(env['load'])} -> {' '.join(env['load_end'])}",
        "",
    ]
    table = [list(HEAD), *(cells(r) for r in rows)]
    if markdown:
        lines.append("| " + " | ".join(HEAD) + " |")
        lines.append("|" + "---|" * len(HEAD))
        lines += ["| " + " | ".join(c) + " |" for c in table[1:]]
    else:
        widths = [max(len(r[i]) for r in table) for i in range(len(HEAD))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in table]
    lines.append("")
    for r in rows:
        if r["component"] != "floor":
            lines.append(
                f"{r['component']} {r['services']:,}: changes ms {r['change_ms']}; "
                f"own {r['own_programming_ms']}; syncs {r['syncs']}, failures {r['failures']}, "
                f"nf_tables events seen {r['events']} (overruns {r['event_overruns']}); "
                f"ip table: {r['chains']} chains, {r['maps_sets']} maps/sets, "
                f"`nft list table` {r['list_s']:.2f} s, "
                f"`nft --json --terse list table` {r['list_json_s']:.2f} s"
            )
        else:
            lines.append(
                f"floor {r['services']:,}: runs {r['floor_runs_s']} s, "
                f"{r['transactions']} transaction(s), {r['script_bytes']:,} bytes"
            )
    return "\n".join(lines)
