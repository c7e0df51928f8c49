"""An in-memory conntrack table of UDP flows for the proxy's cleanup (see
:mod:`nodeagent.proxy.conntrack`): tests add flows and read which ones were deleted."""

from __future__ import annotations

from dataclasses import dataclass

from nodeagent.nft.objects import Family


@dataclass(frozen=True, slots=True)
class Flow:
    family: Family
    orig_dst: str
    orig_port: int
    nat_dst: str
    """Where the answer comes from: the endpoint if DNATed, else ``orig_dst`` itself."""


class FakeConntrack:
    def __init__(self) -> None:
        self.flows: set[Flow] = set()
        self.calls: list[dict[str, object]] = []

    async def clear_udp(
        self,
        *,
        family: Family,
        orig_dst: str | None = None,
        orig_port: int | None = None,
        nat_dst: str | None = None,
        reply_src: str | None = None,
    ) -> int:
        call: dict[str, object] = {"family": family, "orig_dst": orig_dst, "orig_port": orig_port}
        call |= {"nat_dst": nat_dst, "reply_src": reply_src}
        self.calls.append(call)
        gone = {
            f
            for f in self.flows
            if f.family == family
            and orig_dst in (None, f.orig_dst)
            and orig_port in (None, f.orig_port)
            and nat_dst in (None, f.nat_dst)
            and reply_src in (None, f.nat_dst)
        }
        self.flows -= gone
        return len(gone)
