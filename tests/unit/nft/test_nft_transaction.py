"""Transactions render to the nft script nft expects, and bad objects are caught before nft."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from nodeagent.nft import Chain, Element, InvalidTransaction, Map, Rule, Set, Table, Transaction


def tx() -> Transaction:
    return Transaction(family="ip", table="nodeagent")


def test_objects_render_as_nft_commands() -> None:
    t = tx()
    t.add(Table(comment="owned by nodeagent"))
    t.add(Chain(name="nat-prerouting", type="nat", hook="prerouting", priority=-100))
    t.flush(Chain(name="nat-prerouting"))
    t.add(Map(name="service-ips", type="ipv4_addr . inet_proto . inet_service : verdict"))
    t.add(Set(name="aff", type="ipv4_addr", flags=("dynamic", "timeout"), timeout=60, size=9))
    t.add(Rule(chain="nat-prerouting", rule="jump services", comment="to services"))
    t.insert(Rule(chain="nat-prerouting", rule="counter"))
    t.replace(Rule(chain="nat-prerouting", rule="accept", handle=7))
    t.delete(Rule(chain="nat-prerouting", handle=7))
    t.create(Set(name="ips", typeof="ip daddr"))
    t.delete(Map(name="old"))

    assert str(t).splitlines() == [
        'add table ip nodeagent { comment "owned by nodeagent" ; }',
        "add chain ip nodeagent nat-prerouting { type nat hook prerouting priority -100 ; }",
        "flush chain ip nodeagent nat-prerouting",
        "add map ip nodeagent service-ips"
        " { type ipv4_addr . inet_proto . inet_service : verdict ; }",
        "add set ip nodeagent aff"
        " { type ipv4_addr ; flags dynamic,timeout ; timeout 60s ; size 9 ; }",
        'add rule ip nodeagent nat-prerouting jump services comment "to services"',
        "insert rule ip nodeagent nat-prerouting counter",
        "replace rule ip nodeagent nat-prerouting handle 7 accept",
        "delete rule ip nodeagent nat-prerouting handle 7",
        "create set ip nodeagent ips { typeof ip daddr ; }",
        "delete map ip nodeagent old",
    ]


def test_runs_of_elements_share_one_command_per_set() -> None:
    t = tx()
    t.add(Element(map="m", key=("10.0.0.1", "tcp", "80"), value=("goto a",), comment="ns/a:http"))
    t.add(Element(map="m", key=("10.0.0.2", "tcp", "80"), value=("drop",)))
    t.add(Element(set="s", key=("10.0.0.1",)))
    t.delete(Element(map="m", key=("10.0.0.3", "udp", "53"), value=("drop",)))

    assert str(t).splitlines() == [
        'add element ip nodeagent m { 10.0.0.1 . tcp . 80 comment "ns/a:http" : goto a, '
        "10.0.0.2 . tcp . 80 : drop }",
        "add element ip nodeagent s { 10.0.0.1 }",
        "delete element ip nodeagent m { 10.0.0.3 . udp . 53 }",
    ]


def test_destroy_is_emulated_for_nft_without_it() -> None:
    t = tx()
    t.destroy(Chain(name="gone"))
    assert str(t).splitlines() == [
        "add chain ip nodeagent gone",
        "flush chain ip nodeagent gone",
        "delete chain ip nodeagent gone",
    ]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        pytest.param(
            lambda t: t.add(Chain(name="bad name")), "invalid chain name", id="space in name"
        ),
        pytest.param(
            lambda t: t.add(Rule(chain="c", rule="accept", comment='say "hi"')),
            "invalid comment",
            id="quote in comment",
        ),
        pytest.param(
            lambda t: t.add(Rule(chain="c", rule="accept; flush ruleset")),
            "invalid rule text",
            id="a second command smuggled into a rule",
        ),
        pytest.param(
            lambda t: t.add(Element(map="m", key=("1.2.3.4",))),
            "needs a value",
            id="map element without value",
        ),
        pytest.param(
            lambda t: t.add(Element(set="s", key=("1.2.3.4 }",))),
            "invalid key part",
            id="brace in an element key",
        ),
        pytest.param(
            lambda t: t.replace(Rule(chain="c", rule="accept")),
            "needs the rule's handle",
            id="replace without handle",
        ),
        pytest.param(lambda t: t.add(Set(name="s")), "needs a type", id="set without type"),
        pytest.param(
            lambda t: t.add(Chain(name="c", type="nat", hook="output")),
            "type, hook and priority go together",
            id="base chain without priority",
        ),
        pytest.param(
            lambda t: t.flush(Rule(chain="c", rule="x")), "cannot flush a rule", id="flush a rule"
        ),
        pytest.param(
            lambda t: t.add(Rule(chain="c", rule="x", comment="x" * 129)),
            "at most 128",
            id="long comment",
        ),
    ],
)
def test_the_first_invalid_object_is_latched(
    build: Callable[[Transaction], object], message: str
) -> None:
    t = tx()
    build(t)
    t.add(Chain(name="also bad"))

    assert t.err is not None
    assert message in str(t.err)
    assert isinstance(t.err, InvalidTransaction)
    assert str(t).splitlines()[-1] == f"# error: {t.err}"


@pytest.mark.parametrize(
    ("elements", "message"),
    [
        pytest.param(
            [Element(map="m", key=("1",))], "needs a value", id="map element without value"
        ),
        pytest.param([Element(set="s", key=("1", ""))], "invalid key part ''", id="empty key part"),
        pytest.param(
            [Element(set="s", key=("1",)), Element(set="s", key=("a b",))],
            "invalid key part 'a b'",
            id="space in the second element",
        ),
        pytest.param([Element(set="s", key=("1",), comment='"')], "invalid comment", id="comment"),
        pytest.param(
            [Element(map="m", key=("1",), value=("x,y",))], "invalid value part", id="value"
        ),
        pytest.param([Element(set="bad name", key=("1",))], "invalid set name", id="set name"),
    ],
)
def test_elements_added_in_bulk_are_checked_like_single_ones(
    elements: list[Element], message: str
) -> None:
    t = tx()
    t.add_elements(elements)
    assert t.err is not None
    assert message in str(t.err)


def test_elements_added_in_bulk_render_like_single_ones() -> None:
    one, bulk = tx(), tx()
    els = [Element(map="m", key=("10.0.0.1", "80"), value=("10.1.0.1", "8080")),
           Element(set="s", key=("10.0.0.1",), comment="ns/a")]  # fmt: skip
    for el in els:
        one.add(el)
    bulk.add_elements(els)
    assert str(one) == str(bulk)
    assert bulk.err is None
