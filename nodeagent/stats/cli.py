"""``nodeagent stats summary`` and ``nodeagent stats cadvisor``: the node's stats without the
kubelet API.

Both open their own CRI connection and read the cgroups themselves (two samples one second
apart, so ``usageNanoCores`` is there), so they work on a node whose agent is not serving the
kubelet API (standalone, or before TLS bootstrap). ``summary`` prints the ``/stats/summary``
JSON; ``cadvisor`` the ``/metrics/cadvisor`` text. Exit codes: 0 ok, 1 the runtime is not
reachable.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from nodeagent import cgroups
from nodeagent.clock import RealClock
from nodeagent.kuberuntime import CriError
from nodeagent.kuberuntime.endpoint import DEFAULT_ENDPOINT
from nodeagent.kuberuntime.negotiate import connect
from nodeagent.stats.housekeeping import CgroupStats
from nodeagent.stats.summary import host_stats_provider

EXIT_OK = 0
EXIT_NO_RUNTIME = 1
SAMPLE_GAP = 1.0


def register(sub: Any) -> None:
    parser = sub.add_parser("stats", help="print the node's stats (Summary API, cAdvisor)")
    commands = parser.add_subparsers(dest="stats_command", metavar="SUBCOMMAND", required=True)
    for name, help_text in (
        ("summary", "print /stats/summary (JSON, with PSI on cgroup v2)"),
        ("cadvisor", "print /metrics/cadvisor (Prometheus text, cgroup v2 only)"),
    ):
        p = commands.add_parser(name, help=help_text)
        p.add_argument("--runtime-endpoint", default=DEFAULT_ENDPOINT)
        p.add_argument("--node-name", default="")
        p.add_argument("--root-dir", default="/var/lib/nodeagent", help="the nodefs path")
        p.set_defaults(func=run_stats, what=name)


def run_stats(args: argparse.Namespace) -> int:
    return asyncio.run(_stats(args))


async def _stats(args: argparse.Namespace) -> int:
    from nodeagent import hostinfo

    try:
        runtime = await connect(args.runtime_endpoint)
    except CriError as e:
        print(
            f"nodeagent stats: container runtime at {args.runtime_endpoint}: {e}", file=sys.stderr
        )
        return EXIT_NO_RUNTIME
    try:
        clock = RealClock()
        v2 = cgroups.host_cgroup_fs() == "cgroup2"
        sampler = CgroupStats(clock=clock, enabled=v2)
        provider = host_stats_provider(
            runtime=runtime,
            clock=clock,
            node_name=args.node_name or hostinfo.hostname(),
            fs_path=args.root_dir,
            cgroups=sampler,
            image_fs=runtime.image_fs_info,
        )
        if v2:
            await sampler.housekeeping()
            await asyncio.sleep(SAMPLE_GAP)
            await sampler.housekeeping()
        if args.what == "cadvisor":
            sys.stdout.write(await provider.cadvisor())
        else:
            json.dump(await provider.summary(), sys.stdout, indent=2)
            sys.stdout.write("\n")
    finally:
        await runtime.close()
    return EXIT_OK
