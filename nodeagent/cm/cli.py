"""``nodeagent swap report``: per container, the swap limit the agent decided and what its
cgroup says.

The agent writes each container's decision to ``<rootDir>/swap-state.json`` (behavior, the
memory request and limit, node memory and swap capacity, the value sent as CRI
``unified["memory.swap.max"]`` and why). This command joins it with the runtime's running
containers (CRI ``ListContainers``; ``ContainerStatus`` verbose for the process and for the
value the runtime was given) and reads ``memory.swap.max`` back from each container's cgroup
(through ``/proc/<pid>/cgroup``). ``--json`` prints the rows as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from nodeagent import config
from nodeagent.cm.manager import SWAP_STATE_FILE
from nodeagent.errors import ConfigError
from nodeagent.kuberuntime import labels
from nodeagent.kuberuntime.errors import CriError
from nodeagent.kuberuntime.remote import CriClient
from nodeagent.kuberuntime.resources import SWAP_MAX_FILE

EXIT_OK = 0
EXIT_NO_STATE = 1
EXIT_INVALID = 2
EXIT_RUNTIME = 3
CG = Path("/sys/fs/cgroup")
COLUMNS = (
    ("POD", "pod"),
    ("CONTAINER", "container"),
    ("QOS", "qos"),
    ("BEHAVIOR", "behavior"),
    ("REQUEST", "request"),
    ("LIMIT", "memory_limit"),
    ("MEM-CAPACITY", "memory_capacity"),
    ("SWAP-CAPACITY", "swap_capacity"),
    ("SENT", "sent"),
    ("RUNTIME", "runtime"),
    ("CGROUP", "cgroup"),
    ("REASON", "reason"),
)


def register(sub: Any) -> None:
    swap = sub.add_parser("swap", help="swap limits of the node's containers")
    swap_sub = swap.add_subparsers(dest="swap_command", metavar="COMMAND", required=True)
    report = swap_sub.add_parser(
        "report", help="per container: request, formula inputs, value sent, value in its cgroup"
    )
    report.add_argument("--json", action="store_true", help="print the rows as JSON")
    config.add_flags(report)
    report.set_defaults(func=run)


def cgroup_of(proc_pid_cgroup: str) -> str | None:
    for line in proc_pid_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def read_back(pid: int, *, proc: Path = Path("/proc"), mount: Path = CG) -> str | None:
    try:
        path = cgroup_of((proc / str(pid) / "cgroup").read_text())
        if path is None:
            return None
        return (mount / path.lstrip("/") / SWAP_MAX_FILE).read_text().strip()
    except OSError:
        return None


def rows(state: dict[str, Any], running: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``running``: ``{"uid", "container", "id", "runtime", "cgroup"}`` per running container."""
    out = []
    for c in running:
        pod = state.get("pods", {}).get(c["uid"])
        if pod is None:
            continue
        decision = pod.get("containers", {}).get(c["container"])
        if decision is None:
            continue
        limit = decision.get("limit")
        out.append(
            {
                "pod": f"{pod['namespace']}/{pod['name']}",
                "container": c["container"],
                "container_id": c["id"],
                "qos": pod.get("qos", ""),
                "behavior": decision.get("behavior", ""),
                "request": decision.get("request", 0),
                "memory_limit": decision.get("memory_limit", 0),
                "memory_capacity": decision.get("memory_capacity", 0),
                "swap_capacity": decision.get("swap_capacity", 0),
                "sent": "-" if limit is None else str(limit),
                "runtime": c.get("runtime") or "-",
                "cgroup": c.get("cgroup") or "-",
                "reason": decision.get("reason", ""),
            }
        )
    return sorted(out, key=lambda r: (r["pod"], r["container"]))


def render(table: list[dict[str, Any]]) -> str:
    cells = [[h for h, _ in COLUMNS]] + [[str(r[k]) for _, k in COLUMNS] for r in table]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS) - 1)]
    lines = []
    for row in cells:
        head = "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=False))
        lines.append(f"{head}  {row[-1]}")
    return "\n".join(lines) + "\n"


def _info(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


async def _running(endpoint: str) -> list[dict[str, Any]]:
    client = CriClient.open(endpoint)
    try:
        out = []
        for c in await client.list_containers():
            if c.state != 1:  # CONTAINER_RUNNING
                continue
            status = await client.container_status(c.id, verbose=True)
            info = _info(status.info.get("info", "{}"))
            pid = info.get("pid")
            spec = info.get("runtimeSpec") or {}
            unified = ((spec.get("linux") or {}).get("resources") or {}).get("unified") or {}
            out.append(
                {
                    "uid": c.labels.get(labels.POD_UID, ""),
                    "container": c.labels.get(labels.CONTAINER_NAME, ""),
                    "id": c.id[:13],
                    "runtime": unified.get(SWAP_MAX_FILE),
                    "cgroup": await asyncio.to_thread(read_back, pid)
                    if isinstance(pid, int)
                    else None,
                }
            )
        return out
    finally:
        await client.close()


def run(args: argparse.Namespace, *, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    try:
        cfg = config.resolve(args)
    except ConfigError as e:
        print(f"nodeagent: invalid configuration: {e}", file=err)
        return EXIT_INVALID
    path = Path(cfg.node.root_dir) / SWAP_STATE_FILE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        print(
            f"nodeagent: no swap state at {path} ({getattr(e, 'strerror', None) or e}); "
            "is the agent running with this rootDir?",
            file=err,
        )
        return EXIT_NO_STATE
    try:
        running = asyncio.run(_running(cfg.kubelet.container_runtime_endpoint))
    except CriError as e:
        print(f"nodeagent: cannot list containers: {e}", file=err)
        return EXIT_RUNTIME
    table = rows(state, running)
    if args.json:
        out.write(json.dumps(table, indent=2) + "\n")
    else:
        out.write(render(table))
    return EXIT_OK
