"""pyproject.toml and requirements/runtime.txt say the same thing about the runtime dependencies.

``pip install .`` reads only pyproject.toml (ranges); the packages bundle requirements/runtime.txt
(the pinned closure). A module the code imports that only one of them names installs in one path
and fails with ``ModuleNotFoundError`` in the other. Pure file reading: no network, no build.
"""

from __future__ import annotations

import ast
import importlib.metadata
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[3]
RUNTIME_TXT = REPO / "requirements/runtime.txt"
DIRECT_HEADER = "# Direct dependencies"
TRANSITIVE_HEADER = "# Transitive"
OWN_PACKAGES = {"nodeagent", "cri_protos", "csi_protos"}


def declared() -> dict[str, Requirement]:
    """pyproject.toml's [project] dependencies, by canonical name."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(spec) for spec in project["dependencies"]]
    return {canonicalize_name(r.name): r for r in reqs}


def pinned() -> tuple[dict[str, Version], dict[str, Version]]:
    """runtime.txt's pins, split into its direct block and its transitive block."""
    direct: dict[str, Version] = {}
    transitive: dict[str, Version] = {}
    block = None
    for line in RUNTIME_TXT.read_text().splitlines():
        if line.startswith(DIRECT_HEADER):
            block = direct
        elif line.startswith(TRANSITIVE_HEADER):
            block = transitive
        elif line and not line.startswith("#"):
            assert block is not None, f"{line!r} comes before the '{DIRECT_HEADER}' block"
            name, _, version = line.partition("==")
            assert version, f"runtime.txt pins exact versions: {line!r}"
            block[canonicalize_name(name)] = Version(version)
    return direct, transitive


def imported_modules() -> dict[str, set[str]]:
    """Top-level third-party modules imported anywhere in the shipped code -> importing files."""
    modules: dict[str, set[str]] = {}
    for package in sorted(OWN_PACKAGES):
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.partition(".")[0]
                    if top in sys.stdlib_module_names or top in OWN_PACKAGES | {"__future__"}:
                        continue
                    modules.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return modules


def test_pyproject_declares_exactly_the_direct_pins_of_runtime_txt() -> None:
    direct, transitive = pinned()

    assert sorted(declared()) == sorted(direct), (
        "pyproject.toml [project] dependencies and runtime.txt's direct block name different "
        "packages: add the range or the pin on the other side"
    )
    assert not set(direct) & set(transitive)


def test_every_pin_satisfies_its_declared_range() -> None:
    direct, _ = pinned()

    outside = {
        name: f"{direct[name]} not in {req.specifier}"
        for name, req in declared().items()
        if name in direct and not req.specifier.contains(direct[name], prereleases=True)
    }

    assert outside == {}


def test_every_imported_third_party_module_is_declared_and_pinned() -> None:
    owners = importlib.metadata.packages_distributions()
    direct, _ = pinned()
    names = set(declared()) & set(direct)

    undeclared = {
        module: sorted(files)
        for module, files in imported_modules().items()
        if not {canonicalize_name(d) for d in owners.get(module, [])} & names
    }

    assert undeclared == {}, "imported but in neither pyproject.toml nor runtime.txt's direct block"


@pytest.mark.parametrize("module", ["dbus_fast", "prometheus_client", "multidict", "yaml"])
def test_the_import_scan_sees_modules_imported_inside_packages(module: str) -> None:
    # Guards the scan above against silently finding nothing (a wrong root, a parse shortcut).
    assert module in imported_modules()
