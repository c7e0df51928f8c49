"""What the programmed rules do to packets, traced through FakeNFTables."""

from __future__ import annotations

import re

import pytest
from proxy_builders import (
    EXTERNAL_CLIENT,
    NODE,
    NODE_IP,
    NODE_IP6,
    POD_CLIENT,
    Proxy,
    endpoint,
    endpoint_slice,
    service,
)

THREE = [endpoint("10.244.1.1"), endpoint("10.244.2.1"), endpoint("10.244.3.1")]
THREE_TARGETS = ["10.244.1.1:8080", "10.244.2.1:8080", "10.244.3.1:8080"]


async def proxy_with(*objects: dict[str, object], **settings: object) -> Proxy:
    services = [o for o in objects if "spec" in o]
    slices = [o for o in objects if "endpoints" in o]
    p = Proxy(services=services, slices=slices, **settings)  # type: ignore[arg-type]
    assert await p.sync()
    return p


async def test_clusterip_from_outside_the_cluster_is_masqueraded_to_one_of_three_endpoints() -> (
    None
):
    p = await proxy_with(service("web", "10.96.0.10"), endpoint_slice("web", THREE))

    t = p.trace(EXTERNAL_CLIENT, "10.96.0.10", 80)

    assert t.verdicts == {"ACCEPT"}
    assert t.endpoints == THREE_TARGETS
    assert t.masqueraded


async def test_clusterip_from_a_pod_keeps_the_pod_source_address() -> None:
    p = await proxy_with(service("web", "10.96.0.10"), endpoint_slice("web", THREE))

    t = p.trace(POD_CLIENT, "10.96.0.10", 80)

    assert t.endpoints == THREE_TARGETS
    assert not any(o.masquerade for o in t.outcomes)


async def test_masquerade_all_masquerades_pod_traffic_too() -> None:
    p = await proxy_with(
        service("web", "10.96.0.10"), endpoint_slice("web", THREE), masquerade_all=True
    )
    assert p.trace(POD_CLIENT, "10.96.0.10", 80).masqueraded


async def test_a_pod_reaching_itself_through_its_service_is_masqueraded() -> None:
    p = await proxy_with(service("web", "10.96.0.10"), endpoint_slice("web", THREE))

    t = p.trace("10.244.2.1", "10.96.0.10", 80)

    by_target = {o.endpoint: o.masquerade for o in t.outcomes}
    assert by_target == {
        "10.244.1.1:8080": False,
        "10.244.2.1:8080": True,
        "10.244.3.1:8080": False,
    }


async def test_a_service_without_endpoints_is_rejected() -> None:
    p = await proxy_with(service("web", "10.96.0.10"))

    assert p.trace(EXTERNAL_CLIENT, "10.96.0.10", 80).verdicts == {"REJECT"}
    assert p.trace(NODE_IP, "10.96.0.10", 80, local=True).verdicts == {"REJECT"}


async def test_other_ports_of_a_clusterip_are_rejected_and_unallocated_ips_dropped() -> None:
    p = await proxy_with(service("web", "10.96.0.10"), endpoint_slice("web", THREE))

    assert p.trace(POD_CLIENT, "10.96.0.10", 81).verdicts == {"REJECT"}
    assert p.trace(POD_CLIENT, "10.96.0.99", 80).verdicts == {"DROP"}
    assert p.trace(POD_CLIENT, "10.97.0.1", 80).verdicts == {"ACCEPT"}  # not a service CIDR


async def test_only_ready_endpoints_are_used() -> None:
    eps = [
        endpoint("10.244.1.1"),
        endpoint("10.244.2.1", ready=False, serving=True, terminating=True),
    ]
    p = await proxy_with(service("web", "10.96.0.10"), endpoint_slice("web", eps))
    assert p.trace(POD_CLIENT, "10.96.0.10", 80).endpoints == ["10.244.1.1:8080"]


async def test_serving_terminating_endpoints_are_used_when_none_is_ready() -> None:
    eps = [
        endpoint("10.244.1.1", ready=False, serving=True, terminating=True),
        endpoint("10.244.2.1", ready=False, serving=False, terminating=True),
        endpoint("10.244.3.1", ready=False),
    ]
    p = await proxy_with(service("web", "10.96.0.10"), endpoint_slice("web", eps))
    assert p.trace(POD_CLIENT, "10.96.0.10", 80).endpoints == ["10.244.1.1:8080"]


