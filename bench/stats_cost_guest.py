"""The guest half of ``stats_cost_vm.py``: measure one node agent's systemd unit over a window.

Copied into the VM and run there by the guest's python3 (standard library only), so no host
round trip lands inside the window:

    python3 stats_cost_guest.py --unit nodeagent.service --seconds 120 [--summary-every 10]
        --cert admin.crt --key admin.key [--port 10250]

Reads the unit's cgroup ``cpu.stat`` (``usage_usec``: the agent and any child it starts) at the
start and the end of the window, the main PID's ``VmRSS`` every 5 s, and the agent's ``/metrics``
at both ends (nodeagent's ``nodeagent_stats_housekeeping_*``; the kubelet has none). With
``--summary-every N`` it also GETs ``/stats/summary`` every N seconds, as metrics-server does,
with the given client certificate. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import ssl
import subprocess
import sys
import time
import urllib.request

RSS_EVERY = 5.0
METRIC_PREFIX = "nodeagent_stats_housekeeping_"


def unit_property(unit: str, name: str) -> str:
    out = subprocess.run(
        ["systemctl", "show", "-p", name, "--value", unit],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def cpu_stat(cgroup: str) -> dict[str, int]:
    with open(f"/sys/fs/cgroup{cgroup}/cpu.stat") as f:
        return {k: int(v) for k, v in (line.split() for line in f if line.strip())}


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def tls_context(cert: str, key: str) -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the agent's self-signed serving certificate
    context.load_cert_chain(cert, key)
    return context


def get(url: str, context: ssl.SSLContext) -> tuple[float, int]:
    started = time.monotonic()
    with urllib.request.urlopen(url, context=context, timeout=60) as response:
        size = len(response.read())
    return time.monotonic() - started, size


def housekeeping_metrics(url: str, context: ssl.SSLContext) -> dict[str, float]:
    try:
        with urllib.request.urlopen(url, context=context, timeout=60) as response:
            text = response.read().decode()
    except OSError as e:
        print(f"GET {url}: {e}", file=sys.stderr)
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(METRIC_PREFIX) and "{" not in line:
            name, _, value = line.partition(" ")
            out[name[len(METRIC_PREFIX) :]] = float(value)
    return out


def loadavg() -> list[float]:
    """The guest's 1, 5 and 15 min load averages at the end of the window."""
    with open("/proc/loadavg") as f:
        return [float(v) for v in f.read().split()[:3]]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--unit", required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--summary-every", type=float, default=0.0)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--port", type=int, default=10250)
    args = parser.parse_args(argv)

    cgroup = unit_property(args.unit, "ControlGroup")
    pid = int(unit_property(args.unit, "MainPID"))
    if not cgroup or pid == 0:
        print(f"unit {args.unit} is not running", file=sys.stderr)
        return 1
    context = tls_context(args.cert, args.key)
    base = f"https://127.0.0.1:{args.port}"
    metrics_before = housekeeping_metrics(f"{base}/metrics", context)

    rss: list[int] = []
    reads: list[tuple[float, int]] = []
    errors: list[str] = []
    started = time.monotonic()
    cpu_before = cpu_stat(cgroup)
    next_rss = started
    next_read = started if args.summary_every > 0 else float("inf")
    end = started + args.seconds
    while (now := time.monotonic()) < end:
        if now >= next_rss:
            rss.append(rss_kib(pid))
            next_rss += RSS_EVERY
        if now >= next_read:
            try:
                reads.append(get(f"{base}/stats/summary", context))
            except OSError as e:
                errors.append(str(e))
            next_read += args.summary_every
        time.sleep(max(0.0, min(next_rss, next_read, end) - time.monotonic()))
    cpu_after = cpu_stat(cgroup)
    elapsed = time.monotonic() - started
    metrics_after = housekeeping_metrics(f"{base}/metrics", context)

    result = {
        "unit": args.unit,
        "pid": pid,
        "seconds": elapsed,
        "cpu_usec": cpu_after["usage_usec"] - cpu_before["usage_usec"],
        "user_usec": cpu_after["user_usec"] - cpu_before["user_usec"],
        "system_usec": cpu_after["system_usec"] - cpu_before["system_usec"],
        "rss_kib": rss,
        "summary_reads": len(reads),
        "summary_seconds": [round(s, 4) for s, _ in reads],
        "summary_bytes": reads[-1][1] if reads else 0,
        "summary_errors": errors,
        "housekeeping": {
            key: metrics_after.get(key, 0.0) - metrics_before.get(key, 0.0)
            for key in ("duration_seconds_count", "duration_seconds_sum", "cpu_seconds_total")
        }
        if metrics_after
        else {},
        "cgroups": metrics_after.get("cgroups"),
        "guest_loadavg": loadavg(),
    }
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
