"""How the proxy keeps the table in step with Services and EndpointSlices: small partial syncs,
complete full syncs without a window, recovery after failures, and cleanup of stale state."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from proxy_builders import NODE_IP, POD_CLIENT, Proxy, endpoint, endpoint_slice, service

from nodeagent.nft import Chain, Element, Map, NftError, Rule, Table, Verb
from nodeagent.testing.fake_conntrack import Flow

FIVE = [endpoint(f"10.244.{i}.1") for i in range(1, 6)]


def ops(p: Proxy) -> list[str]:
    tx = p.nft["ip"].last_transaction
    assert tx is not None
    return [f"{op.verb.value} {op.obj.kind}" for op in tx.operations]


async def loaded(*extra: dict[str, object], services: int = 3) -> Proxy:
    objects = []
    for i in range(services):
        objects += [service(f"s{i}", f"10.96.0.{i + 10}"), endpoint_slice(f"s{i}", FIVE)]
    objects += extra
    p = Proxy(
        services=[o for o in objects if "spec" in o],
        slices=[o for o in objects if "endpoints" in o],
    )
    assert await p.sync()
    return p


async def test_one_endpoint_change_is_a_small_transaction_of_element_changes() -> None:
    p = await loaded()
    p.slices.put(endpoint_slice("s1", [*FIVE[:4], endpoint("10.244.9.1")]))

    assert await p.sync()

    assert ops(p) == [
        "delete element",  # slot 4 of s1 (hairpin 10.244.5.1 stays: s0 and s2 still use it)
        "add element",  # hairpin 10.244.9.1
        "add element",  # slot 4 of s1 -> 10.244.9.1
    ]
    assert p.trace(POD_CLIENT, "10.96.0.11", 80).endpoints == [
        f"10.244.{i}.1:8080" for i in (1, 2, 3, 4, 9)
    ]


async def test_fewer_endpoints_switch_the_service_to_another_balancing_chain() -> None:
    p = await loaded()
    p.slices.put(endpoint_slice("s1", FIVE[:2]))

    assert await p.sync()

    tx = p.nft["ip"].last_transaction
    assert tx is not None
    assert [op.obj for op in tx.operations if isinstance(op.obj, Chain)] == [
        Chain(name="cluster-2"),
        Chain(name="cluster-2"),
    ]
    assert p.trace(POD_CLIENT, "10.96.0.11", 80).endpoints == ["10.244.1.1:8080", "10.244.2.1:8080"]
    assert len(p.trace(POD_CLIENT, "10.96.0.10", 80).endpoints) == 5


async def test_deleting_a_service_removes_every_trace_of_it() -> None:
    p = await loaded()
    before = p.dump()
    p.services.put(
        service("extra", "10.96.0.99", type_="NodePort", node_ports={"http": 30099},
                externalIPs=["198.51.100.99"], sessionAffinity="ClientIP")
    )  # fmt: skip
    p.slices.put(endpoint_slice("extra", [endpoint("10.244.77.1"), endpoint("10.244.77.2")]))
    assert await p.sync()
    assert p.dump() != before

    p.services.remove("default", "extra")
    p.slices.remove("default", "extra-abc")
    assert await p.sync()
    assert await p.sync(full=True)  # a full sync also drops the now unused chains

    assert p.dump() == before


async def test_a_service_with_two_ports_keeps_its_cluster_ip_while_one_port_remains() -> None:
    p = await loaded(services=0)
    p.services.put(service("web", "10.96.0.10", ports=[("http", 80, "TCP"), ("https", 443, "TCP")]))
    assert await p.sync()
    p.services.put(service("web", "10.96.0.10", ports=[("https", 443, "TCP")]))
    assert await p.sync()

    assert "10.96.0.10" in p.dump().split("add element ip nodeagent cluster-ips")[1]
    assert p.trace(POD_CLIENT, "10.96.0.10", 443).verdicts == {"REJECT"}  # no endpoints
    assert p.trace(POD_CLIENT, "10.96.0.10", 80).verdicts == {"REJECT"}  # undefined port


async def test_a_full_sync_never_removes_the_table_and_rewrites_it_completely() -> None:
    p = await loaded()
    before = p.dump()

    assert await p.sync(full=True)

    tx = p.nft["ip"].last_transaction
    assert tx is not None
    verbs = {(op.verb, op.obj.kind) for op in tx.operations}
    assert (Verb.DELETE, "table") not in verbs
    assert (Verb.FLUSH, "table") not in verbs
    assert str(tx).startswith("add table ip nodeagent")
    assert p.dump() == before


async def test_a_restarted_agent_adopts_the_table_and_keeps_client_affinity() -> None:
    affinity = service("aff", "10.96.0.50", sessionAffinity="ClientIP")
    p = await loaded(affinity, endpoint_slice("aff", FIVE))
    first = p.trace(POD_CLIENT, "10.96.0.50", 80, pick=3, record=True)
    before = p.dump()

    restarted = Proxy(services=p.services.items(), slices=p.slices.items())
    restarted.nft = p.nft
    restarted.manager = type(p.manager)(
        settings=p.settings, services=restarted.services, slices=restarted.slices,
        nft=p.nft, conntrack=restarted.conntrack, clock=restarted.clock,
    )  # fmt: skip
    assert await restarted.sync()

    assert restarted.dump() == before
    assert restarted.trace(POD_CLIENT, "10.96.0.50", 80).endpoints == first.endpoints


async def test_stale_chains_of_our_table_are_removed_by_a_full_sync() -> None:
    p = await loaded()
    tx = p.nft["ip"].new_transaction()
    tx.add(Chain(name="cluster-9"))
    tx.add(Chain(name="from-an-older-version"))
    tx.add(Rule(chain="from-an-older-version", rule="jump cluster-9"))
    await p.nft["ip"].run(tx)

    assert await p.sync(full=True)

    assert "cluster-9" not in await p.nft["ip"].list_names("chains")
    assert "from-an-older-version" not in await p.nft["ip"].list_names("chains")


async def test_a_failed_sync_is_counted_and_followed_by_a_full_sync() -> None:
    p = await loaded()
    p.nft["ip"].fail_next.append(NftError("Error: Could not process rule: Cannot allocate memory"))
    p.slices.put(endpoint_slice("s1", FIVE[:4]))

    assert not await p.sync()
    assert p.manager.metrics.sync_failures.value == 1
    assert len(p.trace(POD_CLIENT, "10.96.0.11", 80).endpoints) == 5  # nothing applied

    assert await p.sync()
    tx = p.nft["ip"].last_transaction
    assert tx is not None
    assert tx.operations[0].obj == Table(comment=tx.operations[0].obj.comment)  # type: ignore[union-attr]
    assert len(p.trace(POD_CLIENT, "10.96.0.11", 80).endpoints) == 4


async def test_stale_udp_flows_are_deleted_when_their_endpoint_goes_away() -> None:
    dns = service("dns", "10.96.0.53", ports=[("dns", 53, "UDP")], type_="NodePort",
                  node_ports={"dns": 30053})  # fmt: skip
    eps = [endpoint("10.244.1.1"), endpoint("10.244.2.1")]
    p = await loaded(dns, endpoint_slice("dns", eps, ports=[("dns", 53, "UDP")]), services=0)
    p.conntrack.flows = {
        Flow("ip", "10.96.0.53", 53, "10.244.1.1"),
        Flow("ip", "10.96.0.53", 53, "10.244.2.1"),
        Flow("ip", NODE_IP, 30053, "10.244.2.1"),
    }

    p.slices.put(endpoint_slice("dns", eps[:1], ports=[("dns", 53, "UDP")]))
    assert await p.sync()

    assert p.conntrack.flows == {Flow("ip", "10.96.0.53", 53, "10.244.1.1")}
    assert p.manager.metrics.conntrack_deleted["ip"].value == 2


async def test_udp_flows_from_before_a_service_had_endpoints_are_deleted() -> None:
    dns = service("dns", "10.96.0.53", ports=[("dns", 53, "UDP")], type_="NodePort",
                  node_ports={"dns": 30053})  # fmt: skip
    p = await loaded(dns, services=0)
    rejected = {Flow("ip", "10.96.0.53", 53, "10.96.0.53"), Flow("ip", NODE_IP, 30053, NODE_IP)}
    # load-balanced between the commit and the cleanup: kept
    balanced = {
        Flow("ip", "10.96.0.53", 53, "10.244.1.1"),
        Flow("ip", NODE_IP, 30053, "10.244.1.1"),
    }
    p.conntrack.flows = rejected | balanced
    p.slices.put(endpoint_slice("dns", [endpoint("10.244.1.1")], ports=[("dns", 53, "UDP")]))

    assert await p.sync()

    assert p.conntrack.flows == balanced
    assert p.manager.metrics.conntrack_deleted["ip"].value == 2


async def test_affinity_to_a_removed_endpoint_is_forgotten_in_the_same_transaction() -> None:
    aff = service("aff", "10.96.0.50", sessionAffinity="ClientIP")
    p = await loaded(aff, endpoint_slice("aff", FIVE), services=0)
    first = p.trace(POD_CLIENT, "10.96.0.50", 80, pick=2, record=True)
    [gone] = first.endpoints
    remaining = [e for e in FIVE if not gone.startswith(e["addresses"][0] + ":")]

    p.slices.put(endpoint_slice("aff", remaining))
    assert await p.sync()

    tx = p.nft["ip"].last_transaction
    assert tx is not None
    assert any(isinstance(o.obj, Element) and o.obj.map == "affinity" for o in tx.operations)
    assert gone not in p.trace(POD_CLIENT, "10.96.0.50", 80).endpoints
    assert len(p.trace(POD_CLIENT, "10.96.0.50", 80).endpoints) == 4


async def test_network_programming_latency_counts_from_the_slice_change() -> None:
    p = await loaded(services=0)
    p.clock.advance(2.5)
    changed_at = p.clock.now() - dt.timedelta(seconds=1.5)
    p.services.put(service("web", "10.96.0.10"))
    p.slices.put(
        endpoint_slice(
            "web",
            FIVE,
            annotations={
                "endpoints.kubernetes.io/last-change-trigger-time": changed_at.isoformat()
            },
        )
    )

    assert await p.sync()

    histogram = p.manager.metrics.network_programming
    assert (histogram.count, histogram.sum) == (1, 1.5)
    assert p.manager.metrics.last_sync.value == p.clock.now().timestamp()
    assert p.manager.metrics.elements.value > 0


@pytest.mark.looptime
async def test_changes_in_a_burst_are_applied_together_within_min_sync_period() -> None:
    p = Proxy(services=[service("web", "10.96.0.10")], slices=[endpoint_slice("web", FIVE)])
    loop = asyncio.get_running_loop()
    task = asyncio.create_task(p.manager.run())
    try:
        await asyncio.sleep(5)
        assert len(p.nft["ip"].transactions) == 1  # the first full sync
        for i in range(4):  # four changes 0.1 s apart
            p.slices.put(endpoint_slice("web", FIVE[: 4 - i % 2]))
            await asyncio.sleep(0.1)
        await asyncio.sleep(2)
        starts = len(p.nft["ip"].transactions)
        assert starts == 3  # the first change at once, the other three one second later
        assert len(p.trace(POD_CLIENT, "10.96.0.10", 80).endpoints) == 3

        await asyncio.sleep(60)  # no periodic full sync after syncPeriod (30 s)...
        assert len(p.nft["ip"].transactions) == starts
        await asyncio.sleep(3600)  # ...but after kube-proxy's full-sync period (1 h)
        full = p.nft["ip"].last_transaction
        assert full is not None
        assert str(full).startswith("add table")
        assert len(p.nft["ip"].transactions) == starts + 1
        assert loop.time() == pytest.approx(3667.4)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_table_from_an_incompatible_version_is_replaced_in_one_transaction() -> None:
    p = Proxy(services=[service("web", "10.96.0.10")], slices=[endpoint_slice("web", FIVE)])
    tx = p.nft["ip"].new_transaction()
    tx.add(Table())
    tx.add(Map(name="service-ips", type="ipv4_addr : verdict"))  # an older layout's definition
    await p.nft["ip"].run(tx)

    assert await p.sync()

    last = p.nft["ip"].last_transaction
    assert last is not None
    assert [op.verb for op in last.operations[:3]] == [Verb.ADD, Verb.DELETE, Verb.ADD]
    assert len(p.trace(POD_CLIENT, "10.96.0.10", 80).endpoints) == 5


async def test_the_conntrack_reconciler_is_timed_when_udp_endpoints_change() -> None:
    dns = service("dns", "10.96.0.53", ports=[("dns", 53, "UDP")])
    web = service("web", "10.96.0.80")
    eps = [endpoint("10.244.1.1"), endpoint("10.244.2.1")]
    p = await loaded(dns, web, endpoint_slice("dns", eps, ports=[("dns", 53, "UDP")]), services=0)
    m = p.manager.metrics
    assert m.conntrack_sync_duration["ip"].count == 1  # the first sync found UDP endpoints

    p.slices.put(endpoint_slice("web", [endpoint("10.244.3.1")]))  # TCP only: no pass
    assert await p.sync()
    assert m.conntrack_sync_duration["ip"].count == 1

    p.slices.put(endpoint_slice("dns", eps[:1], ports=[("dns", 53, "UDP")]))
    assert await p.sync()
    assert m.conntrack_sync_duration["ip"].count == 2
    assert set(m.conntrack_sync_duration.series) == {"ip"}
