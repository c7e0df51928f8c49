"""``nodeagent status``: what the running agent believes about its node.

Reads ``<rootDir>/node-state.json`` (written by the agent, see :mod:`nodeagent.nodestatus.report`)
and prints conditions, the last Lease renewal, the last status patch and the client certificate's
expiry, with ages. ``--json`` prints the file as is. Exit 0 when the state is there and the
writing agent is alive; 1 when there is no state file; 3 when the agent that wrote it is gone.
The root dir comes from the configuration (``--config``, or ``--root-dir`` like the kubelet).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from nodeagent import config
from nodeagent.errors import ConfigError
from nodeagent.gotext import parse_rfc3339
from nodeagent.nodestatus.report import STATE_FILE

EXIT_OK = 0
EXIT_NO_STATE = 1
EXIT_INVALID = 2
EXIT_STALE = 3


def register(sub: Any) -> None:
    parser = sub.add_parser("status", help="show what the agent believes about its node")
    parser.add_argument("--json", action="store_true", help="print the raw state as JSON")
    config.add_flags(parser)
    parser.set_defaults(func=run)


def run(
    args: argparse.Namespace,
    *,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
) -> int:
    try:
        root = Path(config.resolve(args).node.root_dir)
    except ConfigError as e:
        print(f"nodeagent: invalid configuration: {e}", file=err)
        return EXIT_INVALID
    path = root / STATE_FILE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        print(
            f"nodeagent: no node state at {path} ({getattr(e, 'strerror', None) or e}); "
            "is the agent running with this rootDir?",
            file=err,
        )
        return EXIT_NO_STATE
    if args.json:
        out.write(json.dumps(state, indent=2, sort_keys=True) + "\n")
    else:
        out.write(render(state, now=now(), alive=_alive(state.get("pid"))))
    return EXIT_OK if _alive(state.get("pid")) else EXIT_STALE


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def ago(text: object, now: dt.datetime) -> str:
    """``<time> (5s ago)`` / ``(in 3d)``; ``never`` when absent."""
    t = parse_rfc3339(text)
    if t is None:
        return "never"
    seconds = (now - t).total_seconds()
    span = _span(abs(seconds))
    return f"{text} ({span} ago)" if seconds >= 0 else f"{text} (in {span})"


def _span(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def render(state: dict[str, Any], *, now: dt.datetime, alive: bool) -> str:
    lines = [
        f"Node:          {state.get('node', '?')}  (nodeagent {state.get('agentVersion', '?')}, "
        f"pid {state.get('pid', '?')}{'' if alive else ', NOT RUNNING'})",
        f"State written: {ago(state.get('writtenAt'), now)}",
        f"Kubelet:       {state.get('kubeletVersion') or '?'}  runtime "
        f"{state.get('containerRuntimeVersion') or '?'}",
        "Addresses:     "
        + (
            ", ".join(f"{a.get('type')}={a.get('address')}" for a in state.get("addresses") or [])
            or "none reported"
        ),
        "Conditions:",
    ]
    rows = [("TYPE", "STATUS", "REASON", "SINCE", "MESSAGE")] + [
        (
            str(c.get("type", "")),
            str(c.get("status", "")),
            str(c.get("reason", "")),
            ago(c.get("lastTransitionTime"), now),
            str(c.get("message", "")),
        )
        for c in state.get("conditions") or []
    ]
    if len(rows) == 1:
        lines.append("  none reported yet")
    else:
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines += [
            "  " + "  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4] for r in rows
        ]
    lease = state.get("lease") or {}
    lines.append(
        f"Lease:         {lease.get('name', '-')} renewed {ago(lease.get('renewTime'), now)}"
        + (f", duration {lease.get('leaseDurationSeconds')}s" if lease else "")
    )
    lines.append(f"Status patch:  {ago(state.get('lastStatusReport'), now)}")
    creds = state.get("credentials")
    if creds:
        lines.append(
            f"Credentials:   {creds.get('subject')}, expires {ago(creds.get('notAfter'), now)}"
        )
    else:
        lines.append("Credentials:   no client certificate (token or not yet bootstrapped)")
    return "\n".join(lines) + "\n"
