"""kube-proxy's Events: events.k8s.io/v1, reported by ``kube-proxy`` from this host, repeats
folded into a series as client-go's events broadcaster does; and the Event a Service's health
check port that cannot be bound records."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from proxy_builders import NODE, Proxy, endpoint, endpoint_slice, service

from nodeagent.apiserver import ServerError
from nodeagent.events import ObjectReference
from nodeagent.proxy.health import ProxyHealth
from nodeagent.proxy.healthserver import ServiceHealthServers, listen_error
from nodeagent.proxy.model import ServiceName
from nodeagent.proxy.recorder import EVENTS_V1, ProxyEventRecorder, reporting_instance
from nodeagent.testing.fake_apiserver import EPOCH, FakeApiServer

WEB = ObjectReference(kind="Service", name="web", namespace="team-a", api_version="v1")
REASON = "FailedToStartServiceHealthcheck"


@pytest.fixture
def server() -> FakeApiServer:
    return FakeApiServer()


@contextlib.asynccontextmanager
async def running(server: FakeApiServer) -> AsyncIterator[ProxyEventRecorder]:
    """A recorder running in the test's own (virtual) time: its 6- and 30-minute timers
    start with it."""
    r = ProxyEventRecorder(
        api=server, clock=server.clock, instance=reporting_instance("host1"), jitter=lambda: 0.0
    )
    task = asyncio.create_task(r.run())
    try:
        yield r
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.mark.looptime
async def test_an_event_is_an_events_k8s_io_event_reported_by_kube_proxy_on_this_host(
    server: FakeApiServer,
) -> None:
    async with running(server) as recorder:
        await asyncio.sleep(1.5)
        recorder.eventf(WEB, "Warning", REASON, "Listen", "node n1 failed")
        await asyncio.sleep(0.1)

        (event,) = server.objects(EVENTS_V1)
        assert event["metadata"]["namespace"] == "team-a"
        assert event["metadata"]["name"] == f"web.{int(1767225601.5 * 1e9):x}"
        assert event["apiVersion"] == "events.k8s.io/v1"
        assert event["eventTime"] == "2026-01-01T00:00:01.500000Z"
        assert event["reportingController"] == "kube-proxy"
        assert event["reportingInstance"] == "kube-proxy-host1"
        assert event["regarding"] == {
            "apiVersion": "v1",
            "kind": "Service",
            "namespace": "team-a",
            "name": "web",
        }
        assert (event["type"], event["reason"], event["action"], event["note"]) == (
            "Warning",
            REASON,
            "Listen",
            "node n1 failed",
        )
        assert "series" not in event


@pytest.mark.looptime
async def test_repeats_become_one_series_patched_once_then_at_its_end(
    server: FakeApiServer,
) -> None:
    async with running(server) as recorder:
        for note in ("first", "second", "third", "fourth"):
            recorder.eventf(WEB, "Warning", REASON, "Listen", note)
            await asyncio.sleep(10)

        (event,) = server.objects(EVENTS_V1)
        assert event["note"] == "first"  # the note is not part of what makes a repeat
        assert event["series"] == {"count": 2, "lastObservedTime": "2026-01-01T00:00:10.000000Z"}
        assert len(server.calls_to("create", "events")) == 1
        assert len(server.calls_to("patch", "events")) == 1

        # a check every 6 minutes ends a series not seen for 6 minutes, with its count
        await asyncio.sleep(12 * 60)
        (event,) = server.objects(EVENTS_V1)
        assert event["series"] == {"count": 4, "lastObservedTime": "2026-01-01T00:00:30.000000Z"}

        recorder.eventf(WEB, "Warning", REASON, "Listen", "again")  # forgotten: a new Event
        await asyncio.sleep(0.1)
        assert len(server.objects(EVENTS_V1)) == 2


@pytest.mark.looptime
async def test_an_event_is_retried_after_a_server_error(
    server: FakeApiServer,
) -> None:
    async with running(server) as recorder:
        server.react("create", "events", ServerError("etcd leader changed"), times=2)
        recorder.eventf(WEB, "Warning", REASON, "Listen", "note")
        await asyncio.sleep(15)
        assert server.objects(EVENTS_V1) == []
        await asyncio.sleep(10)
        assert len(server.objects(EVENTS_V1)) == 1


def test_a_failed_bind_reads_as_gos_listen_error() -> None:
    in_use = OSError(errno.EADDRINUSE, "error while attempting to bind on address")
    assert listen_error("0.0.0.0", 30000, in_use) == (
        "listen tcp4 0.0.0.0:30000: bind: address already in use"
    )
    assert listen_error("fd00::1", 30000, in_use) == (
        "listen tcp6 [fd00::1]:30000: bind: address already in use"
    )


@dataclass
class Recorded:
    events: list[tuple[ObjectReference, str, str, str, str]] = field(default_factory=list)

    def eventf(self, ref: ObjectReference, type: str, reason: str, action: str, note: str) -> None:
        self.events.append((ref, type, reason, action, note))


async def test_a_health_check_port_in_use_records_kube_proxys_warning_on_the_service() -> None:
    recorded = Recorded()
    servers = ServiceHealthServers(
        addresses=("127.0.0.1",),
        health=ProxyHealth(now=lambda: EPOCH),
        node_name="n1",
        events=recorded,
    )
    name = ServiceName("team-a", "web")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        try:
            await servers.sync({name: port}, {name: 1})
            await servers.sync({name: port}, {name: 1})  # tried again at the next sync
        finally:
            await servers.close()

    note = (
        f'node n1 failed to start healthcheck "team-a/web" on port {port}:'
        f" listen tcp4 127.0.0.1:{port}: bind: address already in use"
    )
    assert recorded.events == [(WEB, "Warning", REASON, "Listen", note)] * 2


async def test_a_dual_stack_service_has_a_health_check_per_family_each_failing_on_its_own() -> None:
    """kube-proxy runs a proxier per family, each with its own health check servers: the
    IPv4 port taken gives one Event naming tcp4, and the IPv6 check still answers; a
    single-stack Service's check opens in its own family only."""
    recorded = Recorded()
    health = ProxyHealth(now=lambda: EPOCH)
    servers = {
        "ip": ServiceHealthServers(
            addresses=("127.0.0.1",), health=health, node_name="n1", events=recorded
        ),
        "ip6": ServiceHealthServers(
            addresses=("::1",), health=health, node_name="n1", events=recorded, any_address="::"
        ),
    }
    with socket.socket() as taken, socket.socket() as free:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        free.bind(("127.0.0.1", 0))
        v4_only_port = free.getsockname()[1]
        free.close()
        lb = {"type_": "LoadBalancer", "externalTrafficPolicy": "Local"}
        proxy = Proxy(
            families=("ip", "ip6"),
            service_health=servers,
            services=[
                service("web", "10.96.0.10", namespace="team-a", healthCheckNodePort=port,
                        clusterIPs=["10.96.0.10", "fd00:96::10"], **lb),
                service("v4", "10.96.0.11", namespace="team-a",
                        healthCheckNodePort=v4_only_port, **lb),
            ],
            slices=[
                endpoint_slice("web", [endpoint("fd00:244::5", node=NODE)], namespace="team-a",
                               address_type="IPv6"),
            ],
        )  # fmt: skip
        try:
            assert await proxy.sync(full=True)
            six = await asyncio.open_connection("::1", port)
            six[1].write(b"GET / HTTP/1.0\r\n\r\n")
            answer = await six[0].read()
            six[1].close()
            assert servers["ip6"].local_endpoints(ServiceName("team-a", "v4")) is None
            assert servers["ip"].local_endpoints(ServiceName("team-a", "v4")) == 0
        finally:
            for s in servers.values():
                await s.close()

    note = (
        f'node n1 failed to start healthcheck "team-a/web" on port {port}:'
        f" listen tcp4 127.0.0.1:{port}: bind: address already in use"
    )
    assert recorded.events == [(WEB, "Warning", REASON, "Listen", note)]
    assert answer.startswith(b"HTTP/1.0 200 OK"), answer  # one local IPv6 endpoint
    assert b'"localEndpoints": 1' in answer
