"""Transactions: the full sync (the whole table, atomically) and partial syncs (changed elements).

The full sync never removes the table: ``add table``, then ``add`` + ``flush`` of every set, map
and chain, then every rule and element, all in one transaction. Until it commits the old rules
keep working; when it commits the new ones are complete, so an agent restart opens no window
without service rules. Chains and sets of ours that are no longer wanted (load-balancing shapes
nobody uses, leftovers of another version) are flushed and deleted in the same transaction; the
dynamic ``affinity`` map is never flushed, so clients keep their endpoint across restarts.
``recreate`` (the fallback when a full sync fails, e.g. on a set of an older layout that nft
cannot redefine) deletes and re-adds the table inside the same transaction, still without a
window.

A partial sync adds the shape chains that are new since the last sync and sends the element
diff: deletes first (a changed value is a delete and an add), batched per map.

A table that holds nothing yet (a node's first sync after boot) is loaded in steps: the first
is a full sync of the first service ports, each next one (:func:`more_elements`) adds the
chains and elements of the next service ports. There is no rule to keep working meanwhile, so
the steps need not be one transaction, and building one step overlaps nft loading the last.
"""

from __future__ import annotations

from collections.abc import Iterable

from nodeagent.nft.objects import Chain, Element, Map, Rule, Set, Table
from nodeagent.nft.transaction import Transaction
from nodeagent.proxy.layout import DYNAMIC, Layout
from nodeagent.proxy.programmed import ElementDiff, Programmed

TABLE_COMMENT = "rules for Kubernetes Services, owned by nodeagent"


def full_sync(
    tx: Transaction,
    *,
    layout: Layout,
    programmed: Programmed,
    existing_chains: Iterable[str] = (),
    existing_sets: Iterable[str] = (),
    existing_maps: Iterable[str] = (),
    recreate: bool = False,
) -> None:
    tx.add(Table(comment=TABLE_COMMENT))
    if recreate:
        tx.delete(Table())
        tx.add(Table(comment=TABLE_COMMENT))
    sets = layout.sets()
    for s in sets:
        tx.add(s)
        if s.name not in DYNAMIC:
            tx.flush(s)
    chains = [*layout.chains(), *_dynamic(layout, sorted(programmed.chains()))]
    for chain, _ in chains:
        tx.add(chain)
        tx.flush(chain)
    if not recreate:
        _remove_stale(
            tx,
            chains={c.name for c, _ in chains},
            sets={s.name for s in sets},
            existing_chains=existing_chains,
            existing_sets=existing_sets,
            existing_maps=existing_maps,
        )
    for chain, rules in chains:
        for rule in rules:
            tx.add(Rule(chain=chain.name, rule=rule))
    tx.add_elements(layout.static_elements())
    for _, elements in programmed.by_container():
        tx.add_elements(elements)


def partial_sync(
    tx: Transaction,
    *,
    layout: Layout,
    diff: ElementDiff,
    new_chains: Iterable[str],
    unused_chains: Iterable[str] = (),
) -> None:
    """New shape chains first, then the element changes; last, the shape chains no service
    port uses any more (their last references, map elements, are deleted earlier in the same
    transaction), so a partial sync leaves the table as a full sync would build it."""
    _add_chains(tx, layout, new_chains)
    tx.delete_elements(_grouped(diff.deleted))
    tx.add_elements(_grouped(diff.added))
    for chain, _ in _dynamic(layout, sorted(unused_chains)):
        tx.flush(chain)  # older kernels refuse to delete a chain that still has rules
        tx.delete(chain)


def more_elements(
    tx: Transaction,
    *,
    layout: Layout,
    new_chains: Iterable[str],
    elements: Iterable[tuple[str, list[Element]]],
) -> None:
    """The next step of a table loaded in steps: the shape chains its elements are the first
    to use, then the elements (grouped by set or map)."""
    _add_chains(tx, layout, new_chains)
    for _, group in elements:
        tx.add_elements(group)


def _add_chains(tx: Transaction, layout: Layout, names: Iterable[str]) -> None:
    for chain, rules in _dynamic(layout, sorted(names)):
        tx.add(chain)
        tx.flush(chain)
        for rule in rules:
            tx.add(Rule(chain=chain.name, rule=rule))


def _dynamic(layout: Layout, names: Iterable[str]) -> list[tuple[Chain, list[str]]]:
    found = []
    for name in names:
        rules = layout.dynamic_rules(name)
        if rules is None:
            raise ValueError(f"not a load-balancing or affinity chain: {name}")
        found.append((Chain(name=name), rules))
    return found


def _remove_stale(
    tx: Transaction,
    *,
    chains: set[str],
    sets: set[str],
    existing_chains: Iterable[str],
    existing_sets: Iterable[str],
    existing_maps: Iterable[str],
) -> None:
    stale_chains = sorted(set(existing_chains) - chains)
    for name in stale_chains:
        tx.flush(Chain(name=name))
    for name in sorted(set(existing_sets) - sets):
        tx.delete(Set(name=name))
    for name in sorted(set(existing_maps) - sets):
        tx.delete(Map(name=name))
    for name in stale_chains:
        tx.delete(Chain(name=name))


def _grouped(elements: Iterable[Element]) -> list[Element]:
    """Elements grouped by set or map (so each map's run renders as one command)."""
    groups: dict[str, list[Element]] = {}
    for el in elements:
        groups.setdefault(el.container, []).append(el)
    return [el for name in sorted(groups) for el in groups[name]]
