"""Elements added in bulk are one run inside the transaction, but everyone sees them one by one."""

from __future__ import annotations

import pytest

from nodeagent.nft import Element, Map, Set, Table, Transaction, Verb
from nodeagent.testing.fake_nft import FakeNFTables

ELEMENTS = [
    Element(map="m", key=("10.0.0.1", "tcp", "80"), value=("goto a",), comment="ns/a:http"),
    Element(map="m", key=("10.0.0.2", "tcp", "80"), value=("goto a",), comment="ns/b:http"),
    Element(set="s", key=("10.0.0.1",)),
]


def tx() -> Transaction:
    return Transaction(family="ip", table="nodeagent")


def test_a_bulk_add_lists_one_operation_per_element_in_order() -> None:
    bulk = tx()
    bulk.add_elements(ELEMENTS)
    bulk.delete_elements(ELEMENTS[:1])

    assert len(bulk) == 4
    assert [(op.verb, op.obj) for op in bulk.operations] == [
        *((Verb.ADD, el) for el in ELEMENTS),
        (Verb.DELETE, ELEMENTS[0]),
    ]


def test_elements_of_one_map_share_a_command_up_to_a_thousand() -> None:
    bulk = tx()
    bulk.add_elements(Element(set="s", key=(f"10.0.{i // 256}.{i % 256}",)) for i in range(2500))

    lines = str(bulk).splitlines()

    assert [line.count(",") + 1 for line in lines] == [1000, 1000, 500]
    assert lines[0].startswith("add element ip nodeagent s { 10.0.0.0, 10.0.0.1, ")


@pytest.mark.parametrize(
    ("element", "message"),
    [
        pytest.param(Element(set="s", key=("1",), value=("x",)), "has no value", id="set value"),
        pytest.param(Element(map="m", key=("1",), value=("",)), "invalid value part", id="empty"),
        pytest.param(Element(set="s", key=("1",), comment="é" * 65), "at most 128", id="bytes"),
        pytest.param(Element(set="s", key=("a\tb",)), "invalid key part", id="tab"),
    ],
)
def test_one_bad_element_among_many_is_reported_by_itself(element: Element, message: str) -> None:
    bulk = tx()
    bulk.add_elements([*ELEMENTS, element, *ELEMENTS])

    assert bulk.err is not None
    assert message in str(bulk.err)


async def test_the_fake_applies_a_bulk_add_element_by_element() -> None:
    nft = FakeNFTables()
    setup = nft.new_transaction()
    setup.add_elements([])  # nothing to add: nothing recorded
    assert len(setup) == 0
    setup.add(Table())
    setup.add(Map(name="m", type="ipv4_addr . inet_proto . inet_service : verdict"))
    setup.add(Set(name="s", type="ipv4_addr"))
    await nft.run(setup)

    bulk = nft.new_transaction()
    bulk.add_elements([el._replace(value=("drop",)) if el.map else el for el in ELEMENTS])
    await nft.run(bulk)

    assert nft.dump().splitlines()[-2:] == [
        'add element ip nodeagent m { 10.0.0.1 . tcp . 80 comment "ns/a:http" : drop,'
        ' 10.0.0.2 . tcp . 80 comment "ns/b:http" : drop }',
        "add element ip nodeagent s { 10.0.0.1 }",
    ]


def test_a_script_rendered_early_is_rendered_again_after_a_change() -> None:
    t = tx()
    t.add_elements(ELEMENTS[2:])
    before = str(t)
    t.add(Element(set="s", key=("10.0.0.9",)))
    t.add(Element(set="bad name", key=("1",)))

    assert before == "add element ip nodeagent s { 10.0.0.1 }\n"
    assert str(t).splitlines() == [
        "add element ip nodeagent s { 10.0.0.1, 10.0.0.9 }",
        "add element ip nodeagent bad name { 1 }",
        "# error: add element: invalid set name 'bad name'",
    ]