async def test_nodeport_on_the_node_ip_reaches_every_endpoint_masqueraded() -> None:
    p = await proxy_with(
        service("web", "10.96.0.10", type_="NodePort", node_ports={"http": 30080}),
        endpoint_slice("web", THREE),
    )

    t = p.trace(EXTERNAL_CLIENT, NODE_IP, 30080)
    assert t.endpoints == THREE_TARGETS
    assert t.masqueraded
    assert p.trace(NODE_IP, NODE_IP, 30080, local=True).endpoints == THREE_TARGETS


async def test_nodeport_is_not_served_on_loopback_or_on_other_ports() -> None:
    p = await proxy_with(
        service("web", "10.96.0.10", type_="NodePort", node_ports={"http": 30080}),
        endpoint_slice("web", THREE),
    )
    assert p.trace("127.0.0.1", "127.0.0.1", 30080, local=True).endpoints == []
    assert p.trace(EXTERNAL_CLIENT, NODE_IP, 30081).endpoints == []


async def test_nodeport_without_endpoints_is_rejected() -> None:
    p = await proxy_with(service("web", "10.96.0.10", type_="NodePort", node_ports={"http": 30080}))
    assert p.trace(EXTERNAL_CLIENT, NODE_IP, 30080).verdicts == {"REJECT"}


async def test_external_ips_and_load_balancer_ips_reach_the_endpoints() -> None:
    lb = service(
        "web",
        "10.96.0.10",
        type_="LoadBalancer",
        node_ports={"http": 30080},
        externalIPs=["198.51.100.10"],
        status={
            "loadBalancer": {
                "ingress": [{"ip": "198.51.100.20"}, {"ip": "198.51.100.30", "ipMode": "Proxy"}]
            }
        },
    )
    p = await proxy_with(lb, endpoint_slice("web", THREE))

    for ip in ("198.51.100.10", "198.51.100.20"):
        t = p.trace(EXTERNAL_CLIENT, ip, 80)
        assert t.endpoints == THREE_TARGETS, ip
        assert t.masqueraded
    assert p.trace(EXTERNAL_CLIENT, "198.51.100.30", 80).endpoints == []  # ipMode Proxy


def local_service(**extra: object) -> dict[str, object]:
    return service(
        "web",
        "10.96.0.10",
        type_="NodePort",
        node_ports={"http": 30080},
        externalIPs=["198.51.100.10"],
        externalTrafficPolicy="Local",
        **extra,
    )


async def test_external_local_policy_uses_only_local_endpoints_and_keeps_the_client_address() -> (
    None
):
    eps = [endpoint("10.244.1.1", node=NODE), endpoint("10.244.2.1")]
    p = await proxy_with(local_service(), endpoint_slice("web", eps))

    for dst, port in ((NODE_IP, 30080), ("198.51.100.10", 80)):
        t = p.trace(EXTERNAL_CLIENT, dst, port)
        assert t.endpoints == ["10.244.1.1:8080"]
        assert not t.masqueraded
    assert p.trace(EXTERNAL_CLIENT, "10.96.0.10", 80).endpoints == [
        "10.244.1.1:8080",
        "10.244.2.1:8080",
    ]  # the ClusterIP follows internalTrafficPolicy (Cluster)


async def test_external_local_policy_without_local_endpoints_drops_external_clients() -> None:
    p = await proxy_with(local_service(), endpoint_slice("web", [endpoint("10.244.2.1")]))

    assert p.trace(EXTERNAL_CLIENT, NODE_IP, 30080).verdicts == {"DROP"}
    assert p.trace(EXTERNAL_CLIENT, "198.51.100.10", 80).verdicts == {"DROP"}


async def test_external_local_policy_lets_pods_and_the_node_use_all_endpoints() -> None:
    p = await proxy_with(local_service(), endpoint_slice("web", [endpoint("10.244.2.1")]))

    from_pod = p.trace(POD_CLIENT, "198.51.100.10", 80)
    from_node = p.trace(NODE_IP, NODE_IP, 30080, local=True)
    assert from_pod.endpoints == ["10.244.2.1:8080"]
    assert not from_pod.masqueraded
    assert from_node.endpoints == ["10.244.2.1:8080"]
    assert from_node.masqueraded


