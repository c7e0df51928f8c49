"""NFTables drives the nft binary: one ``nft -f -`` per transaction, typed errors, JSON reads."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from nodeagent.nft import Chain, Exists, InvalidTransaction, NFTables, NftError, NotFound, Table
from nodeagent.nft.runner import ExecResult

RULESET = Path(__file__).parents[1] / "proxy" / "data" / "ruleset-nft-1.0.6.json"


class ScriptedExec:
    def __init__(self, *results: ExecResult) -> None:
        self.results = list(results)
        self.calls: list[tuple[list[str], bytes]] = []

    async def __call__(self, argv: Sequence[str], stdin: bytes) -> ExecResult:
        self.calls.append((list(argv), stdin))
        return self.results.pop(0)


def ok(stdout: str = "") -> ExecResult:
    return ExecResult(0, stdout.encode(), b"")


def failed(stderr: str) -> ExecResult:
    return ExecResult(1, b"", stderr.encode())


async def test_a_transaction_is_one_nft_run_reading_the_script_from_stdin() -> None:
    run = ScriptedExec(ok())
    nft = NFTables(
        family="ip", table="nodeagent", argv=("ip", "netns", "exec", "n1", "nft"), exec_=run
    )
    tx = nft.new_transaction()
    tx.add(Table())
    tx.add(Chain(name="services"))

    await nft.run(tx)

    assert run.calls == [
        (
            ["ip", "netns", "exec", "n1", "nft", "-f", "-"],
            b"add table ip nodeagent\nadd chain ip nodeagent services\n",
        )
    ]


async def test_check_uses_nft_check_and_empty_transactions_run_nothing() -> None:
    run = ScriptedExec(ok())
    nft = NFTables(family="ip6", table="t", exec_=run)
    await nft.run(nft.new_transaction())
    tx = nft.new_transaction()
    tx.add(Table())
    await nft.check(tx)
    assert [argv for argv, _ in run.calls] == [["nft", "--check", "-f", "-"]]


@pytest.mark.parametrize(
    ("stderr", "error"),
    [
        pytest.param(
            "/dev/stdin:2:1-30: Error: Could not process rule: No such file or directory\n",
            NotFound,
            id="ENOENT is NotFound",
        ),
        pytest.param("Error: Could not process rule: File exists\n", Exists, id="EEXIST is Exists"),
        pytest.param(
            "Error: syntax error, unexpected string\n", NftError, id="others are NftError"
        ),
    ],
)
async def test_nft_failures_raise_typed_errors_with_nfts_message(
    stderr: str, error: type[NftError]
) -> None:
    nft = NFTables(family="ip", table="t", exec_=ScriptedExec(failed(stderr)))
    tx = nft.new_transaction()
    tx.add(Table())
    with pytest.raises(error) as info:
        await nft.run(tx)
    assert stderr.strip() in str(info.value)


async def test_a_latched_validation_error_is_raised_without_running_nft() -> None:
    run = ScriptedExec()
    nft = NFTables(family="ip", table="t", exec_=run)
    tx = nft.new_transaction()
    tx.add(Chain(name="no spaces please"))
    with pytest.raises(InvalidTransaction):
        await nft.run(tx)
    assert run.calls == []


async def test_a_missing_nft_binary_is_an_nft_error() -> None:
    async def missing(argv: Sequence[str], stdin: bytes) -> ExecResult:
        raise FileNotFoundError(2, "No such file or directory")

    nft = NFTables(family="ip", table="t", exec_=missing)
    tx = nft.new_transaction()
    tx.add(Table())
    with pytest.raises(NftError, match="cannot run nft"):
        await nft.run(tx)


async def test_listings_read_our_table_as_json() -> None:
    doc = RULESET.read_text()
    run = ScriptedExec(ok(doc), ok(doc), failed("Error: No such file or directory\n"))
    nft = NFTables(family="ip", table="nodeagent", exec_=run)

    chains = await nft.list_names("chains")
    state = await nft.ruleset()
    assert await nft.ruleset() is None  # the table is gone

    assert "services" in chains
    assert "nodeport-local-1-of-2" in chains
    assert run.calls[0][0] == ["nft", "-j", "-t", "list", "chains", "ip"]
    assert state is not None
    assert {"ip", "nodeagent"} == {state.family, state.name}
    assert state.element("service-ips", ("10.96.0.10", "tcp", "80")) is not None


async def test_elements_of_one_map_are_listed_with_their_values() -> None:
    listing = {
        "nftables": [
            {"metainfo": {"version": "1.0.6"}},
            {
                "map": {
                    "family": "ip",
                    "name": "affinity",
                    "table": "nodeagent",
                    "type": ["ipv4_addr", "ipv4_addr", "inet_proto", "inet_service"],
                    "map": "ipv4_addr . inet_service",
                    "elem": [
                        [
                            {
                                "elem": {
                                    "val": {"concat": ["10.0.0.9", "10.96.0.12", "udp", 53]},
                                    "timeout": 10800,
                                    "expires": 10791,
                                }
                            },
                            {"concat": ["10.244.1.2", 5353]},
                        ]
                    ],
                }
            },
        ]
    }
    nft = NFTables(family="ip", table="nodeagent", exec_=ScriptedExec(ok(json.dumps(listing))))
    [el] = await nft.list_elements("map", "affinity")
    assert el.key == ("10.0.0.9", "10.96.0.12", "udp", "53")
    assert el.value == ("10.244.1.2", "5353")
