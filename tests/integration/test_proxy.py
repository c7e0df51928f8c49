"""The service proxy with real packets: Services and EndpointSlices made through the real
apiserver, watched by the agent's caches, turned into nftables rules by ProxyManager inside a
"node" network namespace, and exercised by HTTP and UDP clients in other namespaces (see
proxy_topology.py). Nothing touches the root namespace's ruleset.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import json
import random
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import aiohttp
import prometheus_client
import pytest
from harness.controlplane import ControlPlane
from harness.versions import load_versions
from proxy_topology import BACKENDS, CLIENT_IP, NODE_IP, Topology

from nodeagent.apiserver import ApiClient, PatchType, Resource, load_kubeconfig
from nodeagent.clock import RealClock
from nodeagent.nft import NFTables
from nodeagent.proxy.conntrack import ConntrackTool
from nodeagent.proxy.health import ProxyHealth
from nodeagent.proxy.healthserver import ServiceHealthServers
from nodeagent.proxy.inspect import Row, service_table
from nodeagent.proxy.manager import ProxyManager
from nodeagent.proxy.metricsserver import ProxyCollector, serve_proxy_metrics
from nodeagent.proxy.recorder import EVENTS_V1, ProxyEventRecorder, reporting_instance
from nodeagent.proxy.service import proxy_caches
from nodeagent.proxy.settings import ProxySettings

pytestmark = pytest.mark.integration

NODE_NAME = "px-node"
VERSIONS = load_versions()


@pytest.fixture(scope="module")
def topology() -> Iterator[Topology]:
    topo = Topology(prefix=f"na-px{secrets.token_hex(2)}")
    try:
        topo.up()
        yield topo
    finally:
        topo.down()


class Cluster:
    def __init__(self, plane: ControlPlane, namespace: str) -> None:
        self.plane = plane
        self.namespace = namespace

    async def service(
        self, name: str, *, port: int = 80, protocol: str = "TCP", **spec: Any
    ) -> Any:
        body = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"ports": [{"name": "p", "port": port, "protocol": protocol}], **spec},
        }
        await asyncio.to_thread(self.plane.apply, body)
        return await asyncio.to_thread(self.plane.get_json, "-n", self.namespace, "service", name)

    async def endpoints(
        self, name: str, backends: list[str], *, port: int = 8080, protocol: str = "TCP",
        node: str = NODE_NAME,
    ) -> None:  # fmt: skip
        body = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{name}-px",
                "namespace": self.namespace,
                "labels": {
                    "kubernetes.io/service-name": name,
                    "endpointslice.kubernetes.io/managed-by": "nodeagent-tests",
                },
            },
            "addressType": "IPv4",
            "ports": [{"name": "p", "port": port, "protocol": protocol}],
            "endpoints": [
                {"addresses": [BACKENDS[b]], "nodeName": node, "conditions": {"ready": True}}
                for b in backends
            ],
        }
        await asyncio.to_thread(self.plane.apply, body)

    async def delete(self, *what: str) -> None:
        await asyncio.to_thread(self.plane.kubectl, "-n", self.namespace, "delete", "--wait", *what)

    async def label(self, what: str, label: str) -> None:
        await asyncio.to_thread(self.plane.kubectl, "-n", self.namespace, "label", what, label)


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[Cluster]:
    namespace = f"px-{secrets.token_hex(3)}"
    control_plane.kubectl("create", "namespace", namespace)
    try:
        yield Cluster(control_plane, namespace)
    finally:
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


class RunningProxy:
    """A ProxyManager with its own API client and caches, as the agent wires it."""

    def __init__(
        self, plane: ControlPlane, topo: Topology, *, health_on: str | None = None
    ) -> None:
        self.api = ApiClient(endpoint=load_kubeconfig(plane.admin_kubeconfig))
        self.events = ProxyEventRecorder(
            api=self.api, clock=RealClock(), instance=reporting_instance("px-host")
        )
        # the Services' health checks, on this address of the test's own namespace
        service_health = None
        if health_on is not None:
            service_health = ServiceHealthServers(
                addresses=(health_on,),
                health=ProxyHealth(now=RealClock().now),
                node_name=NODE_NAME,
                events=self.events,
            )  # the IPv4 family's, the test's only one
        self.service_health = service_health
        services, slices = proxy_caches(self.api)
        in_node = ("ip", "netns", "exec", topo.node)
        self.manager = ProxyManager(
            settings=ProxySettings(
                node_name=NODE_NAME,
                cluster_cidrs=(VERSIONS.cluster_cidr,),
                service_cidrs=(VERSIONS.service_cidr,),
                nodeport_ips=(NODE_IP,),  # sync periods as the agent's defaults: nothing forced
            ),
            services=services,
            slices=slices,
            nft={"ip": NFTables(family="ip", table="nodeagent", argv=(*in_node, "nft"))},
            conntrack=ConntrackTool(argv=(*in_node, "conntrack")),
            clock=RealClock(),
            service_health={"ip": service_health} if service_health is not None else None,
        )
        runs = (services.run(), slices.run(), self.events.run(), self.manager.run())
        self.tasks = [asyncio.create_task(t) for t in runs]

    async def stop(self) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.service_health is not None:
            await self.service_health.close()
        await self.api.aclose()


@contextlib.asynccontextmanager
async def running_proxy(
    plane: ControlPlane, topo: Topology, *, health_on: str | None = None
) -> AsyncIterator[ProxyManager]:
    proxy = RunningProxy(plane, topo, health_on=health_on)
    try:
        await eventually(lambda: _synced(proxy.manager), what="the first full sync")
        yield proxy.manager
    finally:
        await proxy.stop()


async def _synced(manager: ProxyManager) -> bool:
    return manager.metrics.full_sync_duration.count > 0


async def eventually(
    check: Callable[[], Awaitable[bool]], *, what: str, within: float = 20.0
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


async def answers(
    topo: Topology, src: str, host: str, port: int, want: set[str], **kw: Any
) -> None:
    async def check() -> bool:
        return set(await topo.probe(src, host, port, **kw)) <= want

    await eventually(check, what=f"{host}:{port} to answer one of {sorted(want)}")


async def test_clusterip_reaches_every_endpoint_from_outside_and_from_pods(
    control_plane: ControlPlane, topology: Topology, cluster: Cluster
) -> None:
    async with running_proxy(control_plane, topology):
        svc = await cluster.service("web")
        await cluster.endpoints("web", ["b1", "b2", "b3"])
        ip = svc["spec"]["clusterIP"]
        await answers(topology, "client", ip, 80, set(BACKENDS))

        from_client = await topology.probe("client", ip, 80, count=60)
        from_pod = await topology.probe("pod", ip, 80, count=60)

        assert set(from_client) == set(BACKENDS)
        assert set(from_pod) == set(BACKENDS)
        flows = await topology.run("node", "conntrack", "-L", "-p", "tcp", "--orig-dst", ip)
        assert f"src={CLIENT_IP}" in flows
        assert f"dst={CLIENT_IP}" not in flows  # replies go to the node: masqueraded
        await cluster.delete("service/web", "endpointslice/web-px")


async def test_nodeport_works_from_the_client_namespace(
    control_plane: ControlPlane, topology: Topology, cluster: Cluster
) -> None:
    async with running_proxy(control_plane, topology):
        svc = await cluster.service("np", type="NodePort")
        await cluster.endpoints("np", ["b1", "b2", "b3"])
        node_port = svc["spec"]["ports"][0]["nodePort"]
        await answers(topology, "client", NODE_IP, node_port, set(BACKENDS))

        got = await topology.probe("client", NODE_IP, node_port, count=40)
        assert set(got) == set(BACKENDS)
        await cluster.delete("service/np", "endpointslice/np-px")


async def test_client_ip_affinity_keeps_one_backend(
    control_plane: ControlPlane, topology: Topology, cluster: Cluster
) -> None:
    async with running_proxy(control_plane, topology):
        svc = await cluster.service("sticky", sessionAffinity="ClientIP")
        await cluster.endpoints("sticky", ["b1", "b2", "b3"])
        ip = svc["spec"]["clusterIP"]
        await answers(topology, "client", ip, 80, set(BACKENDS))

        got = await topology.probe("client", ip, 80, count=30)
        from_pod = await topology.probe("pod", ip, 80, count=30)

        assert len(set(got)) == 1, got
        assert len(set(from_pod)) == 1, from_pod
        await cluster.delete("service/sticky", "endpointslice/sticky-px")


async def test_scaling_endpoints_to_zero_refuses_connections(
    control_plane: ControlPlane, topology: Topology, cluster: Cluster
) -> None:
    async with running_proxy(control_plane, topology):
        svc = await cluster.service("scaled")
        await cluster.endpoints("scaled", ["b1", "b2"])
        ip = svc["spec"]["clusterIP"]
        await answers(topology, "client", ip, 80, {"b1", "b2"})

        await cluster.endpoints("scaled", [])
        await answers(topology, "client", ip, 80, {"refused"})

        assert await topology.probe("client", ip, 80, count=5) == ["refused"] * 5
        assert await topology.probe("pod", ip, 80, count=5) == ["refused"] * 5
        await cluster.delete("service/scaled", "endpointslice/scaled-px")


async def test_local_policy_without_local_endpoints_drops(
    control_plane: ControlPlane, topology: Topology, cluster: Cluster
) -> None:
    async with running_proxy(control_plane, topology):
        svc = await cluster.service("local", type="NodePort", externalTrafficPolicy="Local")
        node_port = svc["spec"]["ports"][0]["nodePort"]
        await cluster.endpoints("local", ["b1"], node=NODE_NAME)
        await answers(topology, "client", NODE_IP, node_port, {"b1"})

        await cluster.endpoints("local", ["b1"], node="another-node")
        await answers(topology, "client", NODE_IP, node_port, {"timeout"}, wait=0.5)

        assert (
            await topology.probe("client", NODE_IP, node_port, count=3, wait=0.5) == ["timeout"] * 3
        )  # dropped, not refused
        assert await topology.probe("pod", svc["spec"]["clusterIP"], 80) == ["b1"]
        await cluster.delete("service/local", "endpointslice/local-px")


async def test_deleting_a_service_removes_every_trace_of_it(
    control_plane: ControlPlane, topology: Topology, cluster: Cluster
) -> None:
    async with running_proxy(control_plane, topology):
        table = NFTables(
            family="ip", table="nodeagent", argv=("ip", "netns", "exec", topology.node, "nft")
        )
        before = await table.ruleset()
        assert before is not None

        svc = await cluster.service("gone", type="NodePort", sessionAffinity="ClientIP",
                                    externalIPs=["198.51.100.200"])  # fmt: skip
        await cluster.endpoints("gone", ["b1", "b2"])
        await answers(topology, "client", svc["spec"]["clusterIP"], 80, {"b1", "b2"})
        during = await table.ruleset()
        assert during is not None
        assert during.dump() != before.dump()

        await cluster.delete("service/gone", "endpointslice/gone-px")
        await answers(topology, "client", svc["spec"]["clusterIP"], 80, {"timeout"}, wait=0.5)

        async def as_before() -> bool:
            after = await table.ruleset()
            return after is not None and after.dump() == before.dump()

        # The partial sync that removed the Service left the table as it was before it.
        with contextlib.suppress(AssertionError):
            await eventually(as_before, what="the table as it was before the Service", within=5.0)
        after = await table.ruleset()
        assert after is not None
        diff = difflib.unified_diff(
            before.dump().splitlines(), after.dump().splitlines(), lineterm=""
        )
        assert after.dump() == before.dump(), "\n".join(diff)


async def test_labels_hand_a_service_to_another_proxy_and_back(
    control_plane: ControlPlane, topology: Topology, cluster: Cluster
) -> None:
    """kube-proxy's selectors: an EndpointSlice labelled service.kubernetes.io/headless does not
    count (the Service rejects, as without endpoints); a Service labelled
    service.kubernetes.io/service-proxy-name is another proxy's (no rules at all). Taking the
    label off brings the rules back."""
    in_node = ("ip", "netns", "exec", topology.node)
    table = NFTables(family="ip", table="nodeagent", argv=(*in_node, "nft"))
    async with running_proxy(control_plane, topology):
        svc = await cluster.service("owned")
        await cluster.endpoints("owned", ["b1"])
        ip = svc["spec"]["clusterIP"]
        await answers(topology, "client", ip, 80, {"b1"})

        async def rows() -> list[Row]:
            state = await table.ruleset()
            assert state is not None
            return [r for r in service_table(state) if r.service == f"{cluster.namespace}/owned:p"]

        async def listing() -> str:
            return await topology.run("node", "nft", "list", "table", "ip", "nodeagent")

        assert [(r.entry, r.endpoints) for r in await rows()] == [
            (f"{ip}:80/tcp", (f"{BACKENDS['b1']}:8080",))
        ]
        assert ip in await listing()

        await cluster.label("endpointslice/owned-px", "service.kubernetes.io/headless=")
        await answers(topology, "client", ip, 80, {"refused"})
        assert [(r.chain, r.endpoints) for r in await rows()] == [("reject (no endpoints)", ())]
        await cluster.label("endpointslice/owned-px", "service.kubernetes.io/headless-")
        await answers(topology, "client", ip, 80, {"b1"})

        await cluster.label("service/owned", "service.kubernetes.io/service-proxy-name=foo-bar")
        await answers(topology, "client", ip, 80, {"timeout"}, wait=0.5)
        assert await rows() == []
        assert ip not in await listing()
        await cluster.label("service/owned", "service.kubernetes.io/service-proxy-name-")
        await answers(topology, "client", ip, 80, {"b1"})
        assert ip in await listing()
        await cluster.delete("service/owned", "endpointslice/owned-px")


async def test_a_stale_udp_flow_is_cleared_when_its_endpoint_goes_away(
    control_plane: ControlPlane, topology: Topology, cluster: Cluster
) -> None:
    async with running_proxy(control_plane, topology):
        svc = await cluster.service("dns", port=53, protocol="UDP")
        ip = svc["spec"]["clusterIP"]
        await cluster.endpoints("dns", ["b1"], port=5353, protocol="UDP")
        await answers(topology, "client", ip, 53, {"b1"}, proto="udp", sport=40053)
        flows = await topology.run("node", "conntrack", "-L", "-p", "udp", "--orig-dst", ip)
        assert BACKENDS["b1"] in flows  # the flow is pinned to b1

        await cluster.endpoints("dns", ["b2"], port=5353, protocol="UDP")

        async def flow_gone() -> bool:
            out = await topology.run("node", "conntrack", "-L", "-p", "udp", "--orig-dst", ip)
            return BACKENDS["b1"] not in out

        await eventually(flow_gone, what="the stale UDP flow to b1 to be deleted")
        # the same client socket (same 5-tuple) now reaches b2, although b1 still answers
        got = await topology.probe("client", ip, 53, proto="udp", sport=40053)
        flows = await topology.run("node", "conntrack", "-L", "-p", "udp")
        assert got == ["b2"], flows
        await cluster.delete("service/dns", "endpointslice/dns-px")


def _taken_node_port() -> socket.socket:
    """A listener on 127.0.0.1 at a free port of the NodePort range, held by the test."""
    for port in random.sample(range(30000, 32768), 200):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        s.listen()
        return s
    raise AssertionError("no free port in the NodePort range")


async def test_a_health_check_port_in_use_gives_the_service_kube_proxys_warning_event(
    control_plane: ControlPlane, topology: Topology, cluster: Cluster
) -> None:
    with _taken_node_port() as taken:
        port = taken.getsockname()[1]
        async with running_proxy(control_plane, topology, health_on="127.0.0.1") as manager:
            await cluster.service(
                "lb", type="LoadBalancer", externalTrafficPolicy="Local", healthCheckNodePort=port
            )
            api = ApiClient(endpoint=load_kubeconfig(control_plane.admin_kubeconfig))
            found: list[Any] = []

            async def event_posted() -> bool:
                listed = await api.list(EVENTS_V1, namespace=cluster.namespace)
                found[:] = [
                    e for e in listed.items if e.get("reason") == "FailedToStartServiceHealthcheck"
                ]
                return bool(found)

            try:
                await eventually(event_posted, what="the FailedToStartServiceHealthcheck Event")
            finally:
                await api.aclose()
            assert manager.metrics.sync_duration.count > 0
            (event,) = found
            assert event["type"] == "Warning"
            assert event["action"] == "Listen"
            assert event["reportingController"] == "kube-proxy"
            assert event["reportingInstance"] == "kube-proxy-px-host"
            assert event["regarding"] == {
                "apiVersion": "v1",
                "kind": "Service",
                "namespace": cluster.namespace,
                "name": "lb",
            }
            assert event["note"] == (
                f'node {NODE_NAME} failed to start healthcheck "{cluster.namespace}/lb" on port'
                f" {port}: listen tcp4 127.0.0.1:{port}: bind: address already in use"
            )
            await cluster.delete("service/lb")


async def test_the_conntrack_reconciler_histogram_is_scraped_after_a_udp_endpoint_change(
    control_plane: ControlPlane, topology: Topology, cluster: Cluster
) -> None:
    name = "kubeproxy_conntrack_reconciler_sync_duration_seconds"
    async with running_proxy(control_plane, topology) as manager:
        registry = prometheus_client.CollectorRegistry(auto_describe=False)
        registry.register(ProxyCollector(lambda: manager.metrics, ("ip",)))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            address = f"127.0.0.1:{s.getsockname()[1]}"
        server = asyncio.create_task(serve_proxy_metrics(address, registry))
        try:
            async with aiohttp.ClientSession() as http:

                async def count() -> float:
                    async with http.get(f"http://{address}/metrics") as r:
                        text = await r.text()
                    for line in text.splitlines():
                        if line.startswith(f'{name}_count{{ip_family="IPv4"}}'):
                            return float(line.split()[-1])
                    return 0.0

                async def scraped() -> bool:
                    with contextlib.suppress(aiohttp.ClientError):
                        await count()
                        return True
                    return False

                await eventually(scraped, what="the metrics server")
                seen = await count()
                await cluster.service("ntp", port=123, protocol="UDP")
                await cluster.endpoints("ntp", ["b1"], port=5353, protocol="UDP")

                async def observed() -> bool:
                    return await count() > seen

                await eventually(observed, what=f"{name} to count the cleanup pass")
                async with http.get(f"http://{address}/metrics") as r:
                    text = await r.text()
                assert f"# TYPE {name} histogram" in text
                assert f'{name}_bucket{{ip_family="IPv4",le="16.384"}}' in text
        finally:
            server.cancel()
            await asyncio.gather(server, return_exceptions=True)
        await cluster.delete("service/ntp", "endpointslice/ntp-px")


TRAFFIC = """
import json, socket, sys, time
host, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
counts = {}
end = time.monotonic() + seconds
while time.monotonic() < end:
    try:
        s = socket.create_connection((host, port), timeout=2)
        s.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
        data = b""
        while chunk := s.recv(4096):
            data += chunk
        s.close()
        answer = data.split(b"\\r\\n\\r\\n", 1)[-1].decode().strip() or "empty"
    except OSError as e:
        answer = f"failed: {type(e).__name__}"
    counts[answer] = counts.get(answer, 0) + 1
    time.sleep(0.005)
