"""The upgrade-aware proxy's pure parts: the runtime's response head, and how each request is
carried (spliced, translated, tunneled) as the kubelet decides it."""

from __future__ import annotations

import pytest

from nodeagent.server.upgradeaware import Plan, StreamOptions, parse_head, plan


def test_parse_head() -> None:
    status, reason, headers = parse_head(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: SPDY/3.1\r\nX-A: 1\r\nX-A: 2"
    )
    assert (status, reason, headers["upgrade"], headers.getall("x-a")) == (
        101,
        "Switching Protocols",
        "SPDY/3.1",
        ["1", "2"],
    )
    with pytest.raises(ValueError, match="malformed status line"):
        parse_head(b"nonsense")


WS = {"Upgrade": "websocket"}
IN = StreamOptions(stdin=True, stdout=True, stderr=False, tty=True)
OUT = StreamOptions(stdin=False, stdout=True, stderr=True, tty=False)


@pytest.mark.parametrize(
    ("headers", "offered", "opts", "websockets", "want"),
    [
        ({"Upgrade": "SPDY/3.1"}, [], OUT, True, (Plan.SPLICE, [])),
        (WS, ["v4.channel.k8s.io"], OUT, True, (Plan.SPLICE, [])),
        (WS, ["v5.channel.k8s.io"], OUT, True, (Plan.V5_AS_V4, ["v4.channel.k8s.io"])),
        (WS, ["v5.channel.k8s.io"], IN, True, (Plan.TRANSLATE, ["v4.channel.k8s.io"])),
        (WS, ["v5.channel.k8s.io"], IN, False, (Plan.SPLICE, [])),
        (WS, ["SPDY/3.1+portforward.k8s.io"], None, True, (Plan.TUNNEL, ["portforward.k8s.io"])),
        (WS, ["v4.channel.k8s.io"], None, True, (Plan.SPLICE, [])),
        (WS, ["SPDY/3.1+portforward.k8s.io"], None, False, (Plan.SPLICE, [])),
    ],
)
def test_plan_follows_the_kubelet(
    headers: dict[str, str],
    offered: list[str],
    opts: StreamOptions | None,
    websockets: bool,
    want: tuple[str, list[str]],
) -> None:
    assert plan(headers, offered, opts, websockets=websockets) == want