async def test_internal_local_policy_without_local_endpoints_drops() -> None:
    p = await proxy_with(
        service("web", "10.96.0.10", internalTrafficPolicy="Local"),
        endpoint_slice("web", [endpoint("10.244.2.1")]),
    )
    assert p.trace(POD_CLIENT, "10.96.0.10", 80).verdicts == {"DROP"}


async def test_internal_local_policy_uses_only_local_endpoints() -> None:
    p = await proxy_with(
        service("web", "10.96.0.10", internalTrafficPolicy="Local"),
        endpoint_slice("web", [endpoint("10.244.1.1", node=NODE), endpoint("10.244.2.1")]),
    )
    assert p.trace(POD_CLIENT, "10.96.0.10", 80).endpoints == ["10.244.1.1:8080"]


async def test_client_ip_affinity_keeps_a_client_on_its_first_endpoint() -> None:
    p = await proxy_with(
        service(
            "web",
            "10.96.0.10",
            sessionAffinity="ClientIP",
            sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}},
        ),
        endpoint_slice("web", THREE),
    )

    first = p.trace(POD_CLIENT, "10.96.0.10", 80, pick=1, record=True)
    again = p.trace(POD_CLIENT, "10.96.0.10", 80)
    other_client = p.trace("10.244.9.9", "10.96.0.10", 80)

    assert len(first.endpoints) == 1
    assert again.endpoints == first.endpoints
    assert other_client.endpoints == THREE_TARGETS
    assert "timeout 60s" in p.dump()


async def test_udp_and_sctp_services_are_balanced_per_protocol() -> None:
    p = await proxy_with(
        service(
            "dns",
            "10.96.0.10",
            ports=[("dns", 53, "UDP"), ("dns-tcp", 53, "TCP"), ("s", 9, "SCTP")],
        ),
        endpoint_slice(
            "dns",
            [endpoint("10.244.1.1")],
            ports=[("dns", 5353, "UDP"), ("dns-tcp", 5354, "TCP"), ("s", 99, "SCTP")],
        ),
    )
    assert p.trace(POD_CLIENT, "10.96.0.10", 53, proto="udp").endpoints == ["10.244.1.1:5353"]
    assert p.trace(POD_CLIENT, "10.96.0.10", 53, proto="tcp").endpoints == ["10.244.1.1:5354"]
    assert p.trace(POD_CLIENT, "10.96.0.10", 9, proto="sctp").endpoints == ["10.244.1.1:99"]


async def test_ipv6_services_get_their_own_table() -> None:
    svc = service(
        "web", "fd00:96::10", type_="NodePort", node_ports={"http": 30080}, ipFamilies=["IPv6"]
    )
    slice6 = endpoint_slice("web", [endpoint("fd00:244:1::1")], address_type="IPv6")
    p = await proxy_with(svc, slice6, families=("ip", "ip6"))

    t = p.trace("2001:db8::7", "fd00:96::10", 80, family="ip6")
    assert t.endpoints == ["[fd00:244:1::1]:8080"]
    assert t.masqueraded
    assert p.trace("2001:db8::7", NODE_IP6, 30080, family="ip6").endpoints == [
        "[fd00:244:1::1]:8080"
    ]
    assert "ip6 daddr" in p.dump("ip6")
    assert "fd00" not in p.dump("ip")


@pytest.mark.parametrize("services", [1, 50])
async def test_the_number_of_chains_does_not_depend_on_the_number_of_services(
    services: int,
) -> None:
    objects: list[dict[str, object]] = []
    for i in range(services):
        objects.append(service(f"s{i}", f"10.96.1.{i + 1}"))
        objects.append(endpoint_slice(f"s{i}", [endpoint(f"10.244.{i}.{j + 1}") for j in range(3)]))
    p = await proxy_with(*objects)
    chains = re.findall(r"^add chain ip nodeagent (\S+)", p.dump(), re.M)
    assert len(chains) == 17  # 16 fixed + cluster-3
