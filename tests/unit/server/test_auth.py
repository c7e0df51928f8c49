"""Authentication and authorization: TokenReview and SubjectAccessReview, their caches, and the
401/403 answers of the kubelet API, against the fake apiserver with a hand-moved clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import prometheus_client
import pytest
from aiohttp.test_utils import TestClient, TestServer

from nodeagent.apiserver.errors import TransportError
from nodeagent.server import Dependencies, RequestAuth, build_app
from nodeagent.server.attributes import Attributes
from nodeagent.server.auth import (
    AlwaysAllow,
    TtlCache,
    User,
    WebhookAuthorizer,
    WebhookTokenAuthenticator,
    bearer_token,
    forbidden_message,
    user_from_subject,
)
from nodeagent.testing.fake_apiserver import Call, FakeApiServer


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def token_review(call: Call) -> dict[str, Any]:
    token = call.body["spec"]["token"]
    if token == "good":
        return {
            "status": {
                "authenticated": True,
                "user": {
                    "username": "system:serviceaccount:default:reader",
                    "uid": "u-1",
                    "groups": ["system:serviceaccounts", "system:authenticated"],
                },
            }
        }
    return {"status": {"authenticated": False, "error": "invalid token"}}


def access_review(call: Call) -> dict[str, Any]:
    spec = call.body["spec"]
    attrs = spec["resourceAttributes"]
    allowed = spec["user"] == "admin" or attrs["subresource"] in ("pods", "healthz")
    return {"status": {"allowed": allowed}}


def test_ttl_cache_expires_on_the_clock() -> None:
    clock = Clock()
    cache: TtlCache[str, int] = TtlCache(now=clock)
    cache.put("a", 1, 10)
    clock.t += 9.9
    assert cache.get("a") == 1
    clock.t += 0.1
    assert cache.get("a") is None
    cache.put("b", 2, 0)
    assert cache.get("b") is None


def test_ttl_cache_is_bounded() -> None:
    cache: TtlCache[int, int] = TtlCache(now=Clock(), max_entries=3)
    for i in range(5):
        cache.put(i, i, 60)
    assert len(cache) == 3
    assert cache.get(4) == 4


async def test_token_reviews_cached_for_ttl_both_ways() -> None:
    api = FakeApiServer()
    api.react("create", "tokenreviews", token_review, times=None)
    clock = Clock()
    authn = WebhookTokenAuthenticator(api=api, ttl=120, now=clock)
    user = await authn.authenticate("good")
    assert user == User(
        name="system:serviceaccount:default:reader",
        uid="u-1",
        groups=("system:serviceaccounts", "system:authenticated"),
    )
    assert await authn.authenticate("bad") is None
    await authn.authenticate("good")
    await authn.authenticate("bad")
    assert len(api.calls_to("create", "tokenreviews")) == 2
    clock.t += 120
    await authn.authenticate("good")
    await authn.authenticate("bad")
    assert len(api.calls_to("create", "tokenreviews")) == 4
    body = api.calls_to("create", "tokenreviews")[0].body
    assert body == {"spec": {"token": "good"}}


async def test_access_reviews_cached_by_decision() -> None:
    api = FakeApiServer()
    api.react("create", "subjectaccessreviews", access_review, times=None)
    clock = Clock()
    authz = WebhookAuthorizer(api=api, authorized_ttl=300, unauthorized_ttl=30, now=clock)
    alice = User(name="alice", groups=("g",))
    proxy = Attributes(verb="get", subresource="proxy", name="n", path="/exec")
    pods = Attributes(verb="get", subresource="pods", name="n", path="/pods")
    assert not await authz.authorize(alice, proxy)
    assert await authz.authorize(alice, pods)

    def calls() -> int:
        return len(api.calls_to("create", "subjectaccessreviews"))

    assert calls() == 2
    clock.t += 29
    await authz.authorize(alice, proxy)
    await authz.authorize(alice, pods)
    assert calls() == 2
    clock.t += 1  # denied entry expires at 30s, allowed one lives 5m
    await authz.authorize(alice, proxy)
    await authz.authorize(alice, pods)
    assert calls() == 3
    clock.t += 270
    await authz.authorize(alice, pods)
    assert calls() == 4
    # Another path with the same attributes is the same review.
    await authz.authorize(
        alice, Attributes(verb="get", subresource="pods", name="n", path="/pods/")
    )
    assert calls() == 4
    body = api.calls_to("create", "subjectaccessreviews")[0].body
    assert body["spec"] == {
        "user": "alice",
        "groups": ["g"],
        "resourceAttributes": {
            "verb": "get",
            "group": "",
            "version": "v1",
            "resource": "nodes",
            "subresource": "proxy",
            "name": "n",
        },
    }


def test_client_certificate_subject() -> None:
    subject = (
        (("organizationName", "system:masters"),),
        (("organizationName", "ops"),),
        (("commonName", "kube-apiserver-kubelet-client"),),
    )
    assert user_from_subject(subject) == User(
        name="kube-apiserver-kubelet-client", groups=("system:masters", "ops")
    )
    assert user_from_subject(((("organizationName", "x"),),)) is None


def test_bearer_token_header() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer  abc ") == "abc"
    assert bearer_token("Basic abc") is None
    assert bearer_token("Bearer ") is None
    assert bearer_token(None) is None


def test_forbidden_message_is_the_kubelets() -> None:
    attrs = Attributes(verb="create", subresource="proxy", name="n", path="/exec/a/b/c")
    assert (
        forbidden_message(User(name="system:serviceaccount:default:x"), attrs)
        == "Forbidden (user=system:serviceaccount:default:x, verb=create, resource=nodes,"
        " subresource=proxy)"
    )


@pytest.fixture
async def api() -> FakeApiServer:
    api = FakeApiServer()
    api.react("create", "tokenreviews", token_review, times=None)
    api.react("create", "subjectaccessreviews", access_review, times=None)
    return api


async def _client(auth: RequestAuth) -> AsyncIterator[TestClient[Any, Any]]:
    app = build_app(
        auth=auth,
        deps=Dependencies(pods=lambda: [{"metadata": {"name": "p"}}]),
        stream=None,
    )
    async with TestClient(TestServer(app)) as client:
        yield client


@pytest.fixture
async def client(api: FakeApiServer) -> AsyncIterator[TestClient[Any, Any]]:
    clock = Clock()
    auth = RequestAuth(
        tokens=WebhookTokenAuthenticator(api=api, ttl=120, now=clock),
        authorizer=WebhookAuthorizer(api=api, authorized_ttl=300, unauthorized_ttl=30, now=clock),
        node_name="node-a",
    )
    async for c in _client(auth):
        yield c


async def test_no_credentials_401(client: TestClient[Any, Any]) -> None:
    resp = await client.get("/pods")
    assert resp.status == 401
    assert await resp.text() == "Unauthorized\n"
    resp = await client.get("/pods", headers={"Authorization": "Bearer bad"})
    assert resp.status == 401


async def test_token_without_nodes_proxy_403(client: TestClient[Any, Any]) -> None:
    resp = await client.post("/exec/default/p/c", headers={"Authorization": "Bearer good"})
    assert resp.status == 403
    assert await resp.text() == (
        "Forbidden (user=system:serviceaccount:default:reader, verb=create, resource=nodes,"
        " subresource=proxy)\n"
    )


async def test_fine_grained_pods_allowed(client: TestClient[Any, Any], api: FakeApiServer) -> None:
    resp = await client.get("/pods", headers={"Authorization": "Bearer good"})
    assert resp.status == 200
    body = await resp.json()
    assert body["kind"] == "PodList"
    assert body["items"] == [{"metadata": {"name": "p"}}]
    review = api.calls_to("create", "subjectaccessreviews")[0].body["spec"]
    assert review["resourceAttributes"]["subresource"] == "pods"
    assert review["resourceAttributes"]["name"] == "node-a"
    assert "system:authenticated" in review["groups"]


async def test_apiserver_down_is_401_for_tokens_and_500_for_authz() -> None:
    api = FakeApiServer()
    api.react("create", "tokenreviews", TransportError("down"), times=None)
    clock = Clock()
    auth = RequestAuth(
        tokens=WebhookTokenAuthenticator(api=api, ttl=120, now=clock),
        authorizer=AlwaysAllow(),
        node_name="n",
    )
    async for client in _client(auth):
        resp = await client.get("/pods", headers={"Authorization": "Bearer good"})
        assert resp.status == 401


async def test_anonymous_when_enabled() -> None:
    api = FakeApiServer()
    api.react("create", "subjectaccessreviews", access_review, times=None)
    auth = RequestAuth(
        tokens=None,
        authorizer=WebhookAuthorizer(api=api, authorized_ttl=300, unauthorized_ttl=30, now=Clock()),
        anonymous=True,
        node_name="n",
    )
    async for client in _client(auth):
        resp = await client.get("/healthz")
        assert resp.status == 200
        assert await resp.text() == "ok"
        resp = await client.get("/configz")
        assert resp.status == 403
        assert "user=system:anonymous" in await resp.text()


async def test_requests_are_counted_by_bucket(client: TestClient[Any, Any]) -> None:
    labels = {"method": "GET", "path": "pods", "server_type": "readwrite", "long_running": "false"}
    before = prometheus_client.REGISTRY.get_sample_value("kubelet_http_requests_total", labels) or 0
    await client.get("/pods")
    await client.get("/pods", headers={"Authorization": "Bearer good"})
    after = prometheus_client.REGISTRY.get_sample_value("kubelet_http_requests_total", labels)
    assert after == before + 2
    stream = {**labels, "method": "POST", "path": "exec", "long_running": "true"}
    await client.post("/exec/ns/p/c")
    assert (
        prometheus_client.REGISTRY.get_sample_value("kubelet_http_requests_total", stream) or 0
    ) >= 1
    inflight = prometheus_client.REGISTRY.get_sample_value("kubelet_http_inflight_requests", labels)
    assert inflight == 0
