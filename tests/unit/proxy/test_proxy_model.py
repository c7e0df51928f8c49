"""Services and EndpointSlices as the proxy reads them, and its endpoint choices."""

from __future__ import annotations

import pytest
from proxy_builders import NODE, endpoint, endpoint_slice, service

from nodeagent.proxy.api import endpoints_by_port, service_ports
from nodeagent.proxy.model import Endpoint
from nodeagent.proxy.policy import assign_slots, select


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(service("x", "None"), id="headless"),
        pytest.param(
            service("x", "", type_="ExternalName", externalName="example.com"), id="ExternalName"
        ),
        pytest.param(
            {
                **service("x", "10.96.0.1"),
                "metadata": {
                    "name": "x",
                    "namespace": "d",
                    "labels": {"service.kubernetes.io/service-proxy-name": "other"},
                },
            },
            id="owned by another proxy",
        ),
    ],
)
def test_services_the_proxy_leaves_alone(obj: dict[str, object]) -> None:
    assert service_ports(obj) == []


def test_a_service_port_carries_what_the_rules_need() -> None:
    obj = service(
        "web",
        "10.96.0.10",
        type_="LoadBalancer",
        ports=[("http", 80, "TCP"), ("dns", 53, "UDP"), ("weird", 1, "ICMP")],
        node_ports={"http": 30080},
        clusterIPs=["10.96.0.10", "fd00:96::10"],
        externalIPs=["198.51.100.1"],
        sessionAffinity="ClientIP",
        externalTrafficPolicy="Local",
        internalTrafficPolicy="Local",
        status={"loadBalancer": {"ingress": [{"ip": "198.51.100.2"}, {"hostname": "lb.example"}]}},
    )
    http, dns = service_ports(obj)

    assert str(http.name) == "default/web:http"
    assert str(dns.name) == "default/web:dns/udp"
    assert http.cluster_ips == ("10.96.0.10", "fd00:96::10")
    assert (http.node_port, dns.node_port) == (30080, None)
    assert http.external_ips == ("198.51.100.1",)
    assert http.load_balancer_ips == ("198.51.100.2",)
    assert http.affinity_timeout == 10800
    assert http.external_local and http.internal_local


def test_external_traffic_policy_only_counts_for_externally_reachable_services() -> None:
    [port] = service_ports(service("web", "10.96.0.10", externalTrafficPolicy="Local"))
    assert not port.external_local


def test_slices_of_a_service_merge_and_conditions_default_like_the_api() -> None:
    a = endpoint_slice(
        "web", [endpoint("10.244.1.1", node=NODE), endpoint("10.244.2.1", ready=False)]
    )
    b = endpoint_slice("web", [endpoint("10.244.2.1")], name="web-b")
    bare = endpoint_slice("web", [{"addresses": ["10.244.3.1"]}], name="web-c")
    fqdn = endpoint_slice("web", [endpoint("example.com")], name="web-d", address_type="FQDN")

    eps = endpoints_by_port([a, b, bare, fqdn])

    assert eps == {
        ("http", "tcp"): (
            Endpoint("10.244.1.1", 8080, NODE),
            Endpoint("10.244.2.1", 8080, "node-b"),
            Endpoint("10.244.3.1", 8080, "", ready=True, serving=True, terminating=False),
        )
    }


def test_local_endpoints_fall_back_to_serving_terminating_ones_on_this_node() -> None:
    eps = [
        Endpoint("10.0.0.1", 80, "other"),
        Endpoint("10.0.0.2", 80, NODE, ready=False, serving=True, terminating=True),
    ]
    chosen = select(eps, node_name=NODE)
    assert chosen.cluster == (eps[0],)
    assert chosen.local == (eps[1],)


def test_endpoints_keep_their_slots_when_others_come_and_go() -> None:
    a, b, c, d, e = (Endpoint(f"10.0.0.{i}", 80) for i in range(1, 6))

    assert assign_slots([], [c, a, b]) == (a, b, c)
    assert assign_slots([a, b, c], [a, c, d]) == (a, d, c)  # d takes b's slot
    assert assign_slots([a, b, c, d, e], [a, c, d, e]) == (a, e, c, d)  # the last fills the hole
    assert assign_slots([a, b, c], [c]) == (c,)
