"""Forgetting stale UDP flows: conntrack keeps a UDP "connection" DNATed to the endpoint chosen
for its first packet, so when that endpoint goes away the flow must be deleted or its packets
keep going to a dead address; and flows to a service address from before it had endpoints must
be deleted so the next packet is load-balanced. (TCP needs none of this: a dead endpoint resets
or times out and the client reconnects.) :class:`ConntrackTool` runs Debian's ``conntrack``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from nodeagent.errors import AgentError
from nodeagent.nft.objects import Family
from nodeagent.nft.runner import Exec, subprocess_exec

_DELETED = re.compile(r"(\d+) flow entries have been deleted")


class ConntrackError(AgentError):
    """The conntrack tool failed."""


class Conntrack(Protocol):
    async def clear_udp(
        self,
        *,
        family: Family,
        orig_dst: str | None = None,
        orig_port: int | None = None,
        nat_dst: str | None = None,
        reply_src: str | None = None,
    ) -> int:
        """Delete the UDP flows matching every given filter; return how many were deleted.

        ``reply_src`` equal to ``orig_dst`` selects the flows that were *not* DNATed (their
        answer would come from the address itself): the ones created while an entry had no
        endpoints, and never one load-balanced after the rules that serve it went in."""
        ...


class ConntrackTool:
    def __init__(self, *, argv: Sequence[str] = ("conntrack",), exec_: Exec = subprocess_exec):
        self._argv = tuple(argv)
        self._exec = exec_

    async def clear_udp(
        self,
        *,
        family: Family,
        orig_dst: str | None = None,
        orig_port: int | None = None,
        nat_dst: str | None = None,
        reply_src: str | None = None,
    ) -> int:
        argv = [*self._argv, "-D", "-p", "udp", "-f", "ipv6" if family == "ip6" else "ipv4"]
        if orig_dst:
            argv += ["--orig-dst", orig_dst]
        if orig_port:
            argv += ["--orig-port-dst", str(orig_port)]
        if nat_dst:
            argv += ["--dst-nat", nat_dst]
        if reply_src:
            argv += ["--reply-src", reply_src]
        try:
            result = await self._exec(argv, b"")
        except OSError as e:
            raise ConntrackError(f"cannot run {argv[0]}: {e.strerror or e}") from e
        text = (result.stderr + result.stdout).decode(errors="replace")
        m = _DELETED.search(text)
        if m is None:  # exit 1 with "0 flow entries" is the normal "nothing to delete"
            raise ConntrackError(f"{' '.join(argv)} failed: {text.strip()[:500]}")
        return int(m.group(1))
