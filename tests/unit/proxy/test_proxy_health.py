"""kube-proxy's health answers (``/healthz``, ``/livez``, a Service's healthCheckNodePort) and
topology hints: what the proxy reports and which endpoints it picks."""

from __future__ import annotations

import datetime as dt
import json
import socket

import aiohttp
import prometheus_client
from proxy_builders import NODE, endpoint, endpoint_slice, service

from nodeagent.proxy.api import endpoints_by_port, health_check_node_port
from nodeagent.proxy.health import ProxyHealth, go_json_time, service_health_body
from nodeagent.proxy.healthserver import ServiceHealthServers
from nodeagent.proxy.metrics import ProxyMetrics
from nodeagent.proxy.metricsserver import ProxyCollector
from nodeagent.proxy.model import Endpoint, ServiceName
from nodeagent.proxy.policy import select

T0 = dt.datetime(2026, 11, 27, 23, 30, 0, 120000, tzinfo=dt.UTC)


class Clocks:
    def __init__(self) -> None:
        self.wall = T0
        self.mono = 1000.0

    def advance(self, seconds: float) -> None:
        self.wall += dt.timedelta(seconds=seconds)
        self.mono += seconds

    def health(self) -> ProxyHealth:
        return ProxyHealth(now=lambda: self.wall, monotonic=lambda: self.mono, health_timeout=60)


def test_times_print_as_gos_json_times() -> None:
    assert go_json_time(None) == "0001-01-01T00:00:00Z"
    assert go_json_time(T0) == "2026-11-27T23:30:00.12Z"
    assert go_json_time(T0.replace(microsecond=0)) == "2026-11-27T23:30:00Z"
    east = dt.timezone(dt.timedelta(hours=2))
    assert go_json_time(T0.astimezone(east)) == "2026-11-27T23:30:00.12Z"


def test_before_the_first_sync_the_proxy_is_healthy_with_no_status() -> None:
    health = Clocks().health()
    assert health.healthz() == (
        200,
        '{"lastUpdated":"2026-11-27T23:30:00.12Z","currentTime":"2026-11-27T23:30:00.12Z",'
        '"nodeEligible":true,"healthy":true}',
    )
    assert health.livez() == (
        200,
        '{"lastUpdated":"2026-11-27T23:30:00.12Z","currentTime":"2026-11-27T23:30:00.12Z",'
        '"healthy":true}',
    )


def test_the_proxy_is_healthy_until_a_queued_change_waits_past_the_timeout() -> None:
    clocks = Clocks()
    health = clocks.health()
    health.updated("ip")
    health.updated("ip6")
    health.queued("ip")
    clocks.advance(59)
    assert health.healthz()[0] == 200
    clocks.advance(1)
    # kube-proxy's ProxyHealth: lastUpdated the latest sync of any family, status per family
    assert health.healthz() == (
        503,
        '{"lastUpdated":"2026-11-27T23:30:00.12Z","currentTime":"2026-11-27T23:31:00.12Z",'
        '"nodeEligible":true,"healthy":false,"status":{'
        '"IPv4":{"lastUpdated":"2026-11-27T23:30:00.12Z","healthy":false},'
        '"IPv6":{"lastUpdated":"2026-11-27T23:30:00.12Z","healthy":true}}}',
    )
    status, body = health.livez()
    assert status == 503 and "nodeEligible" not in json.loads(body)
    health.updated("ip")
    status, body = health.healthz()
    assert status == 200
    assert json.loads(body)["lastUpdated"] == "2026-11-27T23:31:00.12Z"  # now, when healthy
    assert json.loads(body)["status"]["IPv4"] == {
        "lastUpdated": "2026-11-27T23:31:00.12Z",
        "healthy": True,
    }
    assert health.livez()[0] == 200


def test_a_change_queued_for_a_family_never_synced_does_not_make_the_proxy_unhealthy() -> None:
    clocks = Clocks()
    health = clocks.health()
    health.queued("ip")
    clocks.advance(600)
    assert health.healthz()[0] == 200  # as kube-proxy: only families synced once are judged


