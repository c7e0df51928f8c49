"""FakeNFTables applies transactions all-or-nothing and fails like nft 1.0.6 does."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from nodeagent.nft import Busy, Chain, Element, Exists, Map, NotFound, Rule, Set, Table
from nodeagent.nft.transaction import Transaction
from nodeagent.testing.fake_nft import FakeNFTables


async def loaded() -> FakeNFTables:
    nft = FakeNFTables()
    tx = nft.new_transaction()
    tx.add(Table())
    tx.add(Chain(name="services"))
    tx.add(Chain(name="lb"))
    tx.add(Map(name="vips", type="ipv4_addr : verdict"))
    tx.add(Set(name="ips", type="ipv4_addr"))
    tx.add(Rule(chain="services", rule="ip daddr vmap @vips"))
    tx.add(Rule(chain="lb", rule="ip daddr @ips accept"))
    tx.add(Element(map="vips", key=("10.96.0.1",), value=("goto lb",)))
    tx.add(Element(set="ips", key=("10.96.0.1",)))
    await nft.run(tx)
    return nft


async def test_a_failing_operation_leaves_the_table_untouched() -> None:
    nft = await loaded()
    before = nft.dump()
    tx = nft.new_transaction()
    tx.flush(Map(name="vips"))
    tx.add(Element(set="ips", key=("10.96.0.2",)))
    tx.delete(Element(set="ips", key=("10.96.0.99",)))  # missing: the whole transaction fails

    with pytest.raises(NotFound):
        await nft.run(tx)

    assert nft.dump() == before
    assert nft.last_transaction is tx


async def test_check_validates_without_applying() -> None:
    nft = await loaded()
    before = nft.dump()
    tx = nft.new_transaction()
    tx.add(Element(set="ips", key=("10.96.0.2",)))
    await nft.check(tx)
    assert nft.dump() == before


@pytest.mark.parametrize(
    ("op", "error"),
    [
        pytest.param(lambda tx: tx.create(Table()), Exists, id="create an existing table"),
        pytest.param(lambda tx: tx.delete(Chain(name="lb")), Busy, id="delete a chain with rules"),
        pytest.param(lambda tx: tx.delete(Set(name="ips")), Busy, id="delete a set a rule uses"),
        pytest.param(lambda tx: tx.flush(Chain(name="nope")), NotFound, id="flush a missing chain"),
        pytest.param(
            lambda tx: tx.add(Rule(chain="lb", rule="ip daddr @nope accept")),
            NotFound,
            id="rule looking up a missing set",
        ),
        pytest.param(
            lambda tx: tx.add(Rule(chain="lb", rule="jump nope")),
            NotFound,
            id="jump to a missing chain",
        ),
        pytest.param(
            lambda tx: tx.add(Element(map="vips", key=("10.96.0.1",), value=("drop",))),
            Exists,
            id="add an existing key with another value",
        ),
        pytest.param(
            lambda tx: tx.add(Element(map="vips", key=("10.96.0.2",), value=("goto nope",))),
            NotFound,
            id="verdict element to a missing chain",
        ),
        pytest.param(
            lambda tx: tx.add(Map(name="vips", type="ipv4_addr : inet_service")),
            Exists,
            id="redefine a map with another type",
        ),
    ],
)
async def test_errors_match_nft(
    op: Callable[[Transaction], object], error: type[Exception]
) -> None:
    nft = await loaded()
    tx = nft.new_transaction()
    op(tx)
    with pytest.raises(error):
        await nft.run(tx)


async def test_a_chain_is_deletable_once_flushed_and_unreferenced_in_the_same_transaction() -> None:
    nft = await loaded()
    tx = nft.new_transaction()
    tx.flush(Map(name="vips"))
    tx.flush(Chain(name="lb"))
    tx.delete(Chain(name="lb"))
    await nft.run(tx)
    assert await nft.list_names("chains") == ["services"]


async def test_adding_what_exists_is_a_no_op_and_dump_is_sorted() -> None:
    nft = await loaded()
    tx = nft.new_transaction()
    tx.add(Table())
    tx.add(Chain(name="lb"))
    tx.add(Element(set="ips", key=("10.96.0.1",)))
    await nft.run(tx)

    assert nft.dump().splitlines() == [
        "add table ip nodeagent",
        "add chain ip nodeagent lb",
        "add chain ip nodeagent services",
        "add set ip nodeagent ips { type ipv4_addr ; }",
        "add map ip nodeagent vips { type ipv4_addr : verdict ; }",
        "add rule ip nodeagent lb ip daddr @ips accept",
        "add rule ip nodeagent services ip daddr vmap @vips",
        "add element ip nodeagent ips { 10.96.0.1 }",
        "add element ip nodeagent vips { 10.96.0.1 : goto lb }",
    ]
    assert await nft.list_names("sets") == ["ips"]
    assert await nft.list_names("maps") == ["vips"]
    assert [e.value for e in await nft.list_elements("map", "vips")] == [("goto lb",)]


async def test_rules_get_handles_and_can_be_replaced_and_deleted_by_handle() -> None:
    nft = await loaded()
    state = nft.state()
    assert state is not None
    handle = state.rules("lb")[0].handle
    tx = nft.new_transaction()
    tx.insert(Rule(chain="lb", rule="counter"))
    tx.replace(Rule(chain="lb", rule="drop", handle=handle))
    await nft.run(tx)
    now = nft.state()
    assert now is not None
    assert [r.rule for r in now.rules("lb")] == ["counter", "drop"]

    tx = nft.new_transaction()
    tx.delete(Rule(chain="lb", handle=now.rules("lb")[0].handle))
    await nft.run(tx)
    assert [r.rule for r in (nft.state() or now).rules("lb")] == ["drop"]


async def test_deleting_the_table_removes_everything_and_latched_errors_stop_runs() -> None:
    nft = await loaded()
    tx = nft.new_transaction()
    tx.delete(Table())
    await nft.run(tx)
    assert nft.dump() == ""
    assert await nft.list_names("chains") == []

    bad = nft.new_transaction()
    bad.add(Chain(name="bad name"))
    with pytest.raises(Exception, match="invalid chain name"):
        await nft.run(bad)
