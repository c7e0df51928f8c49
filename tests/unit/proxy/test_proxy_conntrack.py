"""Stale UDP flows are deleted with Debian's conntrack tool; "nothing to delete" is no error."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from nodeagent.nft.runner import ExecResult
from nodeagent.proxy.conntrack import ConntrackError, ConntrackTool


class Scripted:
    def __init__(self, result: ExecResult) -> None:
        self.result = result
        self.argv: list[str] = []

    async def __call__(self, argv: Sequence[str], stdin: bytes) -> ExecResult:
        self.argv = list(argv)
        return self.result


async def test_flows_to_a_gone_endpoint_are_deleted_by_service_and_endpoint() -> None:
    run = Scripted(
        ExecResult(
            0, b"", b"conntrack v1.4.7 (conntrack-tools): 2 flow entries have been deleted.\n"
        )
    )
    tool = ConntrackTool(argv=("ip", "netns", "exec", "n1", "conntrack"), exec_=run)

    deleted = await tool.clear_udp(
        family="ip", orig_dst="10.96.0.10", orig_port=53, nat_dst="10.244.1.1"
    )

    assert deleted == 2
    assert run.argv == [
        "ip", "netns", "exec", "n1", "conntrack", "-D", "-p", "udp", "-f", "ipv4",
        "--orig-dst", "10.96.0.10", "--orig-port-dst", "53", "--dst-nat", "10.244.1.1",
    ]  # fmt: skip


async def test_nothing_to_delete_is_not_an_error() -> None:
    run = Scripted(
        ExecResult(
            1, b"", b"conntrack v1.4.7 (conntrack-tools): 0 flow entries have been deleted.\n"
        )
    )
    assert await ConntrackTool(exec_=run).clear_udp(family="ip6", orig_port=30053) == 0
    assert run.argv[4:6] == ["-f", "ipv6"]


async def test_a_failing_tool_is_a_conntrack_error() -> None:
    run = Scripted(
        ExecResult(
            1, b"", b"conntrack v1.4.7 (conntrack-tools): Operation failed: invalid parameters\n"
        )
    )
    with pytest.raises(ConntrackError, match="invalid parameters"):
        await ConntrackTool(exec_=run).clear_udp(family="ip", orig_dst="10.96.0.10")


async def test_flows_that_were_not_dnated_are_chosen_by_their_reply_source() -> None:
    run = Scripted(
        ExecResult(
            0, b"", b"conntrack v1.4.7 (conntrack-tools): 1 flow entries have been deleted.\n"
        )
    )

    deleted = await ConntrackTool(exec_=run).clear_udp(
        family="ip", orig_dst="10.96.0.10", orig_port=53, reply_src="10.96.0.10"
    )

    assert deleted == 1
    assert run.argv[-6:] == [
        "--orig-dst", "10.96.0.10", "--orig-port-dst", "53", "--reply-src", "10.96.0.10",
    ]  # fmt: skip
