"""Service-account tokens: the TokenRequest sent, the cache, and the kubelet's refresh timing
(80 % of the lifetime or 24 h) on a manual clock."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from volume_clocks import ManualClock

from nodeagent.apiserver import Forbidden, NotFound
from nodeagent.podspec import Pod, decode_pod
from nodeagent.testing.fake_apiserver import Call, FakeApiServer
from nodeagent.volumemanager.content.errors import VolumeSetupError
from nodeagent.volumemanager.content.tokens import (
    Token,
    TokenManager,
    request_body,
    requires_refresh,
    token_requests,
)

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def pod(name: str = "web", uid: str = "uid-1") -> Pod:
    return decode_pod(
        {
            "metadata": {"name": name, "namespace": "shop", "uid": uid},
            "spec": {"serviceAccountName": "builder", "containers": [{"name": "c"}]},
        }
    )


class Issuer:
    """Answers TokenRequests as the apiserver does, numbering the tokens it issues."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.issued = 0
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, call: Call) -> dict[str, Any]:
        self.issued += 1
        self.bodies.append(call.body)
        seconds = call.body["spec"]["expirationSeconds"]
        expiry = self.clock.now() + dt.timedelta(seconds=seconds)
        return {
            **call.body,
            "status": {
                "token": f"token-{self.issued}",
                "expirationTimestamp": expiry.strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        }


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def issuer(clock: ManualClock) -> Issuer:
    return Issuer(clock)


@pytest.fixture
def server(issuer: Issuer) -> FakeApiServer:
    s = FakeApiServer()
    s.react("create", "serviceaccounts", issuer, times=None)
    return s


def test_request_path_and_body() -> None:
    res = token_requests("builder")
    assert res.path(namespace="shop") == "/api/v1/namespaces/shop/serviceaccounts/builder/token"
    assert res.api_version == "authentication.k8s.io/v1"
    assert res.kind == "TokenRequest"
    assert request_body(pod(), "", 3607) == {
        "spec": {
            "expirationSeconds": 3607,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "uid-1"},
        }
    }
    assert request_body(pod(), "vault", 600)["spec"]["audiences"] == ["vault"]


def test_refresh_at_80_percent_of_the_lifetime() -> None:
    token = Token("t", T0 + dt.timedelta(seconds=3600), 3600)
    assert not requires_refresh(token, T0 + dt.timedelta(seconds=2879), 0)
    assert requires_refresh(token, T0 + dt.timedelta(seconds=2881), 0)
    # the jitter brings it forward by up to 10 s
    assert requires_refresh(token, T0 + dt.timedelta(seconds=2875), 9.5)


def test_refresh_after_24_hours_for_long_tokens() -> None:
    year = 365 * 24 * 3600
    token = Token("t", T0 + dt.timedelta(seconds=year), year)
    assert not requires_refresh(token, T0 + dt.timedelta(hours=23, minutes=59), 0)
    assert requires_refresh(token, T0 + dt.timedelta(hours=24, seconds=1), 0)


def test_no_expiration_seconds_never_refreshes() -> None:
    assert not requires_refresh(Token("t", T0, None), T0 + dt.timedelta(days=9), 0)


async def test_tokens_are_cached_and_refreshed_on_time(
    server: FakeApiServer, clock: ManualClock, issuer: Issuer
) -> None:
    tokens = TokenManager(api=server, clock=clock, jitter=lambda: 0.0)
    assert await tokens.token(pod(), "", 3600) == b"token-1"
    clock.advance(2800)
    assert await tokens.token(pod(), "", 3600) == b"token-1"
    assert issuer.issued == 1
    clock.advance(100)  # 2900 s: past 80 %
    assert await tokens.token(pod(), "", 3600) == b"token-2"
    assert issuer.issued == 2
    assert issuer.bodies[0]["spec"]["boundObjectRef"]["uid"] == "uid-1"
    assert [c.namespace for c in server.calls_to("create", "serviceaccounts")] == ["shop", "shop"]


async def test_tokens_are_per_audience_expiry_and_pod(
    server: FakeApiServer, clock: ManualClock, issuer: Issuer
) -> None:
    tokens = TokenManager(api=server, clock=clock, jitter=lambda: 0.0)
    got = {
        await tokens.token(pod(), "", 3600),
        await tokens.token(pod(), "vault", 3600),
        await tokens.token(pod(), "", 7200),
        await tokens.token(pod("other", "uid-2"), "", 3600),
        await tokens.token(pod(), "", 3600),
    }
    assert len(got) == 4
    assert issuer.issued == 4
    tokens.forget("uid-1")
    assert [k[5] for k in tokens.cached()] == ["uid-2"]


async def test_failure_without_a_token_names_the_cause(clock: ManualClock) -> None:
    server = FakeApiServer()
    server.react("create", "serviceaccounts", NotFound('serviceaccounts "builder" not found'))
    tokens = TokenManager(api=server, clock=clock, jitter=lambda: 0.0)
    with pytest.raises(VolumeSetupError) as raised:
        await tokens.token(pod(), "", 3600)
    assert raised.value.message == 'failed to fetch token: serviceaccounts "builder" not found'


async def test_failed_refresh_keeps_a_valid_token_then_fails_once_expired(
    server: FakeApiServer, clock: ManualClock
) -> None:
    tokens = TokenManager(api=server, clock=clock, jitter=lambda: 0.0)
    assert await tokens.token(pod(), "", 3600) == b"token-1"
    denied = Forbidden('serviceaccounts "builder" is forbidden: no')
    server.react("create", "serviceaccounts", denied, denied)
    clock.advance(3000)
    assert await tokens.token(pod(), "", 3600) == b"token-1"
    clock.advance(700)
    with pytest.raises(VolumeSetupError) as raised:
        await tokens.token(pod(), "", 3600)
    assert raised.value.message == (
        'token "shop/builder" expired and refresh failed: '
        'serviceaccounts "builder" is forbidden: no'
    )
    assert await tokens.token(pod(), "", 3600) == b"token-2"  # the apiserver is back


async def test_expired_tokens_are_dropped(server: FakeApiServer, clock: ManualClock) -> None:
    tokens = TokenManager(api=server, clock=clock, jitter=lambda: 0.0)
    await tokens.token(pod("a", "uid-a"), "", 600)
    await tokens.token(pod("b", "uid-b"), "", 7200)
    clock.advance(700)
    await tokens.token(pod("b", "uid-b"), "", 7200)
    assert [k[5] for k in tokens.cached()] == ["uid-b"]


async def test_no_api_server(clock: ManualClock) -> None:
    tokens = TokenManager(api=None, clock=clock)
    with pytest.raises(VolumeSetupError) as raised:
        await tokens.token(pod(), "", 3600)
    assert raised.value.message == "failed to fetch token: no API server configured"
