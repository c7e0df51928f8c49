"""``kubectl logs -f`` line latency with nodeagent and the kubelet as nodes at once.

    PYTHONPATH=tests .venv/bin/python bench/logs_paths.py [--lines 100] [--pods 30]
        [--nodes nodeagent,kubelet] [--rounds 1]

``exec_paths``' harness (one control plane, every node at the same time on its own
containerd, ``--pods`` pods each with one ``ticker`` writing ``tick <n>`` every 200 ms), so the
load of the shared machine falls on all nodes alike; ``kubelet_api`` runs its nodes one after
the other, at whatever load each half meets. Per node and round, three followers of the ticker
at the same time, all nodes' at once: a discarding ``kubectl logs -f``, a timed ``kubectl logs
-f --timestamps --tail=1`` and a timed follower straight to the node's ``/containerLogs`` (no
apiserver, no kubectl). A line's latency is its arrival at this process minus the CRI timestamp
containerd wrote (same host, same clock). Prints p50 / p90 / p99 / max (ms) per node and path,
all rounds pooled, and the load meanwhile.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import exec_paths as xp
import kubelet_api as ka
import node_measure as m
import pod_api
import pod_startup as ps
from harness import netsafety
from harness.build import binaries
from harness.containerd import unmount_and_remove
from harness.hoststate import HostState
from node_idle import machine, say, versions_line


def follow_node(
    bench: xp.PathsBench, node: ps.Node, port: int, lines: int, out: dict[str, list[float]]
) -> None:
    """One round on one node: the three followers at once, ``lines`` timed lines each."""
    direct: list[tuple[float, str]] = []
    with (
        bench.follower(node.namespace, timed=False),
        bench.direct_follower(node.namespace, port, direct, lines + 1),
    ):
        timed = bench.follow(node.namespace, lines + 1)[1:]  # the first is --tail=1's old line
    via, in_order = ka.latencies(timed)
    straight, _ = ka.latencies(direct[1:])
    out["kubectl"] += via
    out["direct"] += straight
    if not in_order:
        out.setdefault("out of order", []).append(1.0)


def _ms(values: list[float]) -> str:
    s = sorted(values)
    return " / ".join(f"{1000 * pod_api.percentile(s, p):.2f}" for p in (50, 90, 99, 100))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=100, help="timed lines per round and node")
    parser.add_argument("--pods", type=int, default=30, help="pods per node (one the ticker)")
    parser.add_argument("--nodes", default="nodeagent,kubelet")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--settle", type=float, default=15.0, help="seconds after Running")
    args = parser.parse_args(argv)
    args.node_name, args.verbosity, args.timeout = False, 0, 300.0
    labels = args.nodes.split(",")
    bins = binaries()
    kubelet = bins.path("kubelet")
    work = Path(tempfile.mkdtemp(prefix="na-logs-"))
    log_dir = work / "logs"
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    host = HostState.snapshot()  # the kubelet's canary tables, sysctls, cgroups
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(netsafety.unreachable_routes())
            plane = stack.enter_context(ps.control_plane(bins, log_dir=log_dir))
            bench = xp.PathsBench(
                plane=plane, kubelet=kubelet, work=work, log_dir=log_dir, args=args
            )
            bench.ports = {}
            nodes: dict[str, ps.Node] = {}
            for n, label in enumerate(labels):
                bench.label, bench.work = label, work / str(n)  # short: containerd's socket
                nodes[label] = stack.enter_context(bench.node(label.split("-")[0], ps.Result()))
            for node in nodes.values():
                bench.start_pods(node)
            say(f"all pods Running; settling {args.settle:g} s")
            time.sleep(args.settle)
            results: dict[str, dict[str, list[float]]] = {
                label: {"kubectl": [], "direct": []} for label in labels
            }
            loads: list[float] = []
            for r in range(args.rounds):
                loads.append(os.getloadavg()[0])
                say(f"round {r + 1}/{args.rounds}: {args.lines} lines a node, load {loads[-1]:.2f}")
                threads = [
                    threading.Thread(
                        target=follow_node,
                        args=(bench, nodes[label], bench.ports[label], args.lines, results[label]),
                    )
                    for label in labels
                ]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                loads.append(os.getloadavg()[0])
            print("| node | path | lines | p50 / p90 / p99 / max (ms) |")
            print("|---|---|---|---|")
            for label, got in results.items():
                for path in ("kubectl", "direct"):
                    print(f"| {label} | {path} | {len(got[path])} | {_ms(got[path])} |")
                if "out of order" in got:
                    say(f"{label}: lines out of order or lost in {len(got['out of order'])} rounds")
            for label, node in nodes.items():
                rss = m.sample(node.proc.pid, now=time.time()).rss_kib / 1024
                say(f"{label}: RSS {rss:.1f} MiB")
            say(
                "load (1 min) at each round's start and end: "
                + ", ".join(f"{x:.2f}" for x in loads)
            )
            say(f"started {started}; {versions_line(kubelet)}")
            say(", ".join(f"{k}: {v}" for k, v in machine().items()))
    finally:
        host.restore()
        unmount_and_remove(work)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
