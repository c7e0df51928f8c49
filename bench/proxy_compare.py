"""Service proxy vs kube-proxy: nodeagent's proxy and the reference kube-proxy (nftables mode)
on one control plane, same Services and EndpointSlices, each in its own network namespace.

    PYTHONPATH=tests .venv/bin/python bench/proxy_compare.py [--sizes 1000,5000,10000]
        [--endpoints 5] [--changes 10] [--repeat 1] [--only kube-proxy|nodeagent]
        [--markdown | --json] [--keep-logs DIR]

Starts the harness control plane, creates one Node (``proxy-bench-node``, InternalIP
198.51.100.1) and, for each size in increasing order, brings the cluster to N selector-less
ClusterIP Services with one EndpointSlice each (E ready endpoints in 10.244.0.0/16 on that
node), created concurrently over one HTTP/2 connection. Then, per component (``--repeat``
times), in a fresh netns (`tests/harness/netns.py`; the apiserver forwarded to its 127.0.0.1):

  (a) start -> first sync applied: from exec to the component's own last-sync timestamp; its
      own duration of that sync and its CPU seconds (children included) alongside;
  (b) one EndpointSlice changed (one endpoint replaced by a new address, through the API, with
      the ``last-change-trigger-time`` annotation) -> the new address in a committed nft
      object, seen on the namespace's nf_tables netlink event group; median / max over
      ``--changes``, ``--gap`` seconds apart; the component's own ``network_programming`` too;
  (c) VmRSS after the changes, and VmHWM.

Floor: ``nft -f`` of nodeagent's own first-sync scripts into an empty namespace (median of
``--floor-runs``). Everything (processes, namespaces with their tables, the control plane with
every API object) is removed at the end, on error, Ctrl-C or SIGTERM. Needs root and the
reference kube-proxy (``PYTHONPATH=tests .venv/bin/python -m harness build --peers``).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import hashlib
import json
import os
import platform
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import proxy_compare_report as report
from harness.build import binaries
from harness.controlplane import (
    ControlPlane,
    new_run_dir,
    start_control_plane,
    sweep_stale_run_dirs,
)
from harness.netns import NODE_IP, sweep_stale
from proxy_compare_run import NAMESPACE, NODE, ObjectMaker, RunSettings, floor, run_component

from nodeagent.apiserver import ApiClient, load_kubeconfig
from nodeagent.apiserver.resources import NAMESPACES, NODES

COMPONENTS = ("kube-proxy", "nodeagent")


def say(message: str) -> None:
    print(f">>> {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


async def prepare_cluster(api: ApiClient) -> None:
    await api.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
    await api.create(NODES, {
        "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}},
        "status": {"addresses": [{"type": "InternalIP", "address": NODE_IP},
                                 {"type": "Hostname", "address": NODE}]},
    })  # fmt: skip


async def bench(args: argparse.Namespace, plane: ControlPlane, work: Path) -> list[dict[str, Any]]:
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    assert main_task is not None
    loop.add_signal_handler(signal.SIGTERM, main_task.cancel)
    api = ApiClient(endpoint=load_kubeconfig(plane.admin_kubeconfig), timeout=60.0)
    rows: list[dict[str, Any]] = []
    try:
        await prepare_cluster(api)
        maker = ObjectMaker(api=api, endpoints=args.endpoints, concurrency=args.concurrency)
        settings = RunSettings(
            plane=plane,
            kube_proxy=binaries().path("kube-proxy"),
            changes=args.changes,
            gap=args.gap,
            sync_timeout=args.timeout,
            say=say,
        )
        for n in sorted(int(s) for s in args.sizes.split(",")):
            created = await maker.ensure(n)
            if created:
                say(f"{n} services: created {created['objects']} objects in "
                    f"{created['seconds']:.1f} s ({created['rate']:.0f}/s)")  # fmt: skip
            for run in range(1, args.repeat + 1):
                for component in args.only or COMPONENTS:
                    say(f"{n} services: {component}, run {run} of {args.repeat}")
                    row = await run_component(component, n, settings=settings, maker=maker,
                                              work=work / f"{component}-{n}-{run}")  # fmt: skip
                    rows.append(row | {"run": run})
                    say(report.progress_line(row))
            if "nodeagent" in (args.only or COMPONENTS):
                scripts = work / f"nodeagent-{n}-1" / "full"
                row = await floor(n, scripts, runs=args.floor_runs)
                rows.append(row)
                say(report.progress_line(row))
    finally:
        await api.aclose()
        loop.remove_signal_handler(signal.SIGTERM)
    return rows


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,5000,10000")
    parser.add_argument("--endpoints", type=int, default=5)
    parser.add_argument("--changes", type=int, default=10, help="endpoint changes per run")
    parser.add_argument("--gap", type=float, default=3.0, help="seconds between changes")
    parser.add_argument("--timeout", type=float, default=1800.0, help="first sync, seconds")
    parser.add_argument("--concurrency", type=int, default=64, help="API creates in flight")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each component per size")
    parser.add_argument("--floor-runs", type=int, default=5)
    parser.add_argument("--only", choices=COMPONENTS, action="append")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep-logs", type=Path, help="copy every component's log here")
    return parser.parse_args(argv)


def _raise_exit(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def proxy_tree() -> str:
    """A digest of the proxy's sources as run (the working tree may be ahead of HEAD), and
    whether they differ from HEAD."""
    root = Path(__file__).resolve().parent.parent
    files = sorted([*root.glob("nodeagent/proxy/*.py"), *root.glob("nodeagent/nft/*.py")])
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:10]
    status = ["git", "status", "--porcelain", "nodeagent/proxy", "nodeagent/nft"]
    dirty = subprocess.run(status, capture_output=True, text=True, check=False, cwd=root).stdout
    return f"sha256:{digest}" + (" (uncommitted changes)" if dirty.strip() else "")


def environment() -> dict[str, Any]:
    nft = subprocess.run(["nft", "--version"], capture_output=True, text=True, check=False)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=False, cwd=Path(__file__).parent)  # fmt: skip
    return {
        "proxy_tree": proxy_tree(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "host": f"{platform.node()} kernel {platform.release()}, {os.cpu_count()} CPUs",
        "nft": nft.stdout.strip(),
        "python": platform.python_version(),
        "commit": head.stdout.strip(),
        "load": Path("/proc/loadavg").read_text().split()[:3],
    }


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_exit)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    kube_proxy = binaries().path("kube-proxy")
    if "kube-proxy" in (args.only or COMPONENTS) and not kube_proxy.exists():
        say(f"no {kube_proxy}: run `PYTHONPATH=tests .venv/bin/python -m harness build --peers`")
        return 2
    stale = sweep_stale() + [str(p) for p in sweep_stale_run_dirs()]
    if stale:
        say(f"removed what dead runs left: {', '.join(stale)}")
    env = environment()
    work = Path(tempfile.mkdtemp(prefix=f"na-pxc-{secrets.token_hex(3)}-"))
    cp_root = new_run_dir()
    try:
        say("starting the control plane")
        plane = start_control_plane(binaries=binaries(), root=cp_root, log_dir=work / "logs")
        try:
            rows = asyncio.run(bench(args, plane, work))
        except asyncio.CancelledError:  # SIGTERM
            say("terminated; cleaning up")
            return 128 + signal.SIGTERM
        except KeyboardInterrupt:
            say("interrupted; cleaning up")
            return 128 + signal.SIGINT
        finally:
            signal.signal(signal.SIGTERM, _raise_exit)  # asyncio left SIG_DFL behind
            plane.stop()
        env["load_end"] = Path("/proc/loadavg").read_text().split()[:3]
        if args.json:
            print(json.dumps({"environment": env, "rows": rows}, indent=2))
        else:
            print(report.render(env, rows, markdown=args.markdown))
    finally:
        if args.keep_logs:
            shutil.copytree(work, args.keep_logs, dirs_exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(cp_root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