print(json.dumps(counts))
"""


async def test_traffic_survives_200_endpoint_updates_and_an_agent_restart(
    control_plane: ControlPlane, topology: Topology, cluster: Cluster
) -> None:
    slices = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True)
    proxy = RunningProxy(control_plane, topology)
    # a client of its own: a request on a client that also carries two watches can hang
    # (reported to the apiserver client's owner); the agent's proxy itself only watches
    writer = ApiClient(endpoint=load_kubeconfig(control_plane.admin_kubeconfig))
    traffic: asyncio.Task[str] | None = None
    try:
        await eventually(lambda: _synced(proxy.manager), what="the first full sync")
        svc = await cluster.service("busy")
        await cluster.endpoints("busy", ["b1", "b2"])
        ip = svc["spec"]["clusterIP"]
        await answers(topology, "client", ip, 80, {"b1", "b2"})
        traffic = asyncio.create_task(
            topology.run("client", "python3", "-c", TRAFFIC, ip, "80", "14")
        )
        for i in range(200):
            backends = ["b1", "b2", "b3"] if i % 2 == 0 else ["b1", "b2"]
            patch = {"endpoints": [
                {"addresses": [BACKENDS[b]], "nodeName": NODE_NAME, "conditions": {"ready": True}}
                for b in backends
            ]}  # fmt: skip
            await writer.patch(slices, "busy-px", patch, patch_type=PatchType.MERGE,
                               namespace=cluster.namespace)  # fmt: skip
            if i == 100:  # the agent restarts: its rules stay until the new one has synced
                old, proxy = proxy, RunningProxy(control_plane, topology)
                await old.stop()
            await asyncio.sleep(0.05)
        counts = json.loads(await traffic)
        failures = {k: v for k, v in counts.items() if k not in BACKENDS}
        print(f"continuous traffic: {counts}")
        assert set(counts) >= {"b1", "b2", "b3"}
        assert failures == {}, counts
        await cluster.delete("service/busy", "endpointslice/busy-px")
    finally:
        if traffic is not None and not traffic.done():
            traffic.cancel()
            await asyncio.gather(traffic, return_exceptions=True)
        await writer.aclose()
        await proxy.stop()