def test_a_node_being_deleted_or_tainted_for_deletion_fails_healthz_but_not_livez() -> None:
    health = Clocks().health()
    node = {"metadata": {"name": NODE}, "spec": {}}
    taint = {"key": "ToBeDeletedByClusterAutoscaler", "value": "1", "effect": "NoSchedule"}
    for bad in (
        {**node, "spec": {"taints": [taint]}},
        {"metadata": {"name": NODE, "deletionTimestamp": "2026-11-27T23:00:00Z"}},
        None,
    ):
        health.sync_node(bad)
        status, body = health.healthz()
        assert status == 503, bad
        assert json.loads(body)["nodeEligible"] is False and json.loads(body)["healthy"] is True
        assert json.loads(body)["lastUpdated"] == "0001-01-01T00:00:00Z"
        assert health.livez()[0] == 200
    health.sync_node(node)
    assert health.healthz()[0] == 200


def test_a_services_health_check_body_is_kube_proxys() -> None:
    assert service_health_body("ns", "web", 2, True) == (
        '{\n\t"service": {\n\t\t"namespace": "ns",\n\t\t"name": "web"\n\t},\n'
        '\t"localEndpoints": 2,\n\t"serviceProxyHealthy": true\n}'
    )


def test_only_a_local_load_balancer_has_a_health_check_node_port() -> None:
    lb = service("lb", "10.96.0.9", type_="LoadBalancer", externalTrafficPolicy="Local")
    lb["spec"]["healthCheckNodePort"] = 31000
    assert health_check_node_port(lb) == 31000
    lb["spec"]["externalTrafficPolicy"] = "Cluster"
    assert health_check_node_port(lb) is None
    np = service("np", "10.96.0.9", type_="NodePort", externalTrafficPolicy="Local")
    np["spec"]["healthCheckNodePort"] = 31000
    assert health_check_node_port(np) is None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_health_check_node_port_answers_200_with_local_endpoints_and_503_without() -> None:
    health = Clocks().health()
    servers = ServiceHealthServers(addresses=("127.0.0.1",), health=health)
    name = ServiceName("ns", "web")
    port = _free_port()
    try:
        await servers.sync({name: port}, {name: 1})
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/") as r:
                assert r.status == 200
                assert r.headers["Content-Type"] == "application/json"
                assert r.headers["X-Load-Balancing-Endpoint-Weight"] == "1"
                assert json.loads(await r.text())["localEndpoints"] == 1
            await servers.sync({name: port}, {})
            async with session.get(f"http://127.0.0.1:{port}/anything") as r:
                assert r.status == 503
                assert r.headers["X-Load-Balancing-Endpoint-Weight"] == "0"
                assert json.loads(await r.text()) == {
                    "service": {"namespace": "ns", "name": "web"},
                    "localEndpoints": 0,
                    "serviceProxyHealthy": True,
                }
        await servers.sync({}, {})
        with socket.socket() as s:  # closed with the Service's health check
            assert s.connect_ex(("127.0.0.1", port)) != 0
    finally:
        await servers.close()


def _hinted(
    ip: str, node: str, zones: tuple[str, ...] = (), nodes: tuple[str, ...] = ()
) -> Endpoint:
    return Endpoint(ip, 80, node, zone_hints=frozenset(zones), node_hints=frozenset(nodes))


def test_endpoint_slice_hints_are_read() -> None:
    ep = endpoint("10.244.1.1", node=NODE)
    ep["hints"] = {"forZones": [{"name": "zone-a"}], "forNodes": [{"name": NODE}]}
    [(_key, (found,))] = endpoints_by_port([endpoint_slice("web", [ep])]).items()
    assert found.zone_hints == {"zone-a"} and found.node_hints == {NODE}


