"""The package graph of nodeagent: no cycle between packages, every package in a layer.

``lint-imports`` (``make lint``) checks the layers and the managers' independence declared in
pyproject.toml; it cannot see a cycle between two packages of one layer, nor a cycle between
the subpackages or modules inside a package, nor a package that no layer names. This test builds
the import graph with grimp (the library import-linter runs on) and checks those.
"""

from __future__ import annotations

import itertools
import tomllib
from collections.abc import Mapping, Set
from pathlib import Path

import grimp
import pytest

ROOT = "nodeagent"
TESTS_ONLY = {"nodeagent.testing"}
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(ROOT, cache_dir=None)


def _packages(graph: grimp.ImportGraph) -> list[str]:
    return sorted(m for m in graph.modules if m.startswith(ROOT) and graph.find_children(m))


def _sibling_imports(graph: grimp.ImportGraph, package: str) -> dict[str, set[str]]:
    """Which children of ``package`` import which others (a child with what is below it)."""
    children = sorted(graph.find_children(package))
    return {
        a: {
            b
            for b in children
            if a != b and graph.direct_import_exists(importer=a, imported=b, as_packages=True)
        }
        for a in children
    }


def _cycle(edges: Mapping[str, Set[str]]) -> list[str] | None:
    """One cycle of ``edges`` as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start)) is not None:
            return found
    return None


def _explain(graph: grimp.ImportGraph, cycle: list[str]) -> str:
    lines = []
    for a, b in itertools.pairwise(cycle):
        lines.append(f"{a} -> {b}:")
        for dep in sorted(
            graph.find_matching_direct_imports(import_expression=f"{a}.** -> {b}.**")
            + graph.find_matching_direct_imports(import_expression=f"{a} -> {b}.**")
            + graph.find_matching_direct_imports(import_expression=f"{a}.** -> {b}")
            + graph.find_matching_direct_imports(import_expression=f"{a} -> {b}"),
            key=lambda d: (d["importer"], d["imported"]),
        )[:5]:
            lines.append(f"    {dep['importer']} imports {dep['imported']}")
    return "\n".join(lines)


def test_no_cycle_between_packages(graph: grimp.ImportGraph) -> None:
    """Within every package of nodeagent (nodeagent itself included), its subpackages and
    modules, each taken with everything below it, import each other without a cycle."""
    for package in _packages(graph):
        cycle = _cycle(_sibling_imports(graph, package))
        assert cycle is None, f"import cycle inside {package}:\n" + _explain(graph, cycle)


def test_every_package_is_in_a_layer(graph: grimp.ImportGraph) -> None:
    """A package no layer names escapes the layers contract: each of nodeagent's children is
    in exactly one layer (but the test fakes, which another contract keeps out of production
    code)."""
    config = tomllib.loads(PYPROJECT.read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers"]
    named = [
        part.strip() for layer in layers for part in layer.replace(":", "|").split("|") if part
    ]
    assert len(named) == len(set(named)), "a package is in two layers"
    children = set(graph.find_children(ROOT)) - TESTS_ONLY
    assert sorted(children - set(named)) == []
    assert sorted(set(named) - children) == []
