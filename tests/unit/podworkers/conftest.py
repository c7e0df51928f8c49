"""Fixtures for the pods stack over the fakes (see ``pod_stack``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from pod_stack import Stack, make_runtime, running_stack

from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.fake_runtime import FakeRuntime


@pytest.fixture
def server() -> FakeApiServer:
    return FakeApiServer()


@pytest.fixture
def runtime(server: FakeApiServer) -> FakeRuntime:
    return make_runtime(server)


@pytest.fixture
async def stack(server: FakeApiServer, runtime: FakeRuntime) -> AsyncIterator[Stack]:
    async with running_stack(server, runtime) as s:
        yield s
