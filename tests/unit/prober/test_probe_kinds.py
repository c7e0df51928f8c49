"""Each probe kind over fake I/O: the result and the kubelet's output text."""

from __future__ import annotations

import asyncio
import errno
import ssl
from collections.abc import Sequence
from typing import Any

import pytest

from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.errors import cri_error
from nodeagent.prober.grpchealth import (
    GrpcCheck,
    decode_response,
    encode_request,
    grpc_outcome,
    grpc_probe,
)
from nodeagent.prober.http import http_probe, probe_url, request_headers
from nodeagent.prober.kinds import exec_probe, tcp_probe
from nodeagent.prober.outcome import Outcome, ProbeOutcome
from nodeagent.prober.prober import ProbeIO, resolve_port, run_probe
from nodeagent.testing.pods import container, pod

UA = "kube-probe/1.36"


class FakeExec:
    def __init__(self, response: cri.ExecSyncResponse | None = None, error: Any = None) -> None:
        self.response = response or cri.ExecSyncResponse(exit_code=0)
        self.error = error
        self.calls: list[tuple[str, tuple[str, ...], int]] = []

    async def exec_sync(
        self, container_id: str, cmd: Sequence[str], timeout_seconds: int
    ) -> cri.ExecSyncResponse:
        self.calls.append((container_id, tuple(cmd), timeout_seconds))
        if self.error is not None:
            raise self.error
        return self.response


async def test_exec_exit_code_zero_is_success_with_the_output() -> None:
    runtime = FakeExec(cri.ExecSyncResponse(stdout=b"fine\n", exit_code=0))
    assert await exec_probe(runtime, "c1", ["cat", "/ok"], 5) == ProbeOutcome(
        Outcome.SUCCESS, "fine\n"
    )
    assert runtime.calls == [("c1", ("cat", "/ok"), 5)]


async def test_exec_non_zero_exit_is_a_failure_with_stdout_and_stderr_capped() -> None:
    big = b"x" * 20000
    runtime = FakeExec(cri.ExecSyncResponse(stdout=b"out ", stderr=big, exit_code=1))
    outcome = await exec_probe(runtime, "c1", ["false"], 1)
    assert outcome.outcome is Outcome.FAILURE
    assert outcome.output == "out " + "x" * (10 * 1024 - 4)


async def test_exec_timeout_is_a_failure_with_the_kubelets_message() -> None:
    error = cri_error(rpc="ExecSync", endpoint="e", code="DeadlineExceeded", details="timeout")
    outcome = await exec_probe(FakeExec(error=error), "c1", ["sleep", "10"], 1)
    assert outcome == ProbeOutcome(
        Outcome.FAILURE, 'command timed out: "sleep 10" timed out after 1s'
    )


async def test_exec_on_a_gone_container_is_an_error_not_a_result() -> None:
    error = cri_error(rpc="ExecSync", endpoint="e", code="NotFound", details="no such container")
    outcome = await exec_probe(FakeExec(error=error), "c1", ["true"], 1)
    assert outcome.outcome is Outcome.UNKNOWN
    assert outcome.error == "rpc error: code = NotFound desc = no such container"


class FakeWriter:
    def __init__(self) -> None:
        self.data = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class FakeHttp:
    """Answers each connection with the next scripted response (bytes) or raises (error)."""

    def __init__(self, *answers: bytes | BaseException) -> None:
        self.answers = list(answers)
        self.opened: list[tuple[str, int, bool]] = []
        self.writers: list[FakeWriter] = []

    async def __call__(
        self, host: str, port: int, tls: ssl.SSLContext | None, server_hostname: str | None
    ) -> tuple[Any, Any]:
        self.opened.append((host, port, tls is not None))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        if answer == b"hang":
            await asyncio.sleep(3600)
        reader = asyncio.StreamReader()
        reader.feed_data(answer)
        reader.feed_eof()
        writer = FakeWriter()
        self.writers.append(writer)
        return reader, writer


