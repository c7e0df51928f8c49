"""Shared pytest configuration for every tier.

Fixture plugins for the real components live in ``tests/harness`` (importable as ``harness``)
and are loaded here so every tier can use them; importing them starts nothing.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import AsyncIterator

import pytest

pytest_plugins = [
    name
    for name in (
        "harness.fixtures_controlplane",
        "harness.fixtures_runtime",
        "harness.fixtures_csi",
    )
    if importlib.util.find_spec(name) is not None
]


@pytest.fixture(autouse=True)
async def _no_leaked_tasks() -> AsyncIterator[None]:
    """Fail a test that leaves asyncio tasks running behind it (as kopf does)."""
    loop = asyncio.get_running_loop()
    before = set(asyncio.all_tasks(loop))
    yield
    current = asyncio.current_task(loop)
    leaked = [t for t in asyncio.all_tasks(loop) - before if t is not current and not t.done()]
    for t in leaked:
        t.cancel()
    assert not leaked, f"test leaked asyncio tasks: {leaked}"
