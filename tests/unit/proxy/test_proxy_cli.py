"""``nodeagent proxy services`` and ``nodeagent proxy trace`` over a captured kernel listing."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

from nodeagent.nft.listing import table_state
from nodeagent.nft.objects import Family
from nodeagent.nft.state import TableState
from nodeagent.proxy import cli

LISTING = Path(__file__).parent / "data" / "ruleset-nft-1.0.6.json"


async def kernel(family: Family, table: str) -> TableState | None:
    return table_state(json.loads(LISTING.read_text()), family=family, table=table)


async def no_table(family: Family, table: str) -> TableState | None:
    return None


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return parser.parse_args(["proxy", *argv])


def test_services_prints_each_entry_with_its_chain_and_endpoints() -> None:
    out = io.StringIO()
    code = cli.run_services(parse("services"), out=out, read=kernel)

    assert code == 0
    lines = [" ".join(line.split()) for line in out.getvalue().splitlines()]
    assert lines == [
        "SERVICE ENTRY CHAIN ENDPOINTS",
        "default/dns:dns/udp 10.96.0.12:53/udp cluster-1 (affinity 10800s) 10.244.1.2:5353",
        "default/empty:http 10.96.0.11:80/tcp reject (no endpoints) -",
        "default/web:http *:30080/tcp (nodeport) nodeport-local-1-of-2"
        " local: 10.244.1.1:8080; pods and node: 10.244.1.1:8080 10.244.2.1:8080",
        "default/web:http 10.96.0.10:80/tcp cluster-2 10.244.1.1:8080 10.244.2.1:8080",
        "default/web:http 198.51.100.10:80/tcp external-local-1-of-2"
        " local: 10.244.1.1:8080; pods and node: 10.244.1.1:8080 10.244.2.1:8080",
    ]


def test_trace_prints_the_path_and_the_verdict() -> None:
    out = io.StringIO()
    args = parse("trace", "--src", "203.0.113.7", "--dst", "10.96.0.11", "--dport", "80")

    assert cli.run_trace(args, out=out, read=kernel) == 0

    text = out.getvalue()
    assert text.startswith("tcp 203.0.113.7 -> 10.96.0.11:80\n")
    assert "service-endpoints-check: ip daddr . meta l4proto . th dport vmap" in text
    assert text.endswith("REJECT\n")


def test_without_the_table_the_commands_say_so() -> None:
    err = io.StringIO()
    assert cli.run_services(parse("services"), err=err, read=no_table) == 1
    assert "no table ip nodeagent; is the agent running?" in err.getvalue()
