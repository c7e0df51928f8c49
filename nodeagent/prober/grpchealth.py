"""The grpc probe: ``grpc.health.v1.Health/Check`` on the pod's IP (the kubelet's
``pkg/probe/grpc``), with the two messages serialized here by hand:

- ``HealthCheckRequest { string service = 1; }``
- ``HealthCheckResponse { ServingStatus status = 1; }`` (UNKNOWN 0, SERVING 1, NOT_SERVING 2,
  SERVICE_UNKNOWN 3)

:func:`grpc_outcome` turns what happened (:class:`GrpcCheck`) into the kubelet's result and
message; :func:`check_health` is the I/O edge (an insecure channel, waited for like
``grpc.WithBlock``, then one call, both within the probe's timeout).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from nodeagent.gotext import duration_seconds, quote
from nodeagent.prober.outcome import ProbeOutcome, failure, join_host_port, success

CHECK_METHOD: Final = "/grpc.health.v1.Health/Check"
SERVING: Final = 1
STATUS_NAMES: Final = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise ValueError("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def encode_request(service: str) -> bytes:
    raw = service.encode()
    return b"\x0a" + _varint(len(raw)) + raw if raw else b""


def decode_response(data: bytes) -> int:
    """The ``status`` of a HealthCheckResponse (0 when absent); other fields are skipped."""
    status, at = 0, 0
    while at < len(data):
        key, at = _read_varint(data, at)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _read_varint(data, at)
            if field == 1:
                status = value
        elif wire == 2:
            length, at = _read_varint(data, at)
            at += length
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return status


@dataclass(frozen=True, slots=True)
class GrpcCheck:
    """What one health check did: ``connect_timeout``, ``connect_error`` (with ``message``),
    ``rpc_error`` (``code`` in Go's spelling and ``message``) or ``status`` (the answer)."""

    kind: str
    status: int = 0
    code: str = ""
    message: str = ""


HealthChecker = Callable[[str, int, str, float], Awaitable[GrpcCheck]]


def grpc_outcome(check: GrpcCheck, *, addr: str, timeout: float) -> ProbeOutcome:
    limit = duration_seconds(timeout)
    if check.kind == "connect_timeout":
        return failure(
            f"timeout: failed to connect service {quote(addr)} within {limit}: "
            "context deadline exceeded"
        )
    if check.kind == "connect_error":
        return failure(f"error: failed to connect service at {quote(addr)}: {check.message}")
    if check.kind == "rpc_error":
        if check.code == "Unimplemented":
            return failure(
                "error: this server does not implement the grpc health protocol "
                f"(grpc.health.v1.Health): {check.message}"
            )
        if check.code == "DeadlineExceeded":
            return failure(f"timeout: health rpc did not complete within {limit}")
        return failure(
            f"error: health rpc probe failed: rpc error: code = {check.code} desc = {check.message}"
        )
    if check.status != SERVING:
        name = STATUS_NAMES.get(check.status, str(check.status))
        return failure(f"service unhealthy (responded with {quote(name)})")
    return success("service healthy")


def grpc_checker(user_agent: str) -> HealthChecker:
    """The real :data:`HealthChecker`: one insecure channel per check, closed after it."""

    async def check(host: str, port: int, service: str, seconds: float) -> GrpcCheck:
        import asyncio

        import grpc

        from nodeagent.kuberuntime.remote import go_code_name

        target = join_host_port(host, port)
        options = [("grpc.primary_user_agent", user_agent), ("grpc.enable_retries", 0)]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        async with grpc.aio.insecure_channel(target, options=options) as channel:
            try:
                await asyncio.wait_for(channel.channel_ready(), seconds)
            except TimeoutError:
                return GrpcCheck("connect_timeout")
            call = channel.unary_unary(
                CHECK_METHOD,
                request_serializer=encode_request,
                response_deserializer=decode_response,
            )
            try:
                status = await call(service, timeout=max(0.001, deadline - loop.time()))
            except grpc.aio.AioRpcError as e:
                code = go_code_name(e.code())
                return GrpcCheck("rpc_error", code=code, message=e.details() or "")
            except ValueError as e:
                return GrpcCheck("rpc_error", code="Internal", message=str(e))
            return GrpcCheck("status", status=int(status))

    return check


async def grpc_probe(
    checker: HealthChecker, host: str, port: int, service: str, seconds: float
) -> ProbeOutcome:
    check = await checker(host, port, service, seconds)
    return grpc_outcome(check, addr=join_host_port(host, port), timeout=seconds)
