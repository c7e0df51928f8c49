"""``nodeagent proxy services`` and ``nodeagent proxy trace``: read the proxy's table back.

Both read our table from the kernel (``nft -j list table <family> nodeagent``), so they show
what is programmed, not what the agent meant to program. ``trace`` walks one new connection
through it and prints every rule that fired, the verdict, the endpoint and whether it is
masqueraded; by default the node's addresses are the table's ``nodeport-ips``.
Exit codes: 0 ok, 1 no table (is the agent running?), 2 bad arguments or unreadable rules.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import sys
from collections.abc import Callable, Coroutine
from dataclasses import asdict
from typing import Any, TextIO

from nodeagent.nft.errors import NftError
from nodeagent.nft.objects import Family
from nodeagent.nft.runner import NFTables
from nodeagent.nft.state import TableState
from nodeagent.proxy import inspect
from nodeagent.proxy.layout import NODEPORT_IPS
from nodeagent.proxy.settings import TABLE
from nodeagent.proxy.tracer import TraceError, Tracer

EXIT_OK = 0
EXIT_NO_TABLE = 1
EXIT_INVALID = 2

Reader = Callable[[Family, str], Coroutine[Any, Any, TableState | None]]


async def read_kernel(family: Family, table: str) -> TableState | None:
    return await NFTables(family=family, table=table).ruleset()


def register(sub: Any) -> None:
    parser = sub.add_parser("proxy", help="inspect the service proxy's nftables rules")
    commands = parser.add_subparsers(dest="proxy_command", metavar="SUBCOMMAND", required=True)

    services = commands.add_parser("services", help="print service -> entry -> chain -> endpoints")
    services.add_argument("--family", choices=("ip", "ip6"), default="ip")
    services.add_argument("--table", default=TABLE)
    services.add_argument("--json", action="store_true", help="print the rows as JSON")
    services.set_defaults(func=run_services)

    trace = commands.add_parser("trace", help="walk a packet through the rules")
    trace.add_argument("--src", required=True, help="source address")
    trace.add_argument("--dst", required=True, help="destination address")
    trace.add_argument("--dport", required=True, type=int, help="destination port")
    trace.add_argument("--proto", choices=("tcp", "udp", "sctp"), default="tcp")
    trace.add_argument("--local", action="store_true", help="the node itself sends the packet")
    trace.add_argument(
        "--node-ip", action="append", default=[], help="a local address (default: nodeport-ips)"
    )
    trace.add_argument("--table", default=TABLE)
    trace.set_defaults(func=run_trace)


def run_services(
    args: argparse.Namespace,
    *,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    read: Reader = read_kernel,
) -> int:
    state, code = _read(read, args.family, args.table, err)
    if state is None:
        return code
    rows = inspect.service_table(state)
    if args.json:
        out.write(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    else:
        out.write(inspect.render(rows))
    return EXIT_OK


def run_trace(
    args: argparse.Namespace,
    *,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    read: Reader = read_kernel,
) -> int:
    try:
        dst = ipaddress.ip_address(args.dst)
        ipaddress.ip_address(args.src)
    except ValueError as e:
        print(f"nodeagent proxy trace: {e}", file=err)
        return EXIT_INVALID
    family: Family = "ip6" if dst.version == 6 else "ip"
    state, code = _read(read, family, args.table, err)
    if state is None:
        return code
    local = args.node_ip or [el.key[0] for el in state.elements(NODEPORT_IPS)]
    try:
        trace = Tracer(state, local_ips=local).trace(
            src=args.src, dst=args.dst, proto=args.proto, dport=args.dport, local=args.local
        )
    except TraceError as e:
        print(f"nodeagent proxy trace: {e}", file=err)
        return EXIT_INVALID
    out.write(f"{args.proto} {args.src} -> {args.dst}:{args.dport}")
    out.write(" (sent by this node)\n" if args.local else "\n")
    out.write(trace.render())
    return EXIT_OK


def _read(read: Reader, family: Family, table: str, err: TextIO) -> tuple[TableState | None, int]:
    try:
        state: TableState | None = asyncio.run(read(family, table))
    except NftError as e:
        print(f"nodeagent proxy: cannot read the rules: {e}", file=err)
        return None, EXIT_INVALID
    if state is None:
        print(f"nodeagent proxy: no table {family} {table}; is the agent running?", file=err)
        return None, EXIT_NO_TABLE
    return state, EXIT_OK
