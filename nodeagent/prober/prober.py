"""Running one probe of a container (the kubelet's ``prober.probe``): pick the probe's handler,
resolve its target (host: the probe's, else the pod IP; a port by number or by the name of a
container port), run it over the injected I/O, retry an errored run up to three times.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from nodeagent.podspec import Container, Probe
from nodeagent.prober.grpchealth import HealthChecker, grpc_probe
from nodeagent.prober.http import Opener, http_probe, open_stream, probe_url, request_headers
from nodeagent.prober.kinds import Connector, Execer, exec_probe, tcp_probe
from nodeagent.prober.outcome import Outcome, ProbeOutcome, errored
from nodeagent.prober.sockio import open_socket_stream

MAX_PROBE_RETRIES: Final = 3


class ProbeType(enum.Enum):
    LIVENESS = "Liveness"
    READINESS = "Readiness"
    STARTUP = "Startup"

    def spec(self, container: Container) -> Probe | None:
        if self is ProbeType.LIVENESS:
            return container.liveness_probe
        if self is ProbeType.READINESS:
            return container.readiness_probe
        return container.startup_probe


async def _no_grpc(host: str, port: int, service: str, seconds: float) -> Any:
    raise RuntimeError("no gRPC health checker configured")


@dataclass(frozen=True)
class ProbeIO:
    """The edges a probe touches: CRI ``ExecSync``, TCP connects, HTTP streams, gRPC checks."""

    runtime: Execer
    user_agent: str
    connect: Connector = open_socket_stream
    open_http: Opener = open_stream
    grpc_check: HealthChecker = field(default=_no_grpc)


class PortError(ValueError):
    pass


def resolve_port(port: int | str, container: Container) -> int:
    """``probe.ResolveContainerPort``: a number as it is, a name through the container ports."""
    if isinstance(port, int):
        number = port
    elif port.isdigit():
        number = int(port)
    else:
        found = next((p.container_port for p in container.ports if p.name == port), None)
        if found is None:
            raise PortError(f"couldn't find port: {port} in {_ports(container)}")
        number = found
    if not 0 < number < 65536:
        raise PortError(f"invalid port number: {number}")
    return number


def _ports(container: Container) -> str:
    return "[" + " ".join(f"{p.name}:{p.container_port}" for p in container.ports) + "]"


async def run_probe(
    io: ProbeIO,
    probe: Probe,
    *,
    container: Container,
    container_id: str,
    pod_ip: str,
) -> ProbeOutcome:
    """One run of ``probe``; an error (the probe could not run) is retried up to 3 times."""
    outcome = errored("unknown probe")
    for _ in range(MAX_PROBE_RETRIES):
        outcome = await _run_once(io, probe, container, container_id, pod_ip)
        if outcome.error is None:
            return outcome
    return outcome


async def _run_once(
    io: ProbeIO, probe: Probe, container: Container, container_id: str, pod_ip: str
) -> ProbeOutcome:
    timeout = probe.timeout_seconds
    try:
        if probe.exec is not None:
            return await exec_probe(io.runtime, container_id, probe.exec.command, timeout)
        if probe.http_get is not None:
            action = probe.http_get
            port = resolve_port(action.port, container)
            url = probe_url(action.scheme or "HTTP", action.host or pod_ip, port, action.path)
            headers = request_headers(
                [(h.name, h.value) for h in action.http_headers], io.user_agent
            )
            return await http_probe(io.open_http, url, headers, timeout)
        if probe.tcp_socket is not None:
            port = resolve_port(probe.tcp_socket.port, container)
            return await tcp_probe(io.connect, probe.tcp_socket.host or pod_ip, port, timeout)
        if probe.grpc is not None:
            action_g = probe.grpc
            return await grpc_probe(
                io.grpc_check, pod_ip, action_g.port, action_g.service or "", timeout
            )
    except PortError as e:
        return errored(str(e))
    return ProbeOutcome(Outcome.UNKNOWN, "", "missing probe handler")


def status_pod_ip(status: Mapping[str, Any]) -> str:
    return str(status.get("podIP") or "")