def response(status: str, body: bytes = b"", **headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", *(f"{k.replace('_', '-')}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


URL = "http://10.0.0.5:8080/healthz"


async def test_http_2xx_is_success_and_sends_the_kubelets_headers() -> None:
    fake = FakeHttp(response("200 OK", b"ok", Content_Length="2"))
    headers = request_headers([("X-Check", "1")], UA)
    assert await http_probe(fake, URL, headers, 1) == ProbeOutcome(Outcome.SUCCESS, "ok")
    sent = fake.writers[0].data.decode()
    assert sent.startswith("GET /healthz HTTP/1.1\r\nHost: 10.0.0.5:8080\r\n")
    assert "User-Agent: kube-probe/1.36\r\n" in sent
    assert "Accept: */*\r\n" in sent and "X-Check: 1\r\n" in sent
    assert "Connection: close\r\n" in sent
    assert fake.opened == [("10.0.0.5", 8080, False)]
    assert fake.writers[0].closed


async def test_http_host_and_user_agent_headers_of_the_probe_win() -> None:
    fake = FakeHttp(response("204 No Content"))
    headers = request_headers([("Host", "example.test"), ("User-Agent", "mine")], UA)
    await http_probe(fake, URL, headers, 1)
    sent = fake.writers[0].data.decode()
    assert "Host: example.test\r\n" in sent and "User-Agent: mine\r\n" in sent
    assert "kube-probe" not in sent


async def test_http_error_status_is_a_failure_without_the_body() -> None:
    fake = FakeHttp(response("500 Internal Server Error", b"secret", Content_Length="6"))
    outcome = await http_probe(fake, URL, request_headers([], UA), 1)
    assert outcome == ProbeOutcome(Outcome.FAILURE, "HTTP probe failed with statuscode: 500")


async def test_http_redirect_on_the_same_host_is_followed() -> None:
    fake = FakeHttp(
        response("302 Found", Location="/ready"),
        response("200 OK", b"here", Transfer_Encoding="chunked").replace(
            b"here", b"4\r\nhere\r\n0\r\n\r\n"
        ),
    )
    assert await http_probe(fake, URL, request_headers([], UA), 1) == ProbeOutcome(
        Outcome.SUCCESS, "here"
    )
    assert fake.writers[1].data.startswith(b"GET /ready HTTP/1.1\r\n")


async def test_http_redirect_to_another_host_is_a_success_with_a_warning() -> None:
    fake = FakeHttp(
        response("301 Moved", b"gone", Location="http://other.test/", Content_Length="4")
    )
    outcome = await http_probe(fake, URL, request_headers([], UA), 1)
    assert outcome == ProbeOutcome(
        Outcome.WARNING, "Probe terminated redirects, Response body: gone"
    )
    assert len(fake.opened) == 1


async def test_http_endless_redirects_fail_after_ten() -> None:
    fake = FakeHttp(*[response("302 Found", Location="/again")] * 10)
    outcome = await http_probe(fake, URL, request_headers([], UA), 1)
    assert outcome == ProbeOutcome(
        Outcome.FAILURE, 'Get "http://10.0.0.5:8080/again": stopped after 10 redirects'
    )


async def test_http_connection_refused_reads_as_gos_error() -> None:
    refused = ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed")
    outcome = await http_probe(FakeHttp(refused), URL, request_headers([], UA), 1)
    assert outcome == ProbeOutcome(
        Outcome.FAILURE,
        f'Get "{URL}": dial tcp 10.0.0.5:8080: connect: connection refused',
    )


@pytest.mark.looptime
async def test_http_timeout_reads_as_gos_client_timeout() -> None:
    outcome = await http_probe(FakeHttp(b"hang"), URL, request_headers([], UA), 2)
    assert outcome == ProbeOutcome(
        Outcome.FAILURE,
        f'Get "{URL}": context deadline exceeded (Client.Timeout exceeded while awaiting headers)',
    )


async def test_http_body_is_read_up_to_10_kib() -> None:
    fake = FakeHttp(response("200 OK", b"y" * 20000))
    outcome = await http_probe(fake, URL, request_headers([], UA), 1)
    assert outcome.output == "y" * 10240


def test_probe_url_keeps_the_query_and_brackets_ipv6() -> None:
    assert probe_url("HTTPS", "fd00::5", 443, "/h?x=1") == "https://[fd00::5]:443/h?x=1"
    assert probe_url("HTTP", "10.0.0.5", 80, "") == "http://10.0.0.5:80"


async def test_tcp_connect_success_and_refusal() -> None:
    closed: list[bool] = []

    class W:
        def close(self) -> None:
            closed.append(True)

    async def ok(host: str, port: int) -> tuple[Any, Any]:
        return None, W()

    async def refused(host: str, port: int) -> tuple[Any, Any]:
        raise ConnectionRefusedError(errno.ECONNREFUSED, "refused")

    assert await tcp_probe(ok, "10.0.0.5", 80, 1) == ProbeOutcome(Outcome.SUCCESS, "")
    assert closed == [True]
    assert await tcp_probe(refused, "10.0.0.5", 81, 1) == ProbeOutcome(
        Outcome.FAILURE, "dial tcp 10.0.0.5:81: connect: connection refused"
    )


@pytest.mark.looptime
async def test_tcp_connect_timeout_is_an_io_timeout() -> None:
    async def hang(host: str, port: int) -> tuple[Any, Any]:
        await asyncio.sleep(3600)
        raise AssertionError

    assert await tcp_probe(hang, "10.0.0.5", 80, 1) == ProbeOutcome(
        Outcome.FAILURE, "dial tcp 10.0.0.5:80: i/o timeout"
    )


def test_grpc_messages_round_trip() -> None:
    assert encode_request("") == b""
    assert encode_request("svc") == b"\x0a\x03svc"
    assert decode_response(b"") == 0
    assert decode_response(b"\x08\x01") == 1
    assert decode_response(b"\x12\x02ab\x08\x02") == 2  # unknown field skipped


@pytest.mark.parametrize(
    ("check", "result", "message"),
    [
        (GrpcCheck("status", status=1), Outcome.SUCCESS, "service healthy"),
        (
            GrpcCheck("status", status=2),
            Outcome.FAILURE,
            'service unhealthy (responded with "NOT_SERVING")',
        ),
        (
            GrpcCheck("connect_timeout"),
            Outcome.FAILURE,
            'timeout: failed to connect service "10.0.0.5:9000" within 1s: '
            "context deadline exceeded",
        ),
        (
            GrpcCheck("rpc_error", code="Unimplemented", message="unknown service"),
            Outcome.FAILURE,
            "error: this server does not implement the grpc health protocol "
            "(grpc.health.v1.Health): unknown service",
        ),
        (
            GrpcCheck("rpc_error", code="DeadlineExceeded"),
            Outcome.FAILURE,
            "timeout: health rpc did not complete within 1s",
        ),
    ],
)
def test_grpc_outcomes_have_the_kubelets_messages(
    check: GrpcCheck, result: Outcome, message: str
) -> None:
    assert grpc_outcome(check, addr="10.0.0.5:9000", timeout=1) == ProbeOutcome(result, message)


async def test_grpc_probe_asks_the_pod_ip_for_the_service() -> None:
    asked: list[tuple[str, int, str, float]] = []

    async def checker(host: str, port: int, service: str, seconds: float) -> GrpcCheck:
        asked.append((host, port, service, seconds))
        return GrpcCheck("status", status=1)

    assert (await grpc_probe(checker, "10.0.0.5", 9000, "db", 2)).outcome is Outcome.SUCCESS
    assert asked == [("10.0.0.5", 9000, "db", 2)]


def test_named_port_resolves_through_the_container_ports() -> None:
    spec = pod(
        containers=[container("app", ports=[{"name": "http", "containerPort": 8080}])]
    ).spec.containers[0]
    assert resolve_port("http", spec) == 8080
    assert resolve_port(81, spec) == 81
    with pytest.raises(ValueError, match=r"couldn't find port: admin in \[http:8080\]"):
        resolve_port("admin", spec)


async def test_run_probe_defaults_the_host_to_the_pod_ip_and_retries_errors() -> None:
    fake = FakeHttp(response("200 OK"))
    app = pod(
        containers=[
            container(
                "app",
                ports=[{"name": "http", "containerPort": 8080}],
                readinessProbe={"httpGet": {"port": "http", "path": "/r"}},
            )
        ]
    ).spec.containers[0]
    assert app.readiness_probe is not None
    io = ProbeIO(runtime=FakeExec(), user_agent=UA, open_http=fake)
    outcome = await run_probe(
        io, app.readiness_probe, container=app, container_id="c1", pod_ip="10.0.0.9"
    )
    assert outcome.outcome is Outcome.SUCCESS
    assert fake.opened == [("10.0.0.9", 8080, False)]

    gone = cri_error(rpc="ExecSync", endpoint="e", code="NotFound", details="gone")
    runtime = FakeExec(error=gone)
    exec_spec = pod(
        containers=[container("app", livenessProbe={"exec": {"command": ["true"]}})]
    ).spec.containers[0]
    assert exec_spec.liveness_probe is not None
    outcome = await run_probe(
        ProbeIO(runtime=runtime, user_agent=UA),
        exec_spec.liveness_probe,
        container=exec_spec,
        container_id="c1",
        pod_ip="10.0.0.9",
    )
    assert outcome.error is not None and len(runtime.calls) == 3
