"""Fixtures for the package tests: the .deb and .rpm are built once per test session (per xdist
worker) into a private temporary directory by ``packaging/build.sh``; the venv it bundles comes
from ~/.cache/nodeagent (flock-serialised there), so the parallel builds stay cheap and safe."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging_tools import DpkgRoot, Packages, build, run

import nodeagent


@pytest.fixture(scope="session")
def packages() -> Iterator[Packages]:
    if os.geteuid() != 0:
        pytest.skip("package tests need root (mount namespaces, dpkg --root)")
    out = Path(tempfile.mkdtemp(prefix="nodeagent-dist-"))
    try:
        yield build(out, nodeagent.__version__)
    finally:
        shutil.rmtree(out)


@pytest.fixture
def dpkg_root() -> Iterator[DpkgRoot]:
    root = DpkgRoot()
    try:
        yield root
    finally:
        root.remove()


@pytest.fixture
def scratch_dir() -> Iterator[Path]:
    """A temporary directory deleted right after the test, whatever its outcome."""
    path = Path(tempfile.mkdtemp(prefix="nodeagent-pkgtest-"))
    try:
        yield path
    finally:
        shutil.rmtree(path)


@pytest.fixture(scope="session")
def deb_tree(packages: Packages) -> Iterator[Path]:
    """The .deb's files unpacked (``dpkg-deb -x``) once per session. Read-only for tests."""
    path = Path(tempfile.mkdtemp(prefix="nodeagent-deb-tree-"))
    try:
        run("dpkg-deb", "-x", packages.deb, path)
        yield path
    finally:
        shutil.rmtree(path)
