"""The HTTP client: requests on the wire, typed errors, deadlines, watches, credential swaps."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from harness.pki import Authority, create_authority

from nodeagent.apiserver import (
    CSRS,
    LEASES,
    NODES,
    AlreadyExists,
    ApiClient,
    Endpoint,
    Gone,
    NotFound,
    PatchType,
    ServerError,
    Timeout,
    TooManyRequests,
    TransportError,
)

Handler = Callable[[httpx.Request], Awaitable[httpx.Response]]
SERVER = "https://apiserver.test:6443"


def client(handler: Handler, *, token: str | None = "t1", endpoint: bool = True) -> ApiClient:
    ep = Endpoint(server=SERVER, token=token)
    return ApiClient(endpoint=ep if endpoint else None, transport=httpx.MockTransport(handler))


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


async def test_verbs_send_method_path_content_type_and_body() -> None:
    seen: list[tuple[str, str, str | None, Any]] = []

    async def handler(req: httpx.Request) -> httpx.Response:
        body = json.loads(req.content) if req.content else None
        seen.append(
            (
                req.method,
                req.url.path + (f"?{req.url.query.decode()}" if req.url.query else ""),
                req.headers.get("content-type"),
                body,
            )
        )
        return httpx.Response(200, json={"metadata": {"name": "x"}})

    api = client(handler)
    await api.get(NODES, "n1")
    await api.create(LEASES, {"metadata": {"name": "n1"}}, namespace="kube-node-lease")
    await api.replace(LEASES, "n1", {"metadata": {"name": "n1"}}, namespace="kube-node-lease")
    await api.patch(NODES, "n1", {"status": {}}, subresource="status")
    await api.patch(NODES, "n1", {"a": 1}, patch_type=PatchType.MERGE)
    await api.patch(NODES, "n1", [{"op": "remove", "path": "/a"}], patch_type=PatchType.JSON)
    await api.replace(CSRS, "csr-1", {"metadata": {"name": "csr-1"}}, subresource="approval")
    await api.delete(NODES, "n1")
    await api.aclose()

    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "n1"}}
    assert seen == [
        ("GET", "/api/v1/nodes/n1", None, None),
        (
            "POST",
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
            "application/json",
            lease,
        ),
        (
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1",
            "application/json",
            lease,
        ),
        (
            "PATCH",
            "/api/v1/nodes/n1/status",
            "application/strategic-merge-patch+json",
            {"status": {}},
        ),
        ("PATCH", "/api/v1/nodes/n1", "application/merge-patch+json", {"a": 1}),
        (
            "PATCH",
            "/api/v1/nodes/n1",
            "application/json-patch+json",
            [{"op": "remove", "path": "/a"}],
        ),
        (
            "PUT",
            "/apis/certificates.k8s.io/v1/certificatesigningrequests/csr-1/approval",
            "application/json",
            {
                "apiVersion": "certificates.k8s.io/v1",
                "kind": "CertificateSigningRequest",
                "metadata": {"name": "csr-1"},
            },
        ),
        ("DELETE", "/api/v1/nodes/n1", None, None),
    ]


async def test_every_request_carries_credentials_and_user_agent() -> None:
    headers: list[httpx.Headers] = []

    async def handler(req: httpx.Request) -> httpx.Response:
        headers.append(req.headers)
        return httpx.Response(200, json={})

    api = client(handler, token="s3cret")
    await api.get(NODES, "n1")
    await api.aclose()

    assert headers[0]["authorization"] == "Bearer s3cret"
    assert headers[0]["user-agent"].startswith("nodeagent/")
    assert headers[0]["accept"] == "application/json"


async def test_error_responses_raise_typed_errors_with_the_servers_message() -> None:
    responses = [
        httpx.Response(409, json=status(409, "AlreadyExists", 'nodes "n1" already exists')),
        httpx.Response(
            429, json=status(429, "TooManyRequests", "slow down"), headers={"Retry-After": "2"}
        ),
        httpx.Response(502, text="<html>bad gateway</html>"),
    ]

    async def handler(req: httpx.Request) -> httpx.Response:
        return responses.pop(0)

    api = client(handler)
    with pytest.raises(AlreadyExists, match='POST /api/v1/nodes: nodes "n1" already exists'):
        await api.create(NODES, {"metadata": {"name": "n1"}})
    with pytest.raises(TooManyRequests) as throttled:
        await api.get(NODES, "n1")
    with pytest.raises(ServerError, match="bad gateway"):
        await api.get(NODES, "n1")
    await api.aclose()
    assert throttled.value.retry_after == 2.0


@pytest.mark.looptime
async def test_a_call_without_answer_times_out_at_its_deadline() -> None:
    async def handler(req: httpx.Request) -> httpx.Response:
        await asyncio.sleep(3600)
        return httpx.Response(200, json={})

    api = client(handler)
    loop = asyncio.get_running_loop()
    with pytest.raises(Timeout, match="no answer within 4s"):
        await api.get(NODES, "n1", request_timeout=4)
    assert loop.time() == pytest.approx(4)
    with pytest.raises(Timeout):
        await api.get(NODES, "n1")
    assert loop.time() == pytest.approx(14)  # default deadline: 10s
    await api.aclose()


async def test_connection_failures_raise_transport_error() -> None:
    async def handler(req: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=req)

    api = client(handler)
    with pytest.raises(TransportError, match="ConnectError: connection refused"):
        await api.get(NODES, "n1")
    await api.aclose()


async def test_list_follows_continue_tokens_and_stamps_kind() -> None:
    pages = {
        "": {"items": [{"metadata": {"name": "a"}}], "metadata": {"continue": "tok"}},
        "tok": {"items": [{"metadata": {"name": "b"}}], "metadata": {"resourceVersion": "42"}},
    }

    async def handler(req: httpx.Request) -> httpx.Response:
        assert req.url.params["fieldSelector"] == "metadata.name=a"
        return httpx.Response(200, json=pages[req.url.params.get("continue", "")])

    api = client(handler)
    result = await api.list(NODES, field_selector="metadata.name=a")
    await api.aclose()

    assert [i["metadata"]["name"] for i in result.items] == ["a", "b"]
    assert result.items[0]["kind"] == "Node"
    assert result.resource_version == "42"


async def test_watch_streams_events_and_bookmarks_then_raises_gone() -> None:
    lines = [
        {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "5"}}},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}},
        {"type": "ERROR", "object": status(410, "Expired", "too old resource version: 1 (9)")},
    ]
    params: list[httpx.QueryParams] = []

    async def handler(req: httpx.Request) -> httpx.Response:
        params.append(req.url.params)
        return httpx.Response(200, content="".join(json.dumps(x) + "\n" for x in lines).encode())

    api = client(handler)
    got = []
    with pytest.raises(Gone, match="too old resource version"):
        async with contextlib.aclosing(api.watch(NODES, resource_version="4")) as events:
            async for event in events:
                got.append((event.type, event.resource_version))
    await api.aclose()

    assert got == [("ADDED", "5"), ("BOOKMARK", "9")]
    assert dict(params[0]) == {
        "watch": "true",
        "allowWatchBookmarks": "true",
        "resourceVersion": "4",
        "timeoutSeconds": "300",
    }


async def test_calls_wait_for_credentials_and_new_calls_use_rotated_ones() -> None:
    tokens: list[str] = []

    async def handler(req: httpx.Request) -> httpx.Response:
        tokens.append(req.headers["authorization"])
        return httpx.Response(200, json={})

    api = client(handler, endpoint=False)
    pending = asyncio.create_task(api.get(NODES, "n1"))
    await asyncio.sleep(0.01)
    assert not pending.done()  # no credentials yet: the call waits instead of failing

    api.set_endpoint(Endpoint(server=SERVER, token="first"))
    await pending
    api.set_endpoint(Endpoint(server=SERVER, token="second"))
    await api.get(NODES, "n1")
    await api.aclose()

    assert tokens == ["Bearer first", "Bearer second"]


@pytest.mark.looptime
async def test_connection_resets_are_coalesced_and_calls_keep_working(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging

    caplog.set_level(logging.INFO, logger="nodeagent.apiserver")

    async def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"metadata": {"name": "n1"}})

    api = client(handler)
    for _ in range(4):  # four managers asking after the same failure
        await api.reset_connections()
    await asyncio.sleep(1.0)
    await api.reset_connections()
    node = await api.get(NODES, "n1")
    await api.aclose()

    closes = [r for r in caplog.records if r.getMessage() == "Closing apiserver connections"]
    assert len(closes) == 2
    assert node["metadata"]["name"] == "n1"


# --- real TLS on loopback ---------------------------------------------------------------------


@pytest.fixture
def authority(tmp_path: Path) -> Authority:
    return create_authority(
        directory=tmp_path, name="ca", common_name="ca", validity=datetime.timedelta(days=1)
    )


@contextlib.asynccontextmanager
async def tls_server(ctx: ssl.SSLContext, seen: list[str]) -> AsyncIterator[int]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            peer = writer.get_extra_info("peercert") or {}
            seen.append(dict(x[0] for x in peer.get("subject", ()))["commonName"])
            body = b'{"kind":"Node","metadata":{"name":"n1"}}'
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=ctx)
    async with server:
        yield server.sockets[0].getsockname()[1]


def server_context(authority: Authority, tmp_path: Path) -> ssl.SSLContext:
    pair = authority.issue(
        directory=tmp_path,
        name="apiserver",
        common_name="kube-apiserver",
        sans=("127.0.0.1",),
        server=True,
        client=False,
    )
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(authority.pair.cert))
    ctx.load_cert_chain(pair.cert, pair.key)
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


async def test_tls_presents_the_client_certificate_and_verifies_the_server(
    authority: Authority, tmp_path: Path
) -> None:
    node = authority.issue(
        directory=tmp_path,
        name="node",
        common_name="system:node:n1",
        organizations=("system:nodes",),
    )
    seen: list[str] = []
    async with tls_server(server_context(authority, tmp_path), seen) as port:
        api = ApiClient(
            endpoint=Endpoint(
                server=f"https://127.0.0.1:{port}",
                ca_pem=authority.pair.cert.read_bytes(),
                client_cert_pem=node.cert.read_bytes(),
                client_key_pem=node.key.read_bytes(),
            )
        )
        node_obj = await api.get(NODES, "n1")
        await api.aclose()

    assert node_obj["metadata"]["name"] == "n1"
    assert seen == ["system:node:n1"]


async def test_a_server_signed_by_another_ca_is_refused(
    authority: Authority, tmp_path: Path
) -> None:
    (tmp_path / "other").mkdir()
    other = create_authority(
        directory=tmp_path / "other",
        name="ca",
        common_name="other",
        validity=datetime.timedelta(days=1),
    )
    seen: list[str] = []
    async with tls_server(server_context(authority, tmp_path), seen) as port:
        api = ApiClient(
            endpoint=Endpoint(
                server=f"https://127.0.0.1:{port}", ca_pem=other.pair.cert.read_bytes(), token="t"
            )
        )
        with pytest.raises(TransportError, match="CERTIFICATE_VERIFY_FAILED"):
            await api.get(NODES, "n1")
        await api.aclose()
    assert seen == []


async def test_an_answer_after_failures_wakes_who_waits_for_the_apiserver() -> None:
    answers = ["refuse", 503, 429, 404, 200]

    async def handler(req: httpx.Request) -> httpx.Response:
        answer = answers.pop(0)
        if answer == "refuse":
            raise httpx.ConnectError("connection refused", request=req)
        assert isinstance(answer, int)
        body = status(answer, "x", "x") if answer >= 400 else {"metadata": {"name": "n"}}
        return httpx.Response(answer, json=body)

    api = client(handler)
    back = asyncio.ensure_future(api.answered_again())
    for expected in (TransportError, ServerError, TooManyRequests):
        with pytest.raises(expected):
            await api.get(NODES, "n")
        await asyncio.sleep(0)
        assert not back.done()  # refused, 503 and 429 are no answer
    with pytest.raises(NotFound):
        await api.get(NODES, "n")  # a 404 is an answer
    await asyncio.wait_for(back, 1)

    later = asyncio.ensure_future(api.answered_again())
    await api.get(NODES, "n")  # answered while nothing failed: no change to wake anyone for
    await asyncio.sleep(0)
    assert not later.done()
    later.cancel()
    await api.aclose()
