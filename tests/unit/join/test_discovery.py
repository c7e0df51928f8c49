"""Discovery asks like kubeadm: retries what may get better, refuses what will not."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from unit.join.join_vectors import (
    CHANGED_KUBECONFIG,
    CHANGED_KUBECONFIG_JWS,
    EC_CA,
    EC_PIN,
    KUBECONFIG,
    KUBECONFIG_JWS,
    TOKEN,
)

from nodeagent.apiserver import Forbidden, Obj, TransportError
from nodeagent.join.discovery import discover
from nodeagent.join.token import JoinError, parse_pins, parse_token

pytestmark = pytest.mark.looptime

SERVER = "https://198.18.0.1:6443"
SIGNED: Obj = {
    "kind": "ConfigMap",
    "data": {"kubeconfig": KUBECONFIG, "jws-kubeconfig-abcdef": KUBECONFIG_JWS},
}
UNSIGNED: Obj = {"kind": "ConfigMap", "data": {"kubeconfig": KUBECONFIG}}


class Answers:
    """A scripted apiserver: each request takes the next answer (an object or an error)."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, bytes | None, float]] = []

    async def __call__(self, server: str, *, ca_pem: bytes | None) -> Obj:
        self.calls.append((server, ca_pem, asyncio.get_running_loop().time()))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)


async def test_pinned_discovery_asks_twice_the_second_time_over_verified_tls() -> None:
    fetch = Answers(SIGNED, SIGNED)
    lines: list[str] = []
    info = await discover(
        server=SERVER,
        token=parse_token(TOKEN),
        pins=parse_pins([EC_PIN]),
        fetch=fetch,
        say=lines.append,
    )
    assert info.server == "https://198.18.0.1:6443"
    assert [(s, ca) for s, ca, _ in fetch.calls] == [
        (SERVER, None),
        (SERVER, EC_CA.encode()),
    ]
    assert any("TLS not verified yet" in line for line in lines)


async def test_unsafe_discovery_asks_once() -> None:
    fetch = Answers(SIGNED)
    info = await discover(server=SERVER, token=parse_token(TOKEN), pins=frozenset(), fetch=fetch)
    assert not info.pinned
    assert len(fetch.calls) == 1


async def test_failed_requests_and_a_missing_signature_are_retried_every_5s() -> None:
    fetch = Answers(TransportError("connection refused"), Forbidden("nope"), UNSIGNED, SIGNED)
    info = await discover(server=SERVER, token=parse_token(TOKEN), pins=frozenset(), fetch=fetch)
    assert info.ca_pins == (EC_PIN,)
    assert [t for _, _, t in fetch.calls] == [0.0, 5.0, 10.0, 15.0]


async def test_discovery_gives_up_at_its_timeout_with_the_last_reason() -> None:
    fetch = Answers(*[UNSIGNED] * 10)
    with pytest.raises(JoinError) as caught:
        await discover(
            server=SERVER,
            token=parse_token(TOKEN),
            pins=frozenset(),
            fetch=fetch,
            give_up_after=12.0,
        )
    assert [t for _, _, t in fetch.calls] == [0.0, 5.0, 10.0, 12.0]
    assert str(caught.value).startswith(
        'the cluster-info ConfigMap has no JWS signature for token id "abcdef"'
    )
    assert str(caught.value).endswith("(discovery gave up after 12s; no signature each time)")


async def test_a_bad_signature_is_refused_at_once() -> None:
    wrong = parse_token("abcdef.0123456789abcdee")
    fetch = Answers(SIGNED, SIGNED)
    with pytest.raises(JoinError, match="does not verify with the secret"):
        await discover(server=SERVER, token=wrong, pins=frozenset(), fetch=fetch)
    assert len(fetch.calls) == 1


async def test_a_different_second_answer_is_refused() -> None:
    changed = {
        "kind": "ConfigMap",
        "data": {"kubeconfig": CHANGED_KUBECONFIG, "jws-kubeconfig-abcdef": CHANGED_KUBECONFIG_JWS},
    }
    fetch = Answers(SIGNED, changed)
    with pytest.raises(JoinError) as caught:
        await discover(
            server=SERVER, token=parse_token(TOKEN), pins=parse_pins([EC_PIN]), fetch=fetch
        )
    assert str(caught.value) == (
        "the second kubeconfig from the cluster-info ConfigMap (using validated TLS) was "
        "different from the first"
    )
