"""A first sync that finds the table holding nothing (a node that just booted) loads it in
steps; any other full sync stays one transaction. Either way the table ends up the same."""

from __future__ import annotations

from typing import Any

from proxy_builders import EXTERNAL_CLIENT, NODE, NODE_IP, POD_CLIENT, Proxy, endpoint, service
from proxy_builders import endpoint_slice as slice_of

from nodeagent.nft import NftError, Transaction
from nodeagent.nft.objects import Chain
from nodeagent.testing.fake_nft import FakeNFTables

SHARED = endpoint("10.244.9.9")  # backs every service: one hairpin element, many owners


def objects() -> list[dict[str, Any]]:
    """Six service ports of different shapes, sharing an endpoint."""
    return [
        service("a", "10.96.0.10"),
        slice_of("a", [endpoint("10.244.1.1"), SHARED]),
        service("b", "10.96.0.11", type_="NodePort", node_ports={"http": 30011}),
        slice_of("b", [endpoint("10.244.2.1", node=NODE), SHARED]),
        service("c", "10.96.0.12", sessionAffinity="ClientIP"),
        slice_of("c", [endpoint("10.244.3.1"), endpoint("10.244.3.2"), SHARED]),
        service("d", "10.96.0.13", ports=[("dns", 53, "UDP"), ("http", 80, "TCP")]),
        slice_of("d", [SHARED], ports=[("dns", 53, "UDP"), ("http", 8080, "TCP")]),
        service("e", "10.96.0.14"),  # no endpoints: rejected
    ]


def proxy(**settings: Any) -> Proxy:
    objs = objects()
    return Proxy(
        services=[o for o in objs if "spec" in o],
        slices=[o for o in objs if "endpoints" in o],
        **settings,
    )


class FailingRun(FakeNFTables):
    """Fails its ``n``-th run (1-based) like nft refusing that transaction."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    async def run(self, tx: Transaction) -> None:
        if len(self.transactions) + 1 == self.n:
            self.fail_next.append(NftError("Error: Could not process rule: No buffer space"))
        await super().run(tx)


async def test_an_empty_table_is_loaded_in_steps_to_the_same_rules_as_in_one_transaction() -> None:
    at_once, stepwise = proxy(), proxy(first_load_step=1)

    assert await at_once.sync()
    assert await stepwise.sync()

    assert len(at_once.nft["ip"].transactions) == 1
    assert len(stepwise.nft["ip"].transactions) == 3  # 6 service ports: 1, 2, then 3 (of 4)
    assert stepwise.dump() == at_once.dump()
    assert stepwise.trace(EXTERNAL_CLIENT, NODE_IP, 30011).endpoints == [
        "10.244.2.1:8080",
        "10.244.9.9:8080",
    ]
    assert stepwise.trace(POD_CLIENT, "10.96.0.14", 80).verdicts == {"REJECT"}


async def test_partial_syncs_after_a_stepwise_load_change_only_what_changed() -> None:
    p = proxy(first_load_step=2)
    assert await p.sync()
    reference = proxy()
    assert await reference.sync()

    for q in (p, reference):  # "a" loses the shared endpoint; b, c and d still use it
        q.slices.put(slice_of("a", [endpoint("10.244.1.1")]))
        assert await q.sync()

    tx = p.nft["ip"].last_transaction
    assert tx is not None
    assert [(op.verb.value, op.obj.container) for op in tx.operations] == [  # type: ignore[union-attr]
        ("delete", "service-endpoints-tcp"),  # slot 1 of "a" (the hairpin element stays)
        ("delete", "service-ips"),  # "a" now goes to cluster-1 instead of cluster-2
        ("add", "service-ips"),
    ]
    assert p.dump() == reference.dump()
    assert p.trace(POD_CLIENT, "10.96.0.10", 80).endpoints == ["10.244.1.1:8080"]


async def test_a_table_with_rules_is_replaced_in_one_transaction_even_on_a_first_sync() -> None:
    first = proxy(first_load_step=2)
    assert await first.sync()
    before = first.dump()

    restarted = proxy(first_load_step=2)  # an agent restart: new process, same kernel table
    restarted.nft = first.nft
    restarted.manager = type(first.manager)(
        settings=restarted.settings, services=restarted.services, slices=restarted.slices,
        nft=first.nft, conntrack=restarted.conntrack, clock=restarted.clock,
    )  # fmt: skip
    runs = len(first.nft["ip"].transactions)
    assert await restarted.sync()

    assert len(first.nft["ip"].transactions) == runs + 1
    assert restarted.dump() == before


async def test_a_failed_step_leaves_a_partial_table_that_the_next_full_sync_completes() -> None:
    reference = proxy()
    assert await reference.sync()
    p = proxy(first_load_step=2)
    p.nft["ip"] = FailingRun(2)
    p.manager = type(p.manager)(
        settings=p.settings, services=p.services, slices=p.slices,
        nft=p.nft, conntrack=p.conntrack, clock=p.clock,
    )  # fmt: skip

    assert not await p.sync()
    assert p.trace(POD_CLIENT, "10.96.0.10", 80).endpoints == ["10.244.1.1:8080", "10.244.9.9:8080"]
    assert p.trace(POD_CLIENT, "10.96.0.13", 80).verdicts == {"DROP"}  # not loaded yet

    assert await p.sync()

    assert len(p.nft["ip"].transactions) == 3  # step 1, step 2 (refused), one full sync
    assert p.dump() == reference.dump()


async def test_removing_the_last_service_of_a_shape_deletes_its_chains_in_the_partial_sync() -> (
    None
):
    p = proxy()
    assert await p.sync()
    assert "chain ip nodeagent affinity-10800" in p.dump()

    p.services.remove("default", "c")  # the only ClientIP service, the only one with 3 endpoints
    p.slices.remove("default", "c-abc")
    assert await p.sync()

    tx = p.nft["ip"].last_transaction
    assert tx is not None
    deleted = {op.obj.name for op in tx.operations if isinstance(op.obj, Chain)}
    assert {"affinity-10800", "cluster-3"} <= deleted
    reference = Proxy(
        services=[o for o in objects() if "spec" in o and o["metadata"]["name"] != "c"],
        slices=[o for o in objects() if "endpoints" in o and o["metadata"]["name"] != "c-abc"],
    )
    assert await reference.sync()
    assert p.dump() == reference.dump()  # as a full sync would build it: no unused chain left
