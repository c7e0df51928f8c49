"""``nodeagent shutdown plan``: what a node shutdown would do to the pods on this node now.

For each group of ``shutdownGracePeriodByPodPriority`` (or the legacy pair), lowest priority
first: its budget and its pods, each with the grace it would get (the smaller of its own and the
group's) and a warning when the group cuts its own grace; then the total against logind's
``InhibitDelayMaxSec``. The pods come from the API server (this node's, with the agent's
kubeconfig), or from ``--pods FILE`` (a PodList as ``kubectl get pods -o json`` prints; ``-``:
stdin). logind is asked over the system bus; without one the limit is shown as unknown.
Exit 0; 1 when the pods cannot be read; 2 for an invalid configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import msgspec

from nodeagent import config, hostinfo
from nodeagent.apiserver import PODS, ApiClient, ApiError
from nodeagent.apiserver.kubeconfig import load_kubeconfig
from nodeagent.errors import ConfigError
from nodeagent.logind import DbusLogind, LogindError
from nodeagent.nodeshutdown.policy import plan, render_plan, shutdown_groups
from nodeagent.podspec import Pod, decode_checked_pod

EXIT_OK = 0
EXIT_NO_PODS = 1
EXIT_INVALID = 2
TERMINAL = frozenset({"Succeeded", "Failed"})


def register(sub: Any) -> None:
    parser = sub.add_parser("shutdown", help="graceful node shutdown")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    plan_parser = actions.add_parser(
        "plan", help="show which shutdown group each pod on this node falls into"
    )
    plan_parser.add_argument(
        "--pods",
        metavar="FILE",
        help="read the pods from a PodList JSON file ('-' for stdin) instead of the API server",
    )
    config.add_flags(plan_parser)
    plan_parser.set_defaults(func=run)


def run(args: argparse.Namespace, *, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    try:
        cfg = config.resolve(args)
    except ConfigError as e:
        print(f"nodeagent: invalid configuration: {e}", file=err)
        return EXIT_INVALID
    groups = shutdown_groups(cfg.kubelet)
    try:
        objects = _read_pods(args.pods) if args.pods else asyncio.run(_api_pods(cfg))
    except (OSError, ValueError, ApiError) as e:
        print(f"nodeagent: cannot read the node's pods: {e}", file=err)
        return EXIT_NO_PODS
    pods = _decode(objects, err)
    limit = asyncio.run(_inhibit_delay_max()) if groups else None
    out.write(render_plan(plan(groups, pods), inhibit_delay_max=limit))
    return EXIT_OK


def _read_pods(path: str) -> list[dict[str, Any]]:
    if path == "-":
        text = sys.stdin.read()
    else:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    obj = json.loads(text)
    items = obj.get("items", []) if isinstance(obj, dict) and "items" in obj else [obj]
    return [i for i in items if isinstance(i, dict)]


async def _api_pods(cfg: config.Config) -> list[dict[str, Any]]:
    node = (cfg.node.hostname_override or hostinfo.hostname()).strip().lower()
    client = ApiClient(endpoint=load_kubeconfig(cfg.node.kubeconfig))
    try:
        listed = await client.list(PODS, field_selector=f"spec.nodeName={node}")
    finally:
        await client.aclose()
    return list(listed.items)


def _decode(objects: Sequence[dict[str, Any]], err: TextIO) -> list[Pod]:
    pods = []
    for obj in objects:
        try:
            pod = decode_checked_pod(obj)
        except msgspec.ValidationError as e:
            meta = obj.get("metadata") or {}
            print(f"skipping pod {meta.get('namespace')}/{meta.get('name')}: {e}", file=err)
            continue
        if pod.status.get("phase") not in TERMINAL and not pod.is_mirror:
            pods.append(pod)
    return pods


async def _inhibit_delay_max() -> float | None:
    logind = DbusLogind()
    try:
        await logind.connect()
        return await logind.inhibit_delay_max()
    except LogindError:
        return None
    finally:
        logind.close()