def test_zone_hints_keep_traffic_in_the_nodes_zone_when_every_endpoint_has_one() -> None:
    a = _hinted("10.0.0.1", "n1", zones=("zone-a",))
    b = _hinted("10.0.0.2", "n3", zones=("zone-b",))
    assert select([a, b], node_name="n2", zone="zone-b").cluster == (b,)
    assert select([a, b], node_name="n1", zone="zone-a").cluster == (a,)
    # no endpoint for this zone, a node without a zone, an endpoint without a hint: all of them
    assert select([a, b], node_name="n4", zone="zone-c").cluster == (a, b)
    assert select([a, b], node_name="n4", zone="").cluster == (a, b)
    bare = Endpoint("10.0.0.3", 80, "n3")
    assert select([a, b, bare], node_name="n2", zone="zone-b").cluster == (a, b, bare)


def test_node_hints_come_before_zone_hints() -> None:
    a = _hinted("10.0.0.1", "n1", zones=("zone-a",), nodes=("n1",))
    b = _hinted("10.0.0.2", "n2", zones=("zone-a",), nodes=("n2",))
    assert select([a, b], node_name="n1", zone="zone-a").cluster == (a,)
    # no endpoint for node n3: its zone's
    assert select([a, b], node_name="n3", zone="zone-a").cluster == (a, b)


def test_topology_hints_never_leave_only_terminating_endpoints_or_narrow_local_ones() -> None:
    a = _hinted("10.0.0.1", NODE, zones=("zone-a",))
    b = _hinted("10.0.0.2", "n3", zones=("zone-b",))
    chosen = select([a, b], node_name=NODE, zone="zone-b")
    assert chosen.cluster == (b,) and chosen.local == (a,)


def test_the_metrics_carry_kube_proxys_names_and_ip_family_labels() -> None:
    m = ProxyMetrics()
    m.sync_duration.observe(0.02)
    m.endpoint_changes.inc(3)
    m.count_health("healthz", 200)
    m.no_local_endpoints["external"] = 1
    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(ProxyCollector(lambda: m, ("ip",)))
    text = prometheus_client.generate_latest(registry).decode()
    for line in (
        'kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="0.032"} 1.0',
        'kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"} 1.0',
        'kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} 0.0',
        "kubeproxy_sync_proxy_rules_endpoint_changes_total 3.0",
        "kubeproxy_sync_proxy_rules_service_changes_pending 0.0",
        'kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family="IPv4"} 0.0',
        'kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",'
        'traffic_policy="external"} 1.0',
        'kubeproxy_proxy_healthz_total{code="200"} 1.0',
        'kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv4",le="0.25"} 0.0',
    ):
        assert line in text.splitlines(), line


def test_the_conntrack_reconciler_metrics_are_per_family_from_their_first_pass() -> None:
    m = ProxyMetrics()
    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(ProxyCollector(lambda: m, ("ip", "ip6")))
    before = prometheus_client.generate_latest(registry).decode().splitlines()
    assert not [line for line in before if line.startswith("kubeproxy_conntrack_reconciler")]

    m.conntrack_sync_duration["ip"].observe(0.003)
    m.conntrack_deleted["ip"].inc(2)
    text = prometheus_client.generate_latest(registry).decode().splitlines()
    for line in (
        "# HELP kubeproxy_conntrack_reconciler_sync_duration_seconds"
        " ReconcileConntrackFlowsLatency latency in seconds",
        "# TYPE kubeproxy_conntrack_reconciler_sync_duration_seconds histogram",
        'kubeproxy_conntrack_reconciler_sync_duration_seconds_bucket{ip_family="IPv4",le="0.002"}'
        " 0.0",
        'kubeproxy_conntrack_reconciler_sync_duration_seconds_bucket{ip_family="IPv4",le="0.004"}'
        " 1.0",
        'kubeproxy_conntrack_reconciler_sync_duration_seconds_bucket{ip_family="IPv4",le="16.384"}'
        " 1.0",
        'kubeproxy_conntrack_reconciler_sync_duration_seconds_count{ip_family="IPv4"} 1.0',
        'kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family="IPv4"} 2.0',
    ):
        assert line in text, line
    assert not [line for line in text if "conntrack" in line and "IPv6" in line]
